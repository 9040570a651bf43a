//! The config file as written, before validation. Every struct denies unknown keys, and every
//! value that validation may reject keeps its location (`Spanned`). Durations and sizes are
//! strings that name their kind in type errors ([`described`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub mod described;

/// One config file (the files of a config with includes are merged into one of these).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `include = ["conf.d/*.toml", ...]`: more files of the same config, read after this one.
    #[serde(default)]
    pub include: Vec<Spanned<String>>,
    /// `[global]`, in at most one of the files.
    pub global: Option<Spanned<RawGlobal>>,
    #[serde(default)]
    pub listeners: BTreeMap<Spanned<String>, RawListener>,
    #[serde(default)]
    pub upstreams: BTreeMap<Spanned<String>, RawUpstream>,
    /// `[admin]`: the control port.
    pub admin: Option<Spanned<RawAdmin>>,
    /// `[acme]`: where the certificates of listeners' `acme` names come from.
    pub acme: Option<Spanned<RawAcme>>,
    /// `[caches.NAME]`: HTTP cache stores that routes' `cache` use.
    #[serde(default)]
    pub caches: BTreeMap<Spanned<String>, RawCache>,
    /// `[tracing]`: W3C Trace Context on proxied requests.
    pub tracing: Option<Spanned<RawTracing>>,
}

/// `[tracing]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// The share of new traces (requests that come without a valid `traceparent`) marked
    /// sampled, 0 to 1.
    pub sampling: Option<Spanned<f64>>,
    /// Tail decisions: export the spans of a request that failed, or took longer than this,
    /// sampled or not.
    pub errors: Option<Spanned<bool>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub slower_than: Option<Spanned<String>>,
    /// The OTLP collector (`http://HOST:PORT[/PATH]` or `https://`); without it nothing is
    /// exported.
    pub endpoint: Option<Spanned<String>>,
    /// `"http"` (OTLP/HTTP protobuf, the default) or `"grpc"`.
    pub protocol: Option<Spanned<String>>,
    /// `ca` for an `https://` endpoint (the system's roots by default).
    pub ca: Option<Spanned<String>>,
    pub service_name: Option<Spanned<String>>,
    /// Further resource attributes: `{ "deployment.environment" = "prod" }`.
    #[serde(default)]
    pub resource: BTreeMap<String, Spanned<String>>,
    /// Spans (and log records) waiting per worker, and the batch size and interval of exports.
    pub queue: Option<Spanned<i64>>,
    pub batch: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub interval: Option<Spanned<String>>,
}

/// `[caches.NAME]`: a memory store shared by the workers, and optionally a disk store.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// The store's bytes (`"256MiB"`).
    #[serde(default, deserialize_with = "described::size")]
    pub size: Option<Spanned<String>>,
    /// The largest response body stored (a tenth of `size`, at most 8 MiB, by default).
    #[serde(default, deserialize_with = "described::size")]
    pub max_object_size: Option<Spanned<String>>,
    /// The most a heuristic freshness lifetime may be (RFC 9111 section 4.2.2; default a day).
    #[serde(default, deserialize_with = "described::duration")]
    pub heuristic_max: Option<Spanned<String>>,
    /// How long a miss waits for another request for the same key (default 5 s; `0s`: no
    /// coalescing).
    #[serde(default, deserialize_with = "described::duration")]
    pub coalesce_timeout: Option<Spanned<String>>,
    /// A directory that keeps the store on disk too (relative to the config file): responses
    /// survive restarts and binary upgrades, and larger ones fit.
    pub disk: Option<Spanned<String>>,
    /// The disk store's bytes (default 1 GiB).
    #[serde(default, deserialize_with = "described::size")]
    pub disk_size: Option<Spanned<String>>,
    /// The targeted cache-control fields followed, most specific first (RFC 9213 section 2.2;
    /// default `["CDN-Cache-Control"]`).
    pub targeted_fields: Option<Vec<Spanned<String>>>,
}

