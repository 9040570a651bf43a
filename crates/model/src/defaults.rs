//! The default of every optional config key, in one place (documented in docs/config.md). The
//! config compiler and the command line's one-line modes both take them from here.

use std::time::Duration;

pub const MAX_CONNECTIONS: usize = 10_000;
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
pub const BUFFER_SIZE: usize = 16 * 1024;
pub const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const CONNECT_ATTEMPTS: usize = 3;
pub const PASSIVE_BACKOFF: Duration = Duration::from_secs(1);
pub const PASSIVE_BACKOFF_MAX: Duration = Duration::from_secs(30);
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
pub const CHECK_RISE: u32 = 2;
pub const CHECK_FALL: u32 = 3;
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
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
