//! The default of every optional config key, in one place (documented in docs/config.md). The
//! config compiler and the command line's one-line modes both take them from here.

use std::time::Duration;

pub const MAX_CONNECTIONS: usize = 10_000;
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
pub const BUFFER_SIZE: usize = 16 * 1024;
pub const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a TCP listener with routes waits for the bytes that decide a connection's route.
pub const PEEK_TIMEOUT: Duration = Duration::from_secs(3);
/// The most bytes a TCP listener with routes holds while deciding.
pub const PEEK_MAX: usize = 16 << 10;
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const CONNECT_ATTEMPTS: usize = 3;
pub const PASSIVE_BACKOFF: Duration = Duration::from_secs(1);
pub const PASSIVE_BACKOFF_MAX: Duration = Duration::from_secs(30);
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
pub const CHECK_RISE: u32 = 2;
pub const CHECK_FALL: u32 = 3;
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a binary upgrade waits for the new process to be ready.
pub const UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);
pub const CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
pub const RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
pub const POOL_MAX_IDLE: usize = 1024;
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
pub const RETRIES: usize = 1;
/// Time a client has to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Entries in each TLS listener's session-id cache.
pub const TLS_SESSION_CACHE: usize = 20_000;
/// HTTP/2 listener limits.
pub const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 100;
pub const HTTP2_MAX_HEADER_LIST_SIZE: u32 = 64 * 1024;
/// One stream's window fills a 1 Gbit/s path with a 10 ms round trip (1.25 MB in flight).
pub const HTTP2_STREAM_WINDOW: u32 = 2 << 20;
pub const HTTP2_CONNECTION_WINDOW: u32 = 4 << 20;
pub const HTTP2_MAX_RESETS_PER_SECOND: u32 = 100;