/// A route's `cache = { store = "NAME", key_fields = [...], key_cookies = [...], authorized = "...", max_object_size = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteCache {
    pub store: Spanned<String>,
    /// Request fields whose values are part of the key.
    #[serde(default)]
    pub key_fields: Vec<Spanned<String>>,
    /// Cookies whose values are part of the key.
    #[serde(default)]
    pub key_cookies: Vec<Spanned<String>>,
    /// Requests with `Authorization`: `"rfc"` (default), `"bypass"` or `"per_credential"`.
    pub authorized: Option<Spanned<String>>,
    /// The largest body this route stores (at most the store's `max_object_size`).
    #[serde(default, deserialize_with = "described::size")]
    pub max_object_size: Option<Spanned<String>>,
}

/// `[acme]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    /// The CA's directory URL (Let's Encrypt's production one by default).
    pub directory: Option<Spanned<String>>,
    /// Contact address given to the CA (expiry warnings go there).
    pub email: Option<Spanned<String>>,
    /// A PEM root the directory's own HTTPS certificate is checked against.
    pub ca: Option<Spanned<String>>,
    /// Where the account key and certificates are kept.
    pub storage: Option<Spanned<String>>,
    /// `http-01` (the default), `tls-alpn-01` or `dns-01`: the challenge for names that are not
    /// wildcards.
    pub challenge: Option<Spanned<String>>,
    /// `[acme.dns01]`: the DNS server DNS-01 answers are published on.
    pub dns01: Option<Spanned<RawDns01>>,
    /// `[acme.eab]`: the external account binding the CA gave.
    pub eab: Option<Spanned<RawEab>>,
    /// The certificate profile to ask for, when the CA offers it.
    pub profile: Option<Spanned<String>>,
    /// How many names are ordered at once (default [`rampart_model::acme::MAX_CONCURRENT_ORDERS`]).
    pub max_concurrent_orders: Option<Spanned<i64>>,
}

/// `[acme.eab]`: an external account binding's key identifier and HMAC key (base64url).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEab {
    pub kid: Spanned<String>,
    pub hmac_key: Option<Spanned<String>>,
    pub hmac_key_file: Option<Spanned<String>>,
}

/// `[acme.dns01]`: dynamic updates (RFC 2136) signed with a TSIG key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns01 {
    /// `IP:PORT` (or `IP`, port 53) of the zone's primary server.
    pub server: Spanned<String>,
    /// The zone to update; by default the one the server's SOA answer names.
    pub zone: Option<Spanned<String>>,
    /// The TSIG key's name, as the server knows it.
    pub key_name: Spanned<String>,
    /// `hmac-sha256` (the default), `hmac-sha384` or `hmac-sha512`.
    pub key_algorithm: Option<Spanned<String>>,
    /// The key's secret in base64 (better: `key_secret_file`).
    pub key_secret: Option<Spanned<String>>,
    /// A file holding the secret: base64 alone, or a BIND `key` clause (`tsig-keygen` output).
    pub key_secret_file: Option<Spanned<String>>,
}

/// `[admin]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `ADDR:PORT` or `unix:/path`.
    pub listen: Spanned<String>,
    pub token: Option<Spanned<String>>,
    pub token_file: Option<Spanned<String>>,
    /// Allow a non-loopback `listen` without a token.
    pub allow_remote: Option<bool>,
}

/// `[global]`: process-wide settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    /// Worker threads (the command line's `--workers` wins).
    pub workers: Option<Spanned<i64>>,
    /// Pin worker i to core i (the command line's `--pin` also turns it on).
    pub pin: Option<bool>,
    #[serde(default, deserialize_with = "described::duration")]
    pub drain_timeout: Option<Spanned<String>>,
    /// How long a binary upgrade waits for the new process to say it is ready.
    #[serde(default, deserialize_with = "described::duration")]
    pub upgrade_timeout: Option<Spanned<String>>,
    pub session_log: Option<Spanned<String>>,
    /// `error`, `warn`, `info`, `debug` or `trace` (`RUST_LOG` wins).
    pub log_level: Option<Spanned<String>>,
    /// `text` or `json` (`--log-format` wins).
    pub log_format: Option<Spanned<String>>,
    /// The DNS servers that resolve targets written by name (`"IP"` or `"IP:PORT"`); by default
    /// those of `/etc/resolv.conf`.
    pub resolvers: Option<Spanned<Vec<Spanned<String>>>>,
    /// A DNS answer is asked again when its TTL runs out, clamped to `dns_ttl_min`..`dns_ttl_max`.
    #[serde(default, deserialize_with = "described::duration")]
    pub dns_ttl_min: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub dns_ttl_max: Option<Spanned<String>>,
    /// How long a name that cannot be resolved keeps its last answer before its upstream is
    /// called degraded.
    #[serde(default, deserialize_with = "described::duration")]
    pub dns_grace: Option<Spanned<String>>,
    /// How long a name that answers "no address" after it had some keeps its last answer.
    #[serde(default, deserialize_with = "described::duration")]
    pub dns_hold: Option<Spanned<String>>,
}

