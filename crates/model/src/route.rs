//! Routes: compiled matchers, actions and filter chains. Matching a request allocates nothing: hosts are
//! lower-cased at compile time and compared case-insensitively, paths are compared as bytes,
//! regexes are compiled once.

use regex::bytes::Regex;

/// One route: the first whose matcher accepts a request handles it.
#[derive(Debug)]
pub struct Route {
    pub name: String,
    pub matcher: RouteMatcher,
    pub action: RouteAction,
    /// The filters requests on this route run through (listener filters first).
    pub filters: crate::filter::FilterChain,
    /// Pages for this route's answers of Rampart's own (its own over the listener's).
    pub error_pages: Option<std::sync::Arc<crate::error_pages::ErrorPages>>,
    /// `mirror`: a copy of a share of the route's requests to a shadow upstream.
    pub mirror: Option<crate::split::Mirror>,
    /// `cache`: responses kept in a store and answered from it (routes that proxy).
    pub cache: Option<crate::cache::RouteCache>,
    /// `retries` and `retry_on` of the route, over its upstream's.
    pub retry: crate::retry::RouteRetry,
    /// Whether its requests are traced, with `[tracing]` on and the listener traced (`tracing =
    /// false` on the route turns it off: the trace context passes through untouched).
    pub traced: bool,
    /// Traffic counters, kept across reloads for the same listener and route name.
    pub metrics: std::sync::Arc<crate::metrics::PerWorker<crate::metrics::RouteCells>>,
}

/// Every condition present must hold.
#[derive(Debug, Default)]
pub struct RouteMatcher {
    pub host: Option<HostMatch>,
    pub path: Option<PathMatch>,
    /// Upper-case method names; empty means any.
    pub methods: Vec<String>,
    pub headers: Vec<HeaderMatch>,
    pub query: Vec<QueryMatch>,
}

#[derive(Debug)]
pub enum HostMatch {
    /// Lower-case host without port.
    Exact(String),
    /// `*.example.com` stored as `.example.com`: any single or deeper subdomain.
    Suffix(String),
}

#[derive(Debug)]
pub enum PathMatch {
    Exact(String),
    Prefix(String),
    /// `*` matches any run of bytes except `/`; `**` matches anything.
    Glob(String),
    Regex(Regex),
}

#[derive(Debug)]
pub enum HeaderMatch {
    /// Lower-case name.
    Present(String),
    Equals(String, String),
    Regex(String, Regex),
}

impl HeaderMatch {
    fn name(&self) -> &str {
        match self {
            HeaderMatch::Present(n) | HeaderMatch::Equals(n, _) | HeaderMatch::Regex(n, _) => n,
        }
    }

    fn accepts(&self, value: &[u8]) -> bool {
        match self {
            HeaderMatch::Present(_) => true,
            HeaderMatch::Equals(_, v) => value == v.as_bytes(),
            HeaderMatch::Regex(_, r) => r.is_match(value),
        }
    }
}

/// A query parameter that must be present (any value) or have a value.
#[derive(Debug)]
pub struct QueryMatch {
    pub name: String,
    pub value: Option<String>,
}

/// What a matched route does.
#[derive(Debug)]
pub enum RouteAction {
    /// Proxy to the upstream with this index in the snapshot.
    Proxy { upstream: usize },
    /// Proxy to one of several upstreams, by weight or by what the request carries.
    Split(std::sync::Arc<crate::split::Split>),
    /// Answer from Rampart itself.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Answer with a redirect.
    Redirect { status: u16, to: RedirectTo },
    /// Serve files from a directory.
    Static(StaticFiles),
    /// Answer ACME HTTP-01 challenges (`/.well-known/acme-challenge/TOKEN`): put first on every
    /// HTTP listener when some listener obtains certificates by ACME.
    AcmeChallenge(std::sync::Arc<crate::acme::AcmeShared>),
}

/// The `static` action: files under `root`, looked up by the request path after the route's
/// rewrites.
#[derive(Debug, Clone)]
pub struct StaticFiles {
    /// The directory served, absolute (symbolic links in it are followed per request, so that
    /// swapping a `current` link deploys without a reload).
    pub root: std::path::PathBuf,
    /// Names tried, in order, in a directory asked for with a trailing `/`.
    pub index: Vec<String>,
    /// A path under `root` (starting with `/`) served for requests that find no file (single-page
    /// applications).
    pub fallback: Option<String>,
    /// Serve `NAME.br`, `NAME.zst` or `NAME.gz` beside `NAME` to clients that accept them.
    pub precompressed: bool,
    /// Answer a directory without an index with a listing of its names.
    pub list: bool,
}

/// Where a redirect points.
#[derive(Debug)]
pub enum RedirectTo {
    /// To `location`; with `keep_path`, the request's path and query are appended.
    Location { location: String, keep_path: bool },
    /// To the same host (without its port), path and query under another scheme
    /// (`http` → `https`), on `port` when given (else the scheme's own).
    Scheme { scheme: String, port: Option<u16> },
}

/// Header edits, applied in the order remove, set (replace), add.
#[derive(Clone, Debug, Default)]
pub struct HeaderOps {
    /// Lower-case names.
    pub remove: Vec<String>,
    pub set: Vec<(String, String)>,
    pub add: Vec<(String, String)>,
}

