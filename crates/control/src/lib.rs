//! Rampart's control plane as a library: where the config comes from, how it is put in force
//! while serving, and the control-plane tasks that publish into the snapshot or beside it. The
//! `rampart` binary keeps the command line, signals, the admin API, the logger and binary
//! upgrades, and calls into this crate.
//!
//! - [`source`]: the config sources (a file with its includes, a hosts file, the command line,
//!   etcd), each producing the same raw config for the same compiler; `file:line:col` errors.
//! - [`watch`]: `run --watch`, inotify on the config's files, a reload request per burst.
//! - [`etcd`]: the config in etcd (`push`, `pull`, `run --etcd`) through its JSON gateway, and
//!   the watch that follows it.
//! - [`publisher`]: the [`Publisher`] holds the engine and puts a reload, new DNS answers and the
//!   ACME names of the snapshot in force; [`start_only`] refuses a reload of a setting read at
//!   start only; [`bind_failure`] names the listener that could not be bound.
//! - [`discovery`]: targets from DNS (A, AAAA, SRV), asked off the request path.
//! - [`acme`]: certificates from an ACME CA (HTTP-01, TLS-ALPN-01, DNS-01), stored and renewed.
//!
//! Errors at the public API are `thiserror` types ([`LoadError`], [`etcd::EtcdError`],
//! [`bind_failure::BindFailure`], `std::io::Error`); the etcd and ACME internals chain errors
//! with `anyhow`, which [`etcd::EtcdError`] wraps.
//!
//! One `unsafe` block (registering the inotify descriptor with tokio, in [`watch`]), hence
//! `deny` rather than `forbid`.
#![deny(unsafe_code)]

pub mod acme;
pub mod bind_failure;
pub mod discovery;
pub mod etcd;
pub mod publisher;
pub mod source;
pub mod start_only;
pub mod watch;

pub use publisher::{Applied, Publisher, Reload, ReloadOutcome, ReloadRequest, Started};
pub use source::{load_config_file, summary, LoadError, Loaded, Source};
pub use start_only::{CommandLine, StartOnly};