/// `[listeners.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    /// Optional only for a listener that TCP routes hand connections to (`listener = "NAME"`).
    pub bind: Option<Spanned<String>>,
    pub protocol: Option<Spanned<String>>,
    /// Required for TCP; for HTTP, a catch-all route to it follows the listed routes.
    pub upstream: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub idle_timeout: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::size")]
    pub buffer_size: Option<Spanned<String>>,
    #[serde(default)]
    pub proxy_protocol_from: Vec<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub proxy_header_timeout: Option<Spanned<String>>,
    // TCP listeners with routes only.
    #[serde(default, deserialize_with = "described::duration")]
    pub peek_timeout: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::size")]
    pub peek_max: Option<Spanned<String>>,
    // HTTP listeners only.
    pub forwarded_headers: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub client_header_timeout: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub keepalive_timeout: Option<Spanned<String>>,
    pub access_log: Option<Spanned<RawAccessLog>>,
    /// HTTP/2 on this listener (default on) and its limits.
    pub http2: Option<Spanned<RawHttp2>>,
    pub http2_max_concurrent_streams: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::size")]
    pub http2_max_header_list_size: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::size")]
    pub http2_stream_window: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::size")]
    pub http2_connection_window: Option<Spanned<String>>,
    pub http2_max_resets_per_second: Option<Spanned<i64>>,
    /// HTTP/3 over QUIC on UDP at the same address (TLS listeners; default off) and its limits.
    pub http3: Option<Spanned<bool>>,
    pub http3_max_concurrent_streams: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::size")]
    pub http3_stream_window: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::size")]
    pub http3_connection_window: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub http3_idle_timeout: Option<Spanned<String>>,
    pub http3_early_data: Option<Spanned<bool>>,
    pub http3_max_resets_per_second: Option<Spanned<i64>>,
    /// "under_load" (default) or "always": when new clients must prove their address.
    pub http3_retry: Option<Spanned<String>>,
    /// UDP listeners: a session ends after this many replies (nginx's `proxy_responses`).
    pub session_responses: Option<Spanned<i64>>,
    /// `Alt-Svc` on the TCP side's responses: "auto" (default with `http3`), "off", or a value.
    pub alt_svc: Option<Spanned<String>>,
    #[serde(default)]
    pub routes: Vec<Spanned<RawRoute>>,
    /// HTTP filters every route of the listener runs first (unless it sets
    /// `inherit_filters = false`).
    #[serde(default)]
    pub filters: Vec<Spanned<RawFilter>>,
    /// Proxies whose `X-Forwarded-For` filters believe.
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    /// `[listeners.NAME.tls]`: terminate TLS.
    pub tls: Option<Spanned<RawListenerTls>>,
    /// `[listeners.NAME.error_pages]`: status or class (`"5xx"`) to page.
    #[serde(default)]
    pub error_pages: RawErrorPages,
    /// `false`: the listener's requests (or TCP sessions) are not traced under `[tracing]`.
    pub tracing: Option<Spanned<bool>>,
}

/// `http2`: `true`, `false`, or `"only"` (in clear, HTTP/2 by prior knowledge and nothing else).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawHttp2 {
    On(bool),
    Mode(String),
}

impl RawHttp2 {
    /// Whether HTTP/2 is on at all (`false` turns it off; a mode other than `"only"` is an error
    /// reported where the settings are compiled).
    pub fn on(&self) -> bool {
        !matches!(self, RawHttp2::On(false))
    }
}