impl HeaderOps {
    /// Whether there is no edit at all.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Whether a field called `name` from the original message is dropped (removed or replaced).
    pub fn drops(&self, name: &[u8]) -> bool {
        self.remove.iter().any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
            || self.set.iter().any(|(n, _)| name.eq_ignore_ascii_case(n.as_bytes()))
    }

    /// Replaces every field `name` (received, or added by an earlier edit) with one `value`.
    pub fn set(&mut self, name: &str, value: &str) {
        self.forget(name);
        self.set.push((name.to_string(), value.to_string()));
    }

    /// Adds a field `name`, keeping those already there.
    pub fn add(&mut self, name: &str, value: &str) {
        self.add.push((name.to_string(), value.to_string()));
    }

    /// Removes every field `name`, received or added by an earlier edit.
    pub fn remove(&mut self, name: &str) {
        self.forget(name);
        self.remove.push(name.to_ascii_lowercase());
    }

    /// Drops earlier `set` and `add` edits of `name`.
    fn forget(&mut self, name: &str) {
        self.set.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.add.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }
}

/// The parts of a request a matcher looks at.
pub struct RequestView<'a> {
    pub method: &'a [u8],
    /// Host without port, as sent (any case).
    pub host: &'a [u8],
    pub path: &'a [u8],
    pub query: &'a [u8],
    pub buf: &'a [u8],
    pub fields: &'a [rampart_proto::h1::Field],
}

impl RouteMatcher {
    pub fn matches(&self, req: &RequestView<'_>) -> bool {
        if let Some(h) = &self.host {
            let ok = match h {
                HostMatch::Exact(e) => req.host.eq_ignore_ascii_case(e.as_bytes()),
                HostMatch::Suffix(s) => {
                    req.host.len() > s.len() && req.host[req.host.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
                }
            };
            if !ok {
                return false;
            }
        }
        if let Some(p) = &self.path {
            let ok = match p {
                PathMatch::Exact(e) => req.path == e.as_bytes(),
                PathMatch::Prefix(pre) => req.path.starts_with(pre.as_bytes()),
                PathMatch::Glob(g) => glob_match(g.as_bytes(), req.path),
                PathMatch::Regex(r) => r.is_match(req.path),
            };
            if !ok {
                return false;
            }
        }
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m.as_bytes() == req.method) {
            return false;
        }
        for hm in &self.headers {
            let found = req
                .fields
                .iter()
                .any(|f| f.name(req.buf).eq_ignore_ascii_case(hm.name().as_bytes()) && hm.accepts(f.value(req.buf)));
            if !found {
                return false;
            }
        }
        for q in &self.query {
            let found = req.query.split(|&b| b == b'&').any(|pair| {
                let (k, v) = match pair.iter().position(|&b| b == b'=') {
                    Some(i) => (&pair[..i], Some(&pair[i + 1..])),
                    None => (pair, None),
                };
                k == q.name.as_bytes() && q.value.as_ref().is_none_or(|want| v == Some(want.as_bytes()))
            });
            if !found {
                return false;
            }
        }
        true
    }
}

/// Glob match where `*` spans any bytes but `/`, and `**` spans anything.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => {
            let deep = pattern.get(1) == Some(&b'*');
            let rest = if deep { &pattern[2..] } else { &pattern[1..] };
            for i in 0..=text.len() {
                if glob_match(rest, &text[i..]) {
                    return true;
                }
                if i < text.len() && !deep && text[i] == b'/' {
                    return false;
                }
            }
            false
        }
        Some(&c) => text.first() == Some(&c) && glob_match(&pattern[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"/test/*", b"/test/a"));
        assert!(glob_match(b"/test/*", b"/test/"));
        assert!(!glob_match(b"/test/*", b"/test/a/b"));
        assert!(glob_match(b"/test/**", b"/test/a/b"));
        assert!(glob_match(b"/img/*.png", b"/img/cat.png"));
        assert!(!glob_match(b"/img/*.png", b"/img/cat.jpg"));
        assert!(glob_match(b"/a/*/c", b"/a/b/c"));
    }

    fn view<'a>(method: &'a [u8], host: &'a [u8], path: &'a [u8], query: &'a [u8]) -> RequestView<'a> {
        RequestView {
            method,
            host,
            path,
            query,
            buf: b"",
            fields: &[],
        }
    }

    #[test]
    fn matchers() {
        let m = RouteMatcher {
            host: Some(HostMatch::Suffix(".example.com".into())),
            path: Some(PathMatch::Prefix("/api/".into())),
            methods: vec!["GET".into()],
            headers: vec![],
            query: vec![QueryMatch {
                name: "v".into(),
                value: Some("2".into()),
            }],
        };
        assert!(m.matches(&view(b"GET", b"API.Example.com", b"/api/x", b"a=1&v=2")));
        assert!(!m.matches(&view(b"GET", b"example.com", b"/api/x", b"v=2")));
        assert!(!m.matches(&view(b"POST", b"a.example.com", b"/api/x", b"v=2")));
        assert!(!m.matches(&view(b"GET", b"a.example.com", b"/api/x", b"v=3")));
        assert!(!m.matches(&view(b"GET", b"a.example.com", b"/other", b"v=2")));
        let any = RouteMatcher::default();
        assert!(any.matches(&view(b"DELETE", b"", b"/", b"")));
    }
}
