//! The small built-in filters: `request_id`, `ip_filter`, `cors`, `rewrite`, `body_limit` (and
//! the legacy route keys for rewrites).

use rampart_model::filter::{self, Cors, Filter, IpFilter, OriginMatch, RequestId, Rewrite};
use rampart_model::net::IpNet;
use rampart_model::route::HeaderOps;
use toml::Spanned;

use super::FilterTable;
use crate::compile::Checker;
use crate::raw::{RawHeaderOps, RawRoute};

pub(super) use crate::compile::wire::is_token;

impl Checker<'_> {
    /// A route's `request_headers` / `response_headers` table (`what`), each name and value
    /// checked at its place.
    pub(super) fn raw_header_ops(&mut self, raw: &RawHeaderOps, what: &str) -> Option<HeaderOps> {
        let set = self.header_pairs(&raw.set, what);
        let add = self.header_pairs(&raw.add, what);
        let remove = self.header_names(&raw.remove, what);
        Some(HeaderOps {
            remove: remove?,
            set: set?,
            add: add?,
        })
    }

    pub(super) fn request_id_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let header = match self.filter_string(t, "header") {
            Some(h) if is_token(h.get_ref()) => h.get_ref().to_ascii_lowercase(),
            Some(h) => {
                self.error(h.span(), format!("`{}` is not a header name", h.get_ref()));
                return None;
            }
            None => "x-request-id".to_string(),
        };
        Some(Filter::RequestId(RequestId {
            header,
            keep_incoming: self.filter_bool(t, "keep_incoming", true),
            echo: self.filter_bool(t, "echo", true),
        }))
    }

    pub(super) fn ip_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let mut nets = |cx: &mut Self, key: &str| -> Vec<IpNet> {
            let Some(list) = cx.filter_strings(t, key) else {
                return Vec::new();
            };
            let mut out = Vec::new();
            for net in list.get_ref() {
                match net.parse::<IpNet>() {
                    Ok(n) => out.push(n),
                    Err(e) => cx.error(list.span(), e.to_string()),
                }
            }
            out
        };
        let allow = nets(self, "allow");
        let deny = nets(self, "deny");
        let status = self.filter_int(t, "status", 403, 400, 599) as u16;
        let given = t.entries_has("allow") || t.entries_has("deny");
        if !given {
            self.error(
                t.span.clone(),
                "an `ip_filter` needs `allow` or `deny` (a list of networks)",
            );
            return None;
        }
        if allow.is_empty() && deny.is_empty() {
            return None;
        }
        Some(Filter::IpFilter(IpFilter { allow, deny, status }))
    }

    pub(super) fn cors_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let origins_raw = self.filter_strings(t, "origins");
        let origins_raw = self.filter_required(t, "origins", origins_raw)?;
        let mut origins = Vec::new();
        for o in origins_raw.get_ref() {
            match origin_match(o) {
                Ok(m) => origins.push(m),
                Err(e) => self.error(origins_raw.span(), e),
            }
        }
        let methods: Vec<String> = match self.filter_strings(t, "methods") {
            Some(list) => {
                let bad = list.get_ref().iter().find(|m| !is_token(m)).cloned();
                if let Some(bad) = bad {
                    self.error(list.span(), format!("`{bad}` is not an HTTP method"));
                }
                list.into_inner().into_iter().map(|m| m.to_ascii_uppercase()).collect()
            }
            None => ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
                .map(String::from)
                .to_vec(),
        };
        let allow_headers = self.filter_strings(t, "allow_headers").map(|list| {
            for bad in list.get_ref().iter().filter(|h| *h != "*" && !is_token(h)) {
                self.error(
                    list.span(),
                    format!("`allow_headers`: `{}` is not a header name", bad.escape_debug()),
                );
            }
            list.into_inner()
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect::<Vec<_>>()
        });
        // `["*"]` means any header, as no list does.
        let allow_headers = allow_headers.filter(|h| !h.iter().any(|n| n == "*"));
        let expose_headers = match self.filter_strings(t, "expose_headers") {
            Some(list) => {
                for bad in list.get_ref().iter().filter(|h| !is_token(h)) {
                    self.error(
                        list.span(),
                        format!("`expose_headers`: `{}` is not a header name", bad.escape_debug()),
                    );
                }
                list.into_inner()
            }
            None => Vec::new(),
        };
        let credentials = self.filter_bool(t, "credentials", false);
        let max_age = self.filter_duration(t, "max_age").map(|d| d.as_secs());
        let cors = Cors {
            origins,
            methods,
            allow_headers,
            expose_headers,
            credentials,
            max_age,
        };
        if credentials && cors.any_origin() {
            self.error(
                origins_raw.span(),
                "`credentials = true` with origin \"*\" would let every site send requests with the user's \
                 cookies: list the origins instead",
            );
            return None;
        }
        Some(Filter::Cors(cors))
    }

    pub(super) fn rewrite_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let strip = self.filter_string(t, "strip_prefix");
        let replace = self.filter_string_table(t, "replace_prefix");
        let regex = self.filter_string(t, "regex");
        let replacement = self.filter_string(t, "replacement");
        let mut rewrite = Rewrite::default();
        match (strip, replace) {
            (Some(_), Some(r)) => {
                self.error(r.span(), "use either `strip_prefix` or `replace_prefix`, not both");
                return None;
            }
            (Some(p), None) => rewrite.prefix = Some((self.path_prefix(&p)?, String::new())),
            (None, Some(r)) => {
                let from = r.get_ref().iter().find(|(k, _)| k == "from").map(|(_, v)| v.clone());
                let to = r.get_ref().iter().find(|(k, _)| k == "to").map(|(_, v)| v.clone());
                let (Some(from), Some(to), 2) = (from, to, r.get_ref().len()) else {
                    self.error(r.span(), "`replace_prefix` is { from = \"/v1/\", to = \"/v2/\" }");
                    return None;
                };
                rewrite.prefix = Some((self.path_prefix(&Spanned::new(r.span(), from))?, to));
            }
            (None, None) => {}
        }
        match (regex, replacement) {
            (Some(re), Some(to)) => rewrite.regex = Some((self.regex(&re)?, to.into_inner())),
            (None, None) => {}
            (Some(v), None) | (None, Some(v)) => {
                self.error(v.span(), "a regex rewrite needs both `regex` and `replacement`");
                return None;
            }
        }
        if rewrite.prefix.is_none() && rewrite.regex.is_none() {
            self.error(
                t.span.clone(),
                "a `rewrite` filter needs `strip_prefix`, `replace_prefix`, or `regex` and `replacement`",
            );
            return None;
        }
        Some(Filter::Rewrite(rewrite))
    }

    pub(super) fn body_limit_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let max = self.filter_size(t, "max");
        let max = self.filter_required(t, "max", max)?;
        Some(Filter::BodyLimit(filter::BodyLimit { max }))
    }

    /// A route's `strip_prefix`, `replace_prefix` and `rewrite` keys as one rewrite.
    pub(super) fn legacy_rewrite(&mut self, r: &RawRoute) -> Option<Rewrite> {
        let prefix = match (&r.strip_prefix, &r.replace_prefix) {
            (Some(_), Some(rp)) => {
                self.error(
                    rp.from.span(),
                    "use either `strip_prefix` or `replace_prefix`, not both",
                );
                None
            }
            (Some(p), None) => self.path_prefix(p).map(|p| (p, String::new())),
            (None, Some(rp)) => self.path_prefix(&rp.from).map(|p| (p, rp.to.clone())),
            (None, None) => None,
        };
        let regex = match &r.rewrite {
            Some(rw) => self.regex(&rw.regex).map(|re| (re, rw.replacement.clone())),
            None => None,
        };
        (prefix.is_some() || regex.is_some()).then_some(Rewrite { prefix, regex })
    }
}

