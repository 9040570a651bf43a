//! Sans-IO protocol codecs for Rampart.
//!
//! Nothing here performs I/O or depends on a runtime: every codec takes bytes and returns parsed
//! values (or "need more bytes"), so each is unit-tested and fuzzed in isolation.
//!
//! - [`h1`]: HTTP/1.x request and response heads and chunked bodies, strict against smuggling.
//! - [`proxy_protocol`]: HAProxy PROXY protocol v1 (text) and v2 (binary), both directions.
//! - [`message`]: the protocol-neutral message at the seam (fields wherever they are, body
//!   length, no HTTP/1 framing).
//! - [`h2map`]: HTTP/2 requests as HTTP/1.1 heads, neutral fields as HTTP/2 fields, the preface.
//! - [`hpack`]: HTTP/2's header compression (RFC 7541), decoding into buffers the caller owns.
//! - [`h2conn`]: the server side of an HTTP/2 connection, sans-IO: bytes in, events and frames out.
//! - [`h2frame`]: HTTP/2 frames (RFC 9113 section 6): read with their checks, and written.
//! - [`h2state`]: HTTP/2 streams and their states, flow-control windows.
//! - [`tls_peek`]: what the first bytes on a TLS port are (a handshake, plain HTTP, other).
//! - [`detect`]: which protocol a connection speaks, from its first bytes (TLS with its SNI and
//!   ALPN, HTTP/1 with its Host, HTTP/2 prior knowledge, SSH, PostgreSQL, Redis), for routing on
//!   them before any byte goes upstream.
//! - [`resp`]: RESP2, the Redis protocol: commands out, replies in (for the rate limiter's
//!   shared counters).
#![forbid(unsafe_code)]

pub mod detect;
pub mod h1;
pub mod h2conn;
pub mod h2frame;
pub mod h2map;
pub mod h2state;
pub mod hpack;
pub mod message;
pub mod proxy_protocol;
pub mod resp;
pub mod tls_peek;
pub mod trace_context;
