//! The HTTP reverse proxy (HTTP/1.x, and HTTP/2 on both sides), in layers, each knowing only the
//! one below (docs/design.md, "Layers"):
//!
//! - [`connection`]: the connection stage's choice: HTTP/2 (ALPN or the cleartext preface) or
//!   HTTP/1.
//! - The muxes, neither importing the other: [`h1`] (one client connection: read a request head
//!   with the HTTP/1 codec, answer it, repeat while keep-alive lasts, park when idle; its
//!   downstream side [`h1::downstream::H1Downstream`]) and [`h2`] (the connection driver, each
//!   stream as a request, its downstream side). HTTP/3 would be a third folder beside them.
//! - [`request`]: the request layer, which knows no protocol: route, filters, the route's action
//!   (local answer, redirect, [`static_files`], or the [`exchange`]), and the end of every request
//!   (metrics, the access log, the filters' log phase). It reaches the client through
//!   [`client_side::ClientSide`] and [`downstream::Downstream`] (request body frames in; interim
//!   responses, response head, body, local answers out), which each mux implements.
//! - [`exchange`]: one proxied request: upstream sessions (HTTP/1 from the pool or new, an HTTP/2
//!   stream on a shared connection, [`h2pool`]), request head and body out, response back, retries
//!   before the first response byte. [`client`]: the same exchange as an internal client (owned
//!   requests with no client connection: the mirror, background requests).
//! - [`attempts`]: what each attempt at an upstream did, and [`attempts::observe`], the one place
//!   that hears of each attempt and of each request's end.
//! - [`context`]: the per-request context (route, target, timings, status, bytes, error,
//!   attempts) that the access log reads; [`error`]: [`error::HttpError`], every way a request can
//!   fail: its source, status, log name and whether it may be retried.
//! - [`filter`]: the filter model: the [`filter::HttpFilter`] trait, the parts of a message
//!   filters see, and how a route's chain runs around the exchange (the built-ins are in
//!   [`crate::filters`]).
//! - [`message`]: the neutral response head and body frames at the seam; [`head_out`]: writing
//!   heads (HTTP/1 text, HTTP/2 fields): hop-by-hop fields dropped, forwarded headers, edits.
//! - [`target`]: request targets; [`affinity`]: the consistent-hashing key of a request;
//!   [`local`]: the bytes of Rampart's own answers; [`mirror`]: a route's mirror.
//! - [`state`]: what a worker keeps for HTTP: [`pool`] (idle upstream connections), [`park`]
//!   (idle client connections held outside any task), buffers; [`iobuf`]: the read buffer;
//!   [`body_framing`]: where an HTTP/1 body ends (HTTP/1 upstream responses, HTTP/1 requests).
//! - [`access_log`]: access log lines (JSON or combined).
//!
//! Routes themselves are compiled data in `rampart_model::route`.

pub mod access_log;
pub mod affinity;
pub mod attempts;
pub mod body_framing;
mod cache;
pub mod client;
pub mod client_side;
pub mod connection;
pub mod context;
pub mod date;
pub mod downstream;
pub mod error;
pub mod exchange;
pub mod filter;
pub mod h1;
pub mod h2;
pub mod h2pool;
pub mod h3;
pub mod head_out;
pub mod iobuf;
pub mod local;
pub mod message;
mod mirror;
pub mod park;
pub mod pool;
pub mod request;
pub mod state;
pub mod static_files;
pub mod target;
#[cfg(test)]
pub(crate) mod testing;
pub mod trace;

pub use state::HttpWorkerState;
