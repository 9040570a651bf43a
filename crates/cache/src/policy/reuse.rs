//! Whether a stored response answers a request (RFC 9111 section 4: its `Vary`, section 4.1; its
//! freshness and both sides' directives, sections 4.2 and 5.2; RFC 5861's stale answers), how it
//! is validated (sections 4.3.1 and 4.3.4), and what an unsafe request invalidates (section 4.4).

use super::control::{Directives, FieldScope, MaxStale};
use super::{list_items, trim, FieldSource};

/// What a stored response can do for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Fresh enough for the request: served as it is.
    Fresh,
    /// Stale, and the request's `max-stale` accepts it: served as it is.
    StaleAccepted,
    /// Stale within the response's `stale-while-revalidate` (RFC 5861): served as it is while
    /// a request in the background revalidates it.
    StaleWhileRevalidate,
    /// To be validated with the origin first (a conditional request). `stale_if_error`: when
    /// that fails (an error status or no answer), the stored response may be served instead
    /// (RFC 5861 section 4; never under `must-revalidate` or its kin).
    Validate { stale_if_error: bool },
}

/// What the stored response `stored_cc` (freshness lifetime `lifetime`, current age `age`, both
/// in seconds) can do for a request with directives `request_cc`, in a shared cache.
pub fn reuse(request_cc: &Directives, stored_cc: &Directives, lifetime: u64, age: u64) -> Reuse {
    let staleness = age.saturating_sub(lifetime);
    // must-revalidate, proxy-revalidate and s-maxage (section 5.2.2.10) forbid serving it stale,
    // whatever the request accepts or an error would excuse.
    let strict = stored_cc.must_revalidate || stored_cc.proxy_revalidate || stored_cc.s_maxage.is_some();
    let if_error = !strict
        && [request_cc.stale_if_error, stored_cc.stale_if_error]
            .iter()
            .any(|limit| limit.is_some_and(|l| staleness <= l));
    let validate = Reuse::Validate {
        stale_if_error: if_error,
    };
    // no-cache (unqualified) in the response: every reuse is validated first (section
    // 5.2.2.4); a qualified one only keeps the named fields out of the stored response.
    if stored_cc.no_cache == FieldScope::All || request_cc.no_cache == FieldScope::All {
        return validate;
    }
    if request_cc.max_age.is_some_and(|max| age > max) {
        return validate;
    }
    let min_fresh = request_cc.min_fresh.unwrap_or(0);
    if lifetime > age && lifetime - age >= min_fresh.max(1) {
        return Reuse::Fresh;
    }
    if strict || staleness == 0 && min_fresh > 0 {
        return validate;
    }
    match request_cc.max_stale {
        Some(MaxStale::Any) => return Reuse::StaleAccepted,
        Some(MaxStale::Seconds(n)) if staleness <= n => return Reuse::StaleAccepted,
        _ => {}
    }
    if stored_cc.stale_while_revalidate.is_some_and(|n| staleness <= n) {
        return Reuse::StaleWhileRevalidate;
    }
    validate
}

/// The request fields a stored response was selected by (its `Vary`, section 4.1): each name
/// with what the request that brought it sent. `None` for `Vary: *`, which nothing matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Variant {
    /// Lowercase names, in the order `Vary` lists them.
    pub names: Vec<Vec<u8>>,
    /// Each name's normalized value in that request (absent: `None`).
    pub values: Vec<Option<Vec<u8>>>,
}

impl Variant {
    /// The variant `response` was selected as for `request`.
    pub fn of(response: &(impl FieldSource + ?Sized), request: &(impl FieldSource + ?Sized)) -> Option<Variant> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for name in list_items(response, b"vary") {
            if name == b"*" {
                return None;
            }
            let lower = name.to_ascii_lowercase();
            if !names.contains(&lower) {
                names.push(lower);
            }
        }
        let values = names.iter().map(|n| normalized(request, n)).collect();
        Some(Variant { names, values })
    }

    /// The variant of `request` among responses that vary on `names`.
    pub fn for_request(names: &[Vec<u8>], request: &(impl FieldSource + ?Sized)) -> Variant {
        Variant {
            names: names.to_vec(),
            values: names.iter().map(|n| normalized(request, n)).collect(),
        }
    }

    /// Whether `request` sends what the stored response's request sent, for every field `Vary`
    /// names.
    pub fn matches(&self, request: &(impl FieldSource + ?Sized)) -> bool {
        self.names
            .iter()
            .zip(&self.values)
            .all(|(name, value)| normalized(request, name) == *value)
    }
}

