//! HTTP/3 on an HTTP listener with TLS (`http3 = true`): QUIC on UDP at the listener's own
//! address and port, its limits, and what TCP responses advertise (`Alt-Svc`).

use std::time::Duration;

/// The limits of a listener's HTTP/3 (QUIC) connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http3Settings {
    /// Request streams a client may have open at once (QUIC's bidirectional stream limit).
    pub max_concurrent_streams: u32,
    /// Flow-control window of each stream, and of the whole connection.
    pub stream_window: u32,
    pub connection_window: u32,
    /// A connection with no packet either way for this long is closed (QUIC's idle timeout, the
    /// lower of ours and the client's).
    pub idle_timeout: Duration,
    /// 0-RTT (TLS early data) accepted: off unless enabled, and then only for safe methods
    /// (others get 425 Too Early).
    pub early_data: bool,
    /// Streams a client may reset in one second before its connection is closed (as
    /// `http2_max_resets_per_second`).
    pub max_resets_per_second: u32,
    /// Every new client proves its address first (a Retry round trip), not only when many
    /// handshakes are in flight (`http3_retry = "always"`).
    pub always_retry: bool,
}

impl Default for Http3Settings {
    fn default() -> Self {
        Http3Settings {
            max_concurrent_streams: crate::defaults::HTTP3_MAX_CONCURRENT_STREAMS,
            stream_window: crate::defaults::HTTP3_STREAM_WINDOW,
            connection_window: crate::defaults::HTTP3_CONNECTION_WINDOW,
            idle_timeout: crate::defaults::HTTP3_IDLE_TIMEOUT,
            early_data: false,
            max_resets_per_second: crate::defaults::HTTP2_MAX_RESETS_PER_SECOND,
            always_retry: false,
        }
    }
}

/// The `Alt-Svc` value that advertises HTTP/3 on `port` for a day (what Caddy and nginx write).
pub fn default_alt_svc(port: u16) -> Box<str> {
    format!("h3=\":{port}\"; ma=86400").into()
}
