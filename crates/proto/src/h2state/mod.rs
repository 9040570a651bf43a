//! HTTP/2 connection state, sans-IO: the streams of a connection and their states
//! ([`streams`]), and flow control ([`window`]). The third part of issue 38's own HTTP/2,
//! beside [`crate::hpack`] and [`crate::h2frame`]; the connection that drives them (and the muxes
//! over it) is not built yet.

pub mod streams;
pub mod window;

pub use streams::{Headers, IdHasher, Live, StreamState, Streams};
pub use window::{RecvWindow, SendWindow};