/// A field's value as `Vary` compares it: every line's list elements, trimmed, joined by `, `
/// (section 4.1 allows normalizing what has the same meaning); `None` when absent.
fn normalized(request: &(impl FieldSource + ?Sized), name: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for line in request.each(name) {
        let value = out.get_or_insert_with(Vec::new);
        for item in line.split(|&b| b == b',').map(trim).filter(|i| !i.is_empty()) {
            if !value.is_empty() {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(item);
        }
    }
    out
}

/// The fields of the conditional request that validates a stored response (section 4.3.1):
/// `If-None-Match` with its `ETag`, `If-Modified-Since` with its `Last-Modified`.
pub fn validators(stored: &(impl FieldSource + ?Sized)) -> Vec<(&'static [u8], Vec<u8>)> {
    let mut fields = Vec::new();
    if let Some(etag) = stored.value_of(b"etag") {
        fields.push((&b"if-none-match"[..], trim(etag).to_vec()));
    }
    if let Some(modified) = stored.value_of(b"last-modified") {
        fields.push((&b"if-modified-since"[..], trim(modified).to_vec()));
    }
    fields
}

/// Whether a 304 (`not_modified`'s fields) is about the stored response (section 4.3.4): the
/// same strong entity tag when it carries one, else the same `Last-Modified` when it carries
/// that, else (no validator in the 304) the stored response the request validated.
pub fn freshens(stored: &(impl FieldSource + ?Sized), not_modified: &(impl FieldSource + ?Sized)) -> bool {
    if let Some(tag) = not_modified.value_of(b"etag").map(trim) {
        let strong = !tag.starts_with(b"W/");
        return strong && stored.value_of(b"etag").map(trim) == Some(tag);
    }
    if let Some(modified) = not_modified.value_of(b"last-modified").map(trim) {
        return stored.value_of(b"last-modified").map(trim) == Some(modified);
    }
    true
}

/// Whether field `name` of a 304 replaces the stored response's (section 3.2): all but the
/// fields that describe the stored content itself, which a 304 carries no content to change:
/// `Content-Length` (the RFC's own exception), and, as the section lets a cache omit fields
/// "that the cache's stored response depends upon", `Content-Encoding`, `Content-Range`,
/// `Content-MD5` and `ETag` (the fields never stored, which [`super::storable::stores_field`]
/// leaves out, are not updated either).
pub fn updates_field(name: &[u8]) -> bool {
    ![
        &b"content-length"[..],
        b"content-encoding",
        b"content-range",
        b"content-md5",
        b"etag",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// Whether a request with `method` answered with `status` invalidates what is stored for its
/// target (section 4.4): an unsafe method and a non-error status.
pub fn invalidates(method: &[u8], status: u16) -> bool {
    let safe = matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE");
    !safe && (200..400).contains(&status)
}

/// The targets besides the request's own that such a response invalidates (section 4.4): its
/// `Location` and `Content-Location`, as paths when they are on the request's `host` (a URI on
/// another origin is left alone, as the RFC requires).
pub fn invalidated_paths(response: &(impl FieldSource + ?Sized), host: &[u8]) -> Vec<Vec<u8>> {
    let mut paths = Vec::new();
    for name in [&b"location"[..], b"content-location"] {
        let Some(value) = response.value_of(name).map(trim) else {
            continue;
        };
        let path = if value.starts_with(b"/") && !value.starts_with(b"//") {
            Some(value)
        } else {
            same_origin_path(value, host)
        };
        if let Some(p) = path {
            paths.push(p.to_vec());
        }
    }
    paths
}

/// The path of an absolute `http(s)://host/path` URI on `host` (case-insensitive).
fn same_origin_path<'a>(uri: &'a [u8], host: &[u8]) -> Option<&'a [u8]> {
    let rest = [&b"http://"[..], b"https://"]
        .iter()
        .find_map(|scheme| strip_prefix_ignore_case(uri, scheme))?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if !authority.eq_ignore_ascii_case(host) {
        return None;
    }
    Some(if path.is_empty() { b"/" } else { path })
}

fn strip_prefix_ignore_case<'a>(b: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (b.len() >= prefix.len() && b[..prefix.len()].eq_ignore_ascii_case(prefix)).then(|| &b[prefix.len()..])
}
