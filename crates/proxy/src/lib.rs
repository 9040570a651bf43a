//! Rampart's data plane.
//!
//! Workers call into this crate for every accepted connection. It never reads a config file: the
//! control plane compiles one into a [`Snapshot`] (an immutable value built from the types in
//! [`snapshot`]) and workers read whatever snapshot was current when a connection was accepted.
//!
//! - [`snapshot`]: the compiled configuration the data plane runs on.
//! - [`health`]: per-target health shared between health checkers and workers.
//! - [`checker`]: active TCP health checks, run by the control plane.
//! - [`balance`]: balancing policies and their per-worker state.
//! - [`worker`]: what one worker owns: buffer and pipe pools, balancer state, counters, session log.
//! - `free_list`: the shrinking free lists behind those pools.
//! - [`connect`]: target choice and connect with bounded retries, shared by L4 and HTTP.
//! - [`http`]: the HTTP/1.1 reverse proxy: sessions, routes, upstream pools, access log.
//! - [`l4`]: one TCP connection's life: PROXY header, target choice, connect, relay, record.
//! - [`relay`]: the bidirectional copy loop (read/write or splice), with half-close and idle timeout.
//! - [`session_log`]: JSON-lines session records, buffered per worker, written by one thread.

pub mod balance;
pub mod checker;
pub mod conn;
pub mod connect;
pub mod http;
pub mod l4;
pub mod relay;
pub mod session_log;
pub mod stream;
pub mod worker;

mod free_list;
mod pipes;

pub use rampart_model::{self as model, Snapshot};