/// `error_pages`: `404 = "errors/404.html"`, `5xx = { html = "5xx.html", json = "5xx.json" }`,
/// `503 = { body = "...", content_type = "text/plain" }`.
pub type RawErrorPages = BTreeMap<Spanned<String>, Spanned<RawErrorPage>>;

/// One error page: a file, or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawErrorPage {
    File(String),
    Table(RawErrorPageTable),
}

/// An error page as a table: inline (`body`, `content_type`), one `file` (with `content_type`),
/// or variants by media type (`html`, `json`, `text` files) chosen by the client's `Accept`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawErrorPageTable {
    pub body: Option<String>,
    pub file: Option<String>,
    pub content_type: Option<String>,
    pub html: Option<String>,
    pub json: Option<String>,
    pub text: Option<String>,
}

/// `[listeners.NAME.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerTls {
    #[serde(default)]
    pub certificates: Option<Spanned<Vec<Spanned<RawCertificate>>>>,
    /// Names whose certificates ACME obtains (and renews), served before `certificates`.
    pub acme: Option<Spanned<Vec<Spanned<String>>>>,
    /// On-demand TLS: a certificate obtained at the first handshake for an allowed name.
    pub acme_on_demand: Option<Spanned<RawOnDemand>>,
    /// A name one of the certificates serves: for clients whose name none has.
    pub default_certificate: Option<Spanned<String>>,
    pub strict_sni: Option<bool>,
    pub min_version: Option<Spanned<String>>,
    pub alpn: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub handshake_timeout: Option<Spanned<String>>,
    pub session_tickets: Option<bool>,
    /// Entries in the session-id cache (0: none).
    pub session_cache: Option<Spanned<i64>>,
    pub client_ca: Option<Spanned<String>>,
    pub client_auth: Option<Spanned<String>>,
    pub forward_client_cert: Option<Spanned<String>>,
}

/// `acme_on_demand = { allow = ["*.example.com"], ask = "http://...", per_minute = 10 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOnDemand {
    pub allow: Spanned<Vec<Spanned<String>>>,
    pub ask: Option<Spanned<String>>,
    pub per_minute: Option<Spanned<i64>>,
}

/// `{ cert = "FILE", key = "FILE" }`: a PEM chain (leaf first) and its private key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

