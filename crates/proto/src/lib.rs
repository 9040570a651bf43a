//! Sans-IO protocol codecs for Rampart.
//!
//! Nothing here performs I/O or depends on a runtime: every codec takes bytes and returns parsed
//! values (or "need more bytes"), so each is unit-tested and fuzzed in isolation.
//!
//! - [`proxy_protocol`]: HAProxy PROXY protocol v1 (text) and v2 (binary), both directions.
#![forbid(unsafe_code)]

pub mod proxy_protocol;
