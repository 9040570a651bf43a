//! Rampart's data plane.
//!
//! Workers call into this crate for every accepted connection. It never reads a config file: the
//! control plane compiles one into a [`Snapshot`] (the types of `rampart-model`) and workers read
//! the current one per accepted connection (L4 keeps it) and per HTTP request.
//!
//! - [`conn`]: the connection stage every listener shares: connection slot, PROXY header, TLS
//!   handshake, then the L4 relay or the HTTP session.
//! - [`slot`]: what an accepted connection holds: its place in the limit, stream and client.
//! - [`stream`]: the byte stream under both (plain TCP or TLS), and socket writes.
//! - [`tls`]: TLS over a socket (rustls): server and client handshakes, what they negotiated.
//! - [`l4`]: one TCP connection past the stage: target choice, connect, relay, session record.
//! - [`http`]: the HTTP reverse proxy: the connection stage (HTTP/1 or HTTP/2), the request
//!   path, the downstream seam and its neutral message, the filter model, exchange, pools.
//! - [`filters`]: the built-in HTTP filters (rewrites, header edits, limits, request ids, CORS,
//!   auth with its caches and the JWKS fetcher, compression).
//! - [`connect`]: target choice and connect with bounded retries, shared by L4 and HTTP.
//! - [`relay`]: the bidirectional copy loop (read/write or splice), with half-close and idle timeout.
//! - [`balance`]: each worker's balancing state for the policies of `rampart_model::balance`.
//! - [`background`]: the control plane's context (a thread, a worker context) for the health
//!   checks and JWKS fetches.
//! - [`checker`]: active health checks, on that context.
//! - [`worker`]: what one worker owns, and the calls the runtime makes; [`counters`]: its counters.
//! - [`session_log`]: JSON-lines session records and access logs, written by one thread;
//!   [`refusal`]: the records of connections closed before a relay or an HTTP session.
//! - [`log_summary`]: repeated warnings (an outage) logged once, then counted per interval for
//!   the whole process.
//! - `free_list`, `pipes`: the shrinking free lists behind the pools, and splice pipes.

pub mod background;
pub mod balance;
pub mod checker;
pub mod conn;
pub mod connect;
pub mod counters;
pub mod filters;
pub mod http;
pub mod l4;
pub mod log_summary;
pub mod refusal;
pub mod relay;
pub mod session_log;
pub mod slot;
pub mod stream;
pub mod syslog;
pub mod telemetry;
pub mod tls;
pub mod udp;
pub mod worker;

mod free_list;
mod pipes;

pub use rampart_model::{self as model, Snapshot};

/// The Rust examples of docs/design.md (writing a filter), compiled by `cargo test --doc` so the
/// documentation cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/design.md")]
pub struct DesignDocExamples;
#[cfg(test)]
mod no_stale_index;