/// `[upstreams.NAME.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    pub sni: Option<Spanned<String>>,
    pub ca: Option<Spanned<String>>,
    pub verify: Option<Spanned<bool>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub alpn: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `access_log = { path = "...", format = "json" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    pub path: Spanned<String>,
    pub format: Option<Spanned<String>>,
}

/// `[[listeners.NAME.routes]]`: a matcher, one action, and filters. HTTP and TCP listeners share
/// the table; the keys of the other kind are errors (compile says which).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: Option<String>,
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    // Actions: exactly one.
    pub upstream: Option<Spanned<String>>,
    pub respond: Option<Spanned<RawRespond>>,
    pub redirect: Option<Spanned<RawRedirect>>,
    #[serde(rename = "static")]
    pub static_files: Option<Spanned<RawStatic>>,
    /// `[{ upstream = "stable", weight = 95 }, { upstream = "canary", weight = 5, header = "x-canary" }]`.
    pub split: Option<Spanned<Vec<Spanned<RawSplitWay>>>>,
    /// `{ upstream = "shadow", percent = 10 }`.
    pub mirror: Option<Spanned<RawMirror>>,
    /// `{ store = "main" }`: responses kept and answered from a `[caches]` store.
    pub cache: Option<Spanned<RawRouteCache>>,
    /// The route's own `retries` and `retry_on`, over its upstream's.
    pub retries: Option<Spanned<i64>>,
    pub retry_on: Option<Spanned<Vec<Spanned<String>>>>,
    // TCP routes: actions and payload filters.
    pub listener: Option<Spanned<String>>,
    pub reject: Option<Spanned<bool>>,
    #[serde(default, deserialize_with = "described::size")]
    pub max_bytes: Option<Spanned<String>>,
    pub deny_regex: Option<Spanned<String>>,
    // Filters.
    pub strip_prefix: Option<Spanned<String>>,
    pub replace_prefix: Option<RawReplacePrefix>,
    pub rewrite: Option<RawRewrite>,
    #[serde(default)]
    pub request_headers: RawHeaderOps,
    #[serde(default)]
    pub response_headers: RawHeaderOps,
    #[serde(default, deserialize_with = "described::size")]
    pub max_body_size: Option<Spanned<String>>,
    /// `[{ type = "...", ... }, ...]`: the route's own filters, after the listener's.
    #[serde(default)]
    pub filters: Vec<Spanned<RawFilter>>,
    /// Whether the listener's filters run first (default true).
    pub inherit_filters: Option<Spanned<bool>>,
    /// Pages for this route's answers of Rampart's own, over the listener's.
    #[serde(default)]
    pub error_pages: RawErrorPages,
    /// `false`: the route's requests are not traced under `[tracing]`.
    pub tracing: Option<Spanned<bool>>,
}

/// One filter table, `{ type = "NAME", KEY = VALUE, ... }`: kept as spanned keys and values, so
/// that each type reads its own keys and every error points at the value it is about.
pub type RawFilter = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// `match = { ... }`: every condition given must hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    pub host: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub path_glob: Option<Spanned<String>>,
    pub path_regex: Option<Spanned<String>>,
    #[serde(default)]
    pub methods: Vec<Spanned<String>>,
    /// Header name to exact value.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub headers_present: Vec<String>,
    /// Header name to regex.
    #[serde(default)]
    pub headers_regex: BTreeMap<String, Spanned<String>>,
    /// Query parameter to exact value.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    #[serde(default)]
    pub query_present: Vec<String>,
    // TCP routes.
    pub protocol: Option<Spanned<String>>,
    pub sni: Option<Spanned<String>>,
    pub alpn: Option<Spanned<String>>,
    pub http_host: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    pub regex: Option<Spanned<String>>,
    #[serde(default)]
    pub source: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRespond {
    pub status: Option<Spanned<i64>>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    /// Where to: a URL (or a path).
    pub to: Option<Spanned<String>>,
    /// Or the same host, path and query under this scheme.
    pub scheme: Option<Spanned<String>>,
    /// With `scheme`: the port to redirect to (default: the scheme's own).
    pub port: Option<Spanned<i64>>,
    pub status: Option<Spanned<i64>>,
    #[serde(default)]
    pub keep_path: bool,
}

/// `static = { root = "DIR", ... }`: serve files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStatic {
    pub root: Spanned<String>,
    /// Index names tried in a directory (default `["index.html"]`).
    pub index: Option<Vec<Spanned<String>>>,
    /// A path under root served when no file is found.
    pub fallback: Option<Spanned<String>>,
    #[serde(default)]
    pub precompressed: bool,
    #[serde(default)]
    pub list: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplacePrefix {
    pub from: Spanned<String>,
    pub to: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRewrite {
    pub regex: Spanned<String>,
    pub replacement: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderOps {
    #[serde(default)]
    pub set: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub add: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub remove: Vec<Spanned<String>>,
    /// `response_headers` only: edit every response, not only those of a success status.
    pub always: Option<Spanned<bool>>,
}

/// `[upstreams.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub targets: Spanned<Vec<Spanned<RawTarget>>>,
    pub balance: Option<Spanned<String>>,
    /// What `consistent_hash` hashes: `client_address`, `header:NAME` or `cookie:NAME`.
    pub hash_key: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub connect_timeout: Option<Spanned<String>>,
    pub connect_attempts: Option<Spanned<i64>>,
    pub send_proxy_protocol: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub passive_backoff: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub passive_backoff_max: Option<Spanned<String>>,
    /// Ejection of targets whose real traffic goes bad (HTTP only).
    pub outlier_detection: Option<Spanned<RawOutlierDetection>>,
    /// Sticky sessions by an inserted cookie (HTTP only).
    pub sticky_cookie: Option<Spanned<RawStickyCookie>>,
    /// Requests at once per target (HTTP only), and the queue for those over it.
    pub max_requests_per_target: Option<Spanned<i64>>,
    pub queue: Option<Spanned<RawQueue>>,
    /// The ramp of a target that joins or comes back.
    #[serde(default, deserialize_with = "described::duration")]
    pub slow_start: Option<Spanned<String>>,
    pub health_check: Option<RawHealthCheck>,
    // HTTP only.
    #[serde(default, deserialize_with = "described::duration")]
    pub response_header_timeout: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub read_timeout: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub write_timeout: Option<Spanned<String>>,
    pub pool_max_idle: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub pool_idle_timeout: Option<Spanned<String>>,
    pub retries: Option<Spanned<i64>>,
    /// `["reset", "timeout", "503", "5xx", "gateway-error"]`: what besides connect failures is
    /// tried again.
    pub retry_on: Option<Spanned<Vec<Spanned<String>>>>,
    /// `{ percent = 20, min_retrying = 3 }`.
    pub retry_budget: Option<Spanned<RawRetryBudget>>,
    /// `"64KiB"`: request bodies kept for a retry.
    #[serde(default, deserialize_with = "described::size")]
    pub retry_max_body_size: Option<Spanned<String>>,
    /// `"1s"`: how long a worker's first picks pass over a target that just failed a request.
    #[serde(default, deserialize_with = "described::duration")]
    pub retry_pass_over: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub request_timeout: Option<Spanned<String>>,
    /// `http1`, `h2c`, `h2` or `auto`.
    pub protocol: Option<Spanned<String>>,
    /// `[upstreams.NAME.tls]`: speak TLS to the targets.
    pub tls: Option<Spanned<RawUpstreamTls>>,
}

