//! The built-in HTTP filters, each an [`HttpFilter`](crate::http::filter::HttpFilter) implemented
//! on its compiled settings (`rampart_model::filter`). The chain dispatches to them with a
//! `match` (`crate::http::filter`) written from the model's list of built-ins
//! (`rampart_model::with_builtin_filters!`), so adding one means: its settings and a line of that
//! list in the model (variant, settings type, `type` name), its config keys in `rampart-config`
//! (and the name's arm in its `builtin_filter` match), and its implementation here. Whatever it
//! keeps per worker is its `HttpFilter::WorkerState`: no other list to extend.
//!
//! - [`headers`]: `request_headers`, `response_headers` (static edits are folded at compile time
//!   and never run here unless a filter before them edits per request).
//! - [`rewrite`]: path rewrites (`strip_prefix`, `replace_prefix`, `rewrite`).
//! - [`body_limit`]: `body_limit` and a route's `max_body_size`.
//! - [`request_id`]: keep or make `X-Request-Id` (UUIDv7).
//! - [`ip_filter`]: allow and deny networks.
//! - [`cors`]: CORS preflights and response headers.
//! - [`jwt`]: JSON Web Tokens (verification in [`auth`]).
//! - [`rate_limit`]: token buckets per key, in the process or in Redis.
//! - [`compress`]: gzip, brotli and zstd response bodies by `Accept-Encoding`.
//! - [`auth`]: `basic_auth`, `api_key`, `forward_auth`, and the verification behind them.
//! - [`worker`]: what filters keep per worker.

pub mod auth;
pub mod body_limit;
pub mod compress;
pub mod cors;
pub mod headers;
pub mod ip_filter;
pub mod jwt;
pub mod rate_limit;
pub mod request_id;
pub mod rewrite;
pub mod worker;