/// An allowed origin: `*`, an exact origin, or a pattern with `*` (one or more host or port
/// characters: `https://*.example.com`, `http://localhost:*`).
fn origin_match(o: &str) -> Result<OriginMatch, String> {
    if o == "*" {
        return Ok(OriginMatch::Any);
    }
    let Some((scheme, rest)) = o.split_once("://") else {
        return Err(format!(
            "origin `{o}` needs a scheme and a host, such as \"https://app.example.com\""
        ));
    };
    if scheme.is_empty() || rest.is_empty() || rest.contains('/') {
        return Err(format!(
            "origin `{o}` is a scheme and a host (and port), with no path: such as \"https://app.example.com\""
        ));
    }
    if !o.contains('*') {
        return Ok(OriginMatch::Exact(o.to_ascii_lowercase()));
    }
    let pattern: Vec<String> = o.split('*').map(regex::escape).collect();
    let re = format!("^{}$", pattern.join("[A-Za-z0-9.-]+"));
    regex::bytes::RegexBuilder::new(&re)
        .unicode(false)
        .case_insensitive(true)
        .build()
        .map(OriginMatch::Pattern)
        .map_err(|e| format!("origin `{o}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert!(matches!(origin_match("*"), Ok(OriginMatch::Any)));
        assert!(matches!(origin_match("https://A.example"), Ok(OriginMatch::Exact(o)) if o == "https://a.example"));
        let Ok(OriginMatch::Pattern(re)) = origin_match("https://*.example.com") else {
            panic!("a pattern")
        };
        assert!(re.is_match(b"https://app.example.com"));
        assert!(re.is_match(b"https://a.b.example.com"));
        assert!(!re.is_match(b"https://example.com"));
        assert!(!re.is_match(b"https://evil.com/.example.com"));
        assert!(!re.is_match(b"http://app.example.com"));
        assert!(origin_match("example.com").is_err());
        assert!(origin_match("https://a.example/path").is_err());
    }
}
