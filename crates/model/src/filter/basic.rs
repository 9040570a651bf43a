//! Settings of the small built-in filters: path rewrites, request ids, IP allow/deny lists, CORS.

use regex::bytes::Regex;

use crate::net::IpNet;
use crate::route::HeaderOps;

/// `request_headers`: edits of the request head sent upstream.
#[derive(Debug, Clone, Default)]
pub struct RequestHeaders {
    pub ops: HeaderOps,
}

/// `response_headers`: edits of the response head sent to the client: by default only of a
/// response whose status [`is_success_status`] (nginx's `add_header`), of every response with
/// `always`.
#[derive(Debug, Clone, Default)]
pub struct ResponseHeaders {
    pub ops: HeaderOps,
    pub always: bool,
}

/// The statuses `response_headers` edits without `always`: nginx's list for `add_header`
/// (success and redirects), so a cache lifetime or a policy meant for content does not land on
/// a 404 or a 502.
pub fn is_success_status(status: u16) -> bool {
    matches!(status, 200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308)
}

/// `body_limit` (and a route's `max_body_size`): the largest request body accepted, in bytes;
/// past it, 413. A `Content-Length` is checked before anything goes upstream, a streamed body as
/// its bytes arrive.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub max: u64,
}

/// Path rewrites, applied in this order to the path sent upstream (the query is kept).
#[derive(Debug, Default)]
pub struct Rewrite {
    /// Replace this path prefix with the second string (an empty replacement strips it).
    pub prefix: Option<(String, String)>,
    /// Regex path rewrite with `$1`-style references.
    pub regex: Option<(Regex, String)>,
}

/// `request_id`: keep the client's id or make one (UUIDv7), send it upstream, log it.
#[derive(Debug, Clone)]
pub struct RequestId {
    /// The header that carries it, lower-case (default `x-request-id`).
    pub header: String,
    /// Keep an id the client sent (when it is sane: 1 to 200 visible ASCII characters); off
    /// means every request gets a new one.
    pub keep_incoming: bool,
    /// Echo the id in the response to the client too.
    pub echo: bool,
}

/// `ip_filter`: a client is refused when its address is in `deny`, or when `allow` is not empty
/// and its address is not in it. The address is the one filters see: after a PROXY header, and
/// from `X-Forwarded-For` when the connection comes from a listener's `trusted_proxies`.
#[derive(Debug, Clone)]
pub struct IpFilter {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    /// The status refused clients get (default 403).
    pub status: u16,
}

impl IpFilter {
    /// Whether a client at `ip` may go on.
    pub fn admits(&self, ip: std::net::IpAddr) -> bool {
        !self.deny.iter().any(|n| n.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|n| n.contains(ip)))
    }
}

/// `cors`: preflight requests are answered by Rampart; other requests from an allowed origin get
/// the CORS response headers.
#[derive(Debug)]
pub struct Cors {
    pub origins: Vec<OriginMatch>,
    /// Methods a preflight may ask for, upper-case.
    pub methods: Vec<String>,
    /// Request headers a preflight may ask for, lower-case; `None`: any.
    pub allow_headers: Option<Vec<String>>,
    /// Response headers the browser may show the page, as written.
    pub expose_headers: Vec<String>,
    /// `Access-Control-Allow-Credentials: true` (then the origin is always echoed, never `*`).
    pub credentials: bool,
    /// How long a browser may cache a preflight's answer, in seconds.
    pub max_age: Option<u64>,
}

/// An allowed origin.
#[derive(Debug)]
pub enum OriginMatch {
    /// `*`: any origin.
    Any,
    /// An exact origin (`https://app.example.com`), compared case-insensitively.
    Exact(String),
    /// A pattern with `*` wildcards (`https://*.example.com`), compiled to an anchored regex.
    Pattern(Regex),
}

impl Cors {
    /// Whether `origin` (the request's `Origin` value) is allowed.
    pub fn allows_origin(&self, origin: &[u8]) -> bool {
        self.origins.iter().any(|o| match o {
            OriginMatch::Any => true,
            OriginMatch::Exact(e) => origin.eq_ignore_ascii_case(e.as_bytes()),
            OriginMatch::Pattern(re) => re.is_match(origin),
        })
    }

    /// Whether every origin is allowed.
    pub fn any_origin(&self) -> bool {
        self.origins.iter().any(|o| matches!(o, OriginMatch::Any))
    }
}
