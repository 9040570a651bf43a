//! The default of every optional config key, in one place (documented in docs/config.md). The
//! config compiler and the command line's one-line modes both take them from here.

use std::time::Duration;

pub const MAX_CONNECTIONS: usize = 10_000;
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A UDP listener's sessions: nothing either way for this long ends one (Envoy's UDP proxy
/// waits 60 s, nginx 10 min; DNS-style traffic wants far less).
pub const UDP_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
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
/// A DNS answer is asked again when its TTL runs out, clamped to this minimum...
pub const DNS_TTL_MIN: Duration = Duration::from_secs(1);
/// ...and this maximum (nginx honours TTLs the same way).
pub const DNS_TTL_MAX: Duration = Duration::from_secs(300);
/// How long a name that cannot be resolved keeps its last answer before its upstream is
/// called degraded.
pub const DNS_GRACE: Duration = Duration::from_secs(30);
/// How long a name that answers "no address" (NXDOMAIN, or no record of the type) after it had
/// addresses keeps its last answer before its targets go (HAProxy's `hold nx` default).
pub const DNS_HOLD: Duration = Duration::from_secs(30);
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
/// `retry_max_body_size`: a request body up to this size is kept (one copy in memory while the
/// request may still be retried) so that a retry can send it again.
pub const RETRY_BODY_MAX: usize = 64 * 1024;
/// How long a worker's first picks pass over a target that just failed a request.
pub const RETRY_PASS_OVER: Duration = Duration::from_secs(1);
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
/// HTTP/3 listener limits: as HTTP/2's, and QUIC's idle timeout at Caddy's and quic-go's 30 s.
pub const HTTP3_MAX_CONCURRENT_STREAMS: u32 = 100;
pub const HTTP3_STREAM_WINDOW: u32 = 2 << 20;
pub const HTTP3_CONNECTION_WINDOW: u32 = 4 << 20;
pub const HTTP3_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// `jwt`: clock skew allowed on `exp` and `nbf`.
pub const JWT_LEEWAY: Duration = Duration::from_secs(60);
/// `jwt`: longest token read; a longer one is refused before any decoding.
pub const JWT_MAX_TOKEN_LEN: usize = 8 << 10;
/// `jwt`: verified tokens each worker remembers.
pub const JWT_CACHE_SIZE: usize = 4096;
/// `jwt` with a JWKS URL: how often the document is fetched again (a `Cache-Control: max-age`
/// of the answer replaces it, within `JWKS_MIN_REFRESH` and this).
pub const JWKS_REFRESH: Duration = Duration::from_secs(300);
/// `jwt` with a JWKS URL: the least time between two fetches, however often workers ask for an
/// early one (a token with an unknown `kid`); it keeps a flood of forged `kid`s from turning into
/// a flood of fetches.
pub const JWKS_MIN_REFRESH: Duration = Duration::from_secs(5);
/// `jwt` with a JWKS URL: time for one fetch (connect, TLS, request, whole body).
pub const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// `jwt` with a JWKS URL: first wait after a failed fetch, doubled per failure up to
/// `JWKS_REFRESH` (and at most a minute).
pub const JWKS_RETRY: Duration = Duration::from_secs(1);
/// `jwt` with a JWKS URL: largest document accepted.
pub const JWKS_MAX_BODY: usize = 1 << 20;
/// `basic_auth`: how long a verified user and password stay trusted without a new hash check.
pub const PASSWORD_CACHE_TTL: Duration = Duration::from_secs(300);
/// `basic_auth`: how long a wrong password is answered from memory (a burst of the same wrong
/// guess costs one hash check).
pub const PASSWORD_REFUSED_TTL: Duration = Duration::from_secs(10);
/// `basic_auth`: outcomes each worker remembers (accepted and refused, each).
pub const PASSWORD_CACHE_SIZE: usize = 1024;
/// `basic_auth`: the realm browsers show in their login prompt.
pub const BASIC_AUTH_REALM: &str = "rampart";
/// `basic_auth`: password checks one worker may have queued or running per filter; past it,
/// 503 (a flood of guesses cannot pile up hash work).
pub const BASIC_AUTH_MAX_PENDING_CHECKS: usize = 16;
/// `api_key`: the request header a key is read from when no other place is named.
pub const API_KEY_HEADER: &str = "x-api-key";
/// `forward_auth`: time for one check (connect, request, the whole answer).
pub const FORWARD_AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// `forward_auth`: the largest denial body passed on to the client.
pub const FORWARD_AUTH_MAX_BODY: usize = 64 << 10;

/// `[tracing]`: spans (or log records) each worker keeps waiting for export, how many go in one
/// export, and how often a worker exports what it has.
pub const OTLP_QUEUE: usize = 4096;
pub const OTLP_BATCH: usize = 512;
pub const OTLP_INTERVAL: Duration = Duration::from_secs(1);
