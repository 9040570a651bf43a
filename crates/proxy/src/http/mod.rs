//! The HTTP reverse proxy (HTTP/1.x, and HTTP/2 on both sides), in the order a request meets it:
//!
//! - [`connection`]: the connection stage: HTTP/2 (ALPN or the cleartext preface) or HTTP/1.
//! - [`session`]: one client connection past the connection stage: read a request head, take the
//!   current snapshot, route it, answer it locally or proxy it, log it, repeat while keep-alive
//!   lasts (pipelined requests are answered in order), park when idle.
//! - [`downstream`]: the seam between the client side and the exchange: [`downstream::Downstream`]
//!   (request body frames in; interim responses, response head, body, local answers out),
//!   implemented for HTTP/1 by [`downstream::H1Downstream`] (its request bodies read by
//!   [`h1_request_body`]).
//! - [`context`]: the per-request context (route, target, timings, status, bytes, error, and the
//!   [`attempts`] made at the upstream) that the access log reads; [`attempts::observe`] is the
//!   one place that hears of each attempt and of the request's end.
//! - [`error`]: [`error::HttpError`], every way a request can fail: its source, status, log
//!   name and whether it may be retried.
//! - [`client`]: the internal client: requests of Rampart's own (a mirror's copy, background
//!   requests with no client) sent through the exchange, their responses collected.
//! - [`exchange`]: one proxied request: upstream connection from the pool or a new one, request
//!   head and body out, response head and body back, retries before the first response byte.
//! - [`filter`]: the filter model: the [`filter::HttpFilter`] trait, the parts of a message
//!   filters see, and how a route's chain runs around the exchange (the built-ins are in
//!   [`crate::filters`]).
//! - [`head_out`]: writing heads: hop-by-hop fields dropped, forwarded headers, header edits.
//! - [`target`]: request targets: origin- or absolute-form, path and query, host, rewrites.
//! - [`affinity`]: the consistent-hashing key of a request (header, cookie or client address).
//! - [`local`]: the bytes of Rampart's own answers (errors, `respond`, redirects).
//! - [`static_files`]: the `static` action: files under a root (paths kept inside it, index,
//!   fallback, listings, validators and conditions, ranges, precompressed siblings, MIME types).
//! - [`state`]: what a worker keeps for HTTP: [`pool`] (idle upstream connections), [`park`]
//!   (idle client connections held outside any task), buffers.
//! - [`iobuf`]: the read buffer with cursors that these share; [`body_framing`]: where an HTTP/1
//!   body ends, its chunks decoded (responses from HTTP/1 upstreams, requests from HTTP/1 clients).
//! - [`access_log`]: access log lines (JSON or combined).
//! - [`client_side`]: what the request path needs of a request's client side, for HTTP/1
//!   (a [`crate::stream::Stream`]) and one HTTP/2 stream alike.
//! - [`h2`]: HTTP/2 from clients: the connection driver, each stream as a request, its
//!   downstream side. [`h2pool`]: HTTP/2 connections to targets, shared by a worker's requests
//!   (the exchange over them is `exchange::upstream_h2`).
//!
//! Routes themselves are compiled data in `rampart_model::route`.

pub mod access_log;
pub mod affinity;
pub mod attempts;
pub mod body_framing;
pub mod client;
pub mod client_side;
pub mod connection;
pub mod context;
pub mod date;
pub mod downstream;
pub mod error;
pub mod exchange;
pub mod filter;
pub mod h1_request_body;
pub mod h2;
pub mod h2_send;
pub mod h2pool;
pub mod head_out;
pub mod iobuf;
pub mod local;
pub mod message;
mod mirror;
pub mod park;
pub mod pool;
pub mod session;
pub mod state;
pub mod static_files;
pub mod target;
#[cfg(test)]
pub(crate) mod testing;

pub use state::HttpWorkerState;