/// A target: `"host:port"`, `"dns+NAME:PORT"`, `"srv+NAME"`, or a table with one of `address`,
/// `dns` (with `port`) or `srv`, and optionally `weight` and `backup`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawTarget {
    Address(String),
    Detailed(RawTargetTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTargetTable {
    pub address: Option<String>,
    /// A name whose A and AAAA records are targets (at `port`).
    pub dns: Option<String>,
    pub port: Option<i64>,
    /// A name whose SRV records are targets.
    pub srv: Option<String>,
    pub weight: Option<i64>,
    /// Only while no primary target is available.
    #[serde(default)]
    pub backup: bool,
}

/// `[upstreams.NAME.health_check]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    #[serde(default, deserialize_with = "described::duration")]
    pub interval: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
    /// Check with `GET http_path` instead of a bare connect.
    pub http_path: Option<Spanned<String>>,
    pub http_host: Option<String>,
    /// Accepted statuses, `"200-399"` or `"204"`.
    pub expect_status: Option<Spanned<String>>,
    /// Check with a DNS query for this name over UDP instead (UDP upstreams).
    pub dns_query: Option<Spanned<String>>,
}

impl RawHeaderOps {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// An upstream's `retry_budget`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetryBudget {
    pub percent: Option<Spanned<i64>>,
    pub min_retries_per_second: Option<Spanned<i64>>,
    /// The concurrency floor of the budget before it became a rate: refused with a hint.
    pub min_retrying: Option<Spanned<i64>>,
}

/// An upstream's `outlier_detection`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutlierDetection {
    pub consecutive_5xx: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub slow_response: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub base_ejection_time: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub max_ejection_time: Option<Spanned<String>>,
    pub max_ejection_percent: Option<Spanned<i64>>,
}

/// One way of a route's `split`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSplitWay {
    pub upstream: Spanned<String>,
    pub weight: Option<Spanned<i64>>,
    pub header: Option<Spanned<String>>,
    pub cookie: Option<Spanned<String>>,
}

/// An upstream's `sticky_cookie`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStickyCookie {
    pub name: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub max_age: Option<Spanned<String>>,
    pub secure: Option<bool>,
}

/// An upstream's `queue`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub size: Option<Spanned<i64>>,
    #[serde(default, deserialize_with = "described::duration")]
    pub timeout: Option<Spanned<String>>,
}

/// A route's `mirror`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMirror {
    pub upstream: Spanned<String>,
    pub percent: Option<Spanned<i64>>,
}
