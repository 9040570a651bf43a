//! Rampart's model: the compiled configuration that the data plane runs on.
//!
//! The control plane compiles a config file (or a command line) into a [`Snapshot`]: listeners,
//! routes with precompiled matchers, upstreams with their targets and balancing policies, indices
//! instead of names. A snapshot is immutable once built; per-target health and per-listener
//! connection counts are shared state that a reload carries over. This crate has no runtime and
//! knows no file format: `rampart-config` builds snapshots, `rampart-proxy` runs them.
//!
//! - [`snapshot`]: the snapshot, its listeners, upstreams and targets.
//! - [`route`]: HTTP routes: matchers, actions, and the route's filter chain.
//! - [`filter`]: HTTP filters as compiled: chains, the built-ins' settings (rate limits with GCRA
//!   and the Redis script, auth credentials, JWT keys, compression), external filters.
//! - [`tcp_route`]: TCP routes (delayed binding): matchers on a connection's first bytes, actions,
//!   payload filters.
//! - [`balance`]: balancing policies, hash keys, Maglev tables.
//! - [`health`]: per-target health shared between checkers and workers.
//! - [`metrics`]: traffic counters, one cell per worker, summed on a scrape.
//! - [`net`]: IP networks (`10.0.0.0/8`).
//! - [`tls`]: TLS on listeners (certificates by SNI) and to upstreams.
//! - [`defaults`]: the default of every optional setting.
#![forbid(unsafe_code)]

pub mod acme;
pub mod balance;
pub mod cache;
pub mod defaults;
pub mod discovery;
pub mod error_pages;
pub mod filter;
pub mod health;
pub mod http3;
pub mod log_target;
pub mod metrics;
pub mod net;
pub mod outlier;
pub mod queue;
pub mod retry;
pub mod route;
pub mod snapshot;
pub mod split;
pub mod sticky;
pub mod tcp_route;
pub mod tls;
pub mod trace;

mod maglev;

pub use snapshot::*;
