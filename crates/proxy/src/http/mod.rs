//! The HTTP/1.1 reverse proxy.
//!
//! - [`session`]: one client connection: read a request head, route it, answer it locally or
//!   proxy it, repeat while keep-alive lasts (pipelined requests are answered in order).
//! - [`exchange`]: one proxied request: upstream connection from the pool or a new one, request
//!   head and body out, response head and body back, retries before the first response byte.
//! - [`head_out`]: writing heads: hop-by-hop fields dropped, forwarded headers, header edits.
//! - [`route`]: compiled routes.
//! - [`affinity`]: the consistent-hashing key of a request (header, cookie or client address).
//! - [`pool`]: each worker's idle upstream connections.
//! - [`park`]: each worker's idle client connections, held outside any task.
//! - [`local`]: answers of Rampart's own (errors, `respond`, redirects).
//! - [`target`]: request targets: path and query, host without port, path rewrites.
//! - [`iobuf`]: the read buffer with cursors that these share.
//! - [`access_log`]: access log lines (JSON or combined).

pub mod access_log;
pub mod affinity;
pub mod exchange;
pub mod head_out;
pub mod iobuf;
pub mod local;
pub mod park;
pub mod pool;
pub mod session;
pub mod target;
