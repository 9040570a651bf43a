//! Compiling TCP listeners: the default upstream, and routes on the first bytes of a connection
//! (delayed binding): matchers, one action (`upstream`, `listener` or `reject`) and payload
//! filters. A route that can never match is an error, as are the HTTP route keys that would do
//! nothing here.

use std::ops::Range;

use rampart_model::defaults;
use rampart_model::net::IpNet;
use rampart_model::tcp_route::{DenyRegex, L4Filters, TcpAction, TcpMatcher, TcpRoute, TcpRouting};
use rampart_model::ListenerProtocol;
use rampart_proto::detect::{Protocol, Wants};
use regex::bytes::Regex;
use toml::Spanned;

use super::checks::is_http;
use super::live::LiveState;
use super::Checker;
use crate::raw::{RawConfig, RawListener, RawMatch, RawRoute};

/// What a TCP listener's routes may refer to.
pub(super) struct Names<'a> {
    /// Upstream names, by index.
    pub upstreams: &'a [&'a str],
    /// Whether each upstream hashes on something only HTTP requests have.
    pub request_keyed: &'a [bool],
    /// Listener names by index, and whether each can take a handed-over connection (an HTTP
    /// listener, or a TCP listener without routes).
    pub listeners: &'a [(&'a str, bool)],
}

impl Names<'_> {
    fn known_upstreams(&self) -> String {
        if self.upstreams.is_empty() {
            "none defined".to_string()
        } else {
            self.upstreams.join(", ")
        }
    }
}

/// Each listener's name and whether a route may hand it connections (an HTTP listener, or a TCP
/// listener without routes of its own); and the names routes hand connections to.
pub(super) fn listener_kinds(raw: &RawConfig) -> (Vec<(&str, bool)>, Vec<&str>) {
    let kinds = raw
        .listeners
        .iter()
        .map(|(name, l)| (name.get_ref().as_str(), is_http(l) == Some(true) || l.routes.is_empty()))
        .collect();
    let handed_to = raw
        .listeners
        .values()
        .filter(|l| is_http(l) == Some(false))
        .flat_map(|l| l.routes.iter().filter_map(|r| r.get_ref().listener.as_ref()))
        .map(|target| target.get_ref().as_str())
        .collect();
    (kinds, handed_to)
}

/// `rampart tcp --sni NAME=HOST:PORT ...`: the listener's routes (after its other keys) and their
/// upstreams, one per name, as config text.
pub(super) fn sni_routes_toml(sni: &[(String, String)]) -> (String, String) {
    let (mut routes, mut upstreams) = (String::new(), String::new());
    for (i, (name, target)) in sni.iter().enumerate() {
        let upstream = format!("sni-{}", i + 1);
        routes.push_str(&format!(
            "[[listeners.default.routes]]\nname = {}\nmatch = {{ sni = {} }}\nupstream = \"{upstream}\"\n",
            super::toml_string(name),
            super::toml_string(name),
        ));
        upstreams.push_str(&format!(
            "[upstreams.{upstream}]\ntargets = [{}]\n",
            super::toml_string(target)
        ));
    }
    (routes, upstreams)
}

/// How many of the latest client bytes `deny_regex` keeps to match across read boundaries.
pub const DENY_REGEX_WINDOW: usize = 4096;

impl Checker<'_> {
    /// A listener without `bind`: only one that routes hand connections to may go without, and it
    /// cannot read PROXY headers (the listener that accepted the connection did).
    pub(super) fn unbound_listener(&mut self, name: &Spanned<String>, l: &RawListener, handed_to: &[&str]) {
        let name_str = name.get_ref().as_str();
        if !handed_to.contains(&name_str) {
            self.error(
                name.span(),
                format!(
                    "listener `{name_str}` needs `bind` (only a listener that TCP routes hand connections to \
                     with `listener = \"{name_str}\"` may go without)"
                ),
            );
        }
        let keys = [
            ("proxy_protocol_from", l.proxy_protocol_from.first().map(Spanned::span)),
            ("max_connections", l.max_connections.as_ref().map(Spanned::span)),
        ];
        for (key, span) in keys {
            if let Some(span) = span {
                self.error(
                    span,
                    format!(
                        "`{key}` does nothing on listener `{name_str}`, which has no `bind`: \
                         set it on the listener that accepts the connections"
                    ),
                );
            }
        }
    }

    /// The protocol of TCP listener `name`.
    pub(super) fn tcp_listener(
        &mut self,
        name: &Spanned<String>,
        l: &RawListener,
        names: &Names<'_>,
        live: &mut LiveState,
    ) -> Option<ListenerProtocol> {
        let upstream = match &l.upstream {
            None if l.routes.is_empty() => {
                self.error(
                    name.span(),
                    format!("listener `{}` needs `upstream` (or routes)", name.get_ref()),
                );
                return None;
            }
            None => None,
            Some(up) => Some(self.tcp_upstream(name.get_ref(), up, names)?),
        };
        let peek_keys = [("peek_timeout", &l.peek_timeout), ("peek_max", &l.peek_max)];
        if l.routes.is_empty() {
            for (key, value) in peek_keys {
                if let Some(v) = value {
                    self.error(
                        v.span(),
                        format!(
                            "`{key}` does nothing on listener `{}`, which has no routes",
                            name.get_ref()
                        ),
                    );
                }
            }
            return Some(ListenerProtocol::Tcp {
                upstream,
                routing: None,
            });
        }
        if let Some(tls) = &l.tls {
            self.error(
                tls.span(),
                format!(
                    "listener `{}` has routes, which read the ClientHello before any TLS is terminated: \
                     terminate TLS on a listener that a route hands connections to (`listener = \"NAME\"`)",
                    name.get_ref()
                ),
            );
            return None;
        }
        let mut routes = Vec::new();
        let mut failed = false;
        for (i, r) in l.routes.iter().enumerate() {
            match self.tcp_route(name.get_ref(), i, r, l, names, live) {
                Some(route) => routes.push(route),
                None => failed = true,
            }
        }
        let peek_timeout = self.duration(&l.peek_timeout, defaults::PEEK_TIMEOUT);
        let peek_max = self.size(&l.peek_max, defaults::PEEK_MAX, 64, 1 << 20);
        if failed {
            return None;
        }
        let wants = Wants {
            http_head: routes
                .iter()
                .any(|r| r.matcher.http_host.is_some() || r.matcher.regex.is_some()),
        };
        Some(ListenerProtocol::Tcp {
            upstream,
            routing: Some(Box::new(TcpRouting {
                routes,
                peek_timeout,
                peek_max,
                wants,
                default_metrics: live.tcp_route_metrics(name.get_ref(), ""),
            })),
        })
    }

    fn tcp_upstream(&mut self, owner: &str, up: &Spanned<String>, names: &Names<'_>) -> Option<usize> {
        match names.upstreams.iter().position(|u| u == up.get_ref()) {
            Some(i) if names.request_keyed[i] => {
                self.error(
                    up.span(),
                    format!(
                        "TCP listener `{owner}` uses upstream `{}`, which hashes on a request header or cookie; \
                         TCP listeners have neither (use hash_key = \"client_address\", or protocol = \"http\")",
                        up.get_ref()
                    ),
                );
                None
            }
            Some(i) => Some(i),
            None => {
                self.error(
                    up.span(),
                    format!(
                        "listener `{owner}` refers to unknown upstream `{}` {}",
                        up.get_ref(),
                        super::suggest::defined(up.get_ref(), &names.known_upstreams())
                    ),
                );
                None
            }
        }
    }

    fn tcp_route(
        &mut self,
        listener: &str,
        index: usize,
        r: &Spanned<RawRoute>,
        l: &RawListener,
        names: &Names<'_>,
        live: &mut LiveState,
    ) -> Option<TcpRoute> {
        let span = r.span();
        let r = r.get_ref();
        let name = r.name.clone().unwrap_or_else(|| format!("{listener}#{}", index + 1));
        self.http_route_keys(listener, &name, span.clone(), r);
        let action = self.tcp_action(listener, &name, span.clone(), r, names)?;
        let matcher = self.tcp_matcher(&name, &r.matcher, l)?;
        let filters = L4Filters {
            max_bytes: r
                .max_bytes
                .as_ref()
                .map(|_| self.size(&r.max_bytes, 0, 1, u64::MAX / 2) as u64),
            deny_regex: match &r.deny_regex {
                Some(re) => Some(DenyRegex {
                    regex: self.payload_regex(re)?,
                    window: DENY_REGEX_WINDOW,
                }),
                None => None,
            },
        };
        if !filters.is_empty() && !matches!(action, TcpAction::Upstream(_)) {
            self.error(
                span,
                format!("route `{name}`: `max_bytes` and `deny_regex` filter relayed bytes; they need `upstream`"),
            );
            return None;
        }
        Some(TcpRoute {
            matcher,
            action,
            filters,
            metrics: live.tcp_route_metrics(listener, &name),
            name,
        })
    }

    fn tcp_action(
        &mut self,
        listener: &str,
        name: &str,
        span: Range<usize>,
        r: &RawRoute,
        names: &Names<'_>,
    ) -> Option<TcpAction> {
        if let Some(reject) = r.reject.as_ref().filter(|r| !*r.get_ref()) {
            self.error(reject.span(), "`reject = false` does nothing: leave it out");
            return None;
        }
        let given = [r.upstream.is_some(), r.listener.is_some(), r.reject.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            self.error(
                span,
                format!("route `{name}` needs exactly one of `upstream`, `listener` or `reject = true`"),
            );
            return None;
        }
        if let Some(up) = &r.upstream {
            return self.tcp_upstream(listener, up, names).map(TcpAction::Upstream);
        }
        let Some(target) = &r.listener else {
            return Some(TcpAction::Reject);
        };
        let wanted = target.get_ref();
        match names.listeners.iter().position(|(n, _)| n == wanted) {
            Some(_) if wanted == listener => {
                self.error(
                    target.span(),
                    format!("route `{name}` hands connections to its own listener"),
                );
                None
            }
            Some(i) if names.listeners[i].1 => Some(TcpAction::Listener(i)),
            Some(_) => {
                self.error(
                    target.span(),
                    format!(
                        "route `{name}` hands connections to listener `{wanted}`, which has routes of its own; \
                         hand them to an HTTP listener or a TCP listener without routes"
                    ),
                );
                None
            }
            None => {
                let known: Vec<&str> = names.listeners.iter().map(|(n, _)| *n).collect();
                self.error(
                    target.span(),
                    format!(
                        "route `{name}` refers to unknown listener `{wanted}` (defined: {})",
                        known.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// The HTTP-only keys of a route, each an error on a TCP listener's route.
    fn http_route_keys(&mut self, listener: &str, name: &str, route: Range<usize>, r: &RawRoute) {
        let m = &r.matcher;
        let at = |s: Option<Range<usize>>| s.unwrap_or_else(|| route.clone());
        let keys: [(&str, bool, Range<usize>); 22] = [
            (
                "filters",
                !r.filters.is_empty(),
                at(r.filters.first().map(Spanned::span)),
            ),
            (
                "inherit_filters",
                r.inherit_filters.is_some(),
                at(r.inherit_filters.as_ref().map(Spanned::span)),
            ),
            (
                "respond",
                r.respond.is_some(),
                at(r.respond.as_ref().map(Spanned::span)),
            ),
            (
                "redirect",
                r.redirect.is_some(),
                at(r.redirect.as_ref().map(Spanned::span)),
            ),
            (
                "static",
                r.static_files.is_some(),
                at(r.static_files.as_ref().map(Spanned::span)),
            ),
            ("split", r.split.is_some(), at(r.split.as_ref().map(Spanned::span))),
            ("mirror", r.mirror.is_some(), at(r.mirror.as_ref().map(Spanned::span))),
            (
                "retries",
                r.retries.is_some(),
                at(r.retries.as_ref().map(Spanned::span)),
            ),
            (
                "retry_on",
                r.retry_on.is_some(),
                at(r.retry_on.as_ref().map(Spanned::span)),
            ),
            (
                "strip_prefix",
                r.strip_prefix.is_some(),
                at(r.strip_prefix.as_ref().map(Spanned::span)),
            ),
            ("replace_prefix", r.replace_prefix.is_some(), at(None)),
            ("rewrite", r.rewrite.is_some(), at(None)),
            ("request_headers", !r.request_headers.is_empty(), at(None)),
            (
                "error_pages",
                !r.error_pages.is_empty(),
                at(r.error_pages.keys().next().map(Spanned::span)),
            ),
            ("response_headers", !r.response_headers.is_empty(), at(None)),
            (
                "max_body_size",
                r.max_body_size.is_some(),
                at(r.max_body_size.as_ref().map(Spanned::span)),
            ),
            (
                "match.host (use http_host)",
                m.host.is_some(),
                at(m.host.as_ref().map(Spanned::span)),
            ),
            (
                "match.path",
                [&m.path, &m.path_prefix, &m.path_glob, &m.path_regex]
                    .iter()
                    .any(|p| p.is_some()),
                at(None),
            ),
            (
                "match.methods",
                !m.methods.is_empty(),
                at(m.methods.first().map(Spanned::span)),
            ),
            (
                "match.headers",
                !(m.headers.is_empty() && m.headers_present.is_empty() && m.headers_regex.is_empty()),
                at(None),
            ),
            (
                "match.query",
                !(m.query.is_empty() && m.query_present.is_empty()),
                at(None),
            ),
            (
                "tracing",
                r.tracing.is_some(),
                at(r.tracing.as_ref().map(Spanned::span)),
            ),
        ];
        for (key, present, span) in keys {
            if present {
                self.error(
                    span,
                    format!(
                        "route `{name}`: `{key}` is for routes of HTTP listeners; listener `{listener}` is tcp (set `protocol = \"http\"` on it to route HTTP requests)"
                    ),
                );
            }
        }
    }

    /// A regex on raw bytes (`match.regex`, `deny_regex`): without Unicode, so `.` is any byte,
    /// `\xHH` one byte and `(?i)` ASCII case.
    fn payload_regex(&mut self, r: &Spanned<String>) -> Option<Regex> {
        self.regex_with(r, false)
    }

    /// The TCP-only keys of a route, each an error on an HTTP listener's route.
    pub(super) fn tcp_route_keys(&mut self, listener: &str, name: &str, r: &RawRoute) {
        let m = &r.matcher;
        let spans = [
            ("listener", r.listener.as_ref().map(Spanned::span)),
            ("reject", r.reject.as_ref().map(Spanned::span)),
            ("max_bytes", r.max_bytes.as_ref().map(Spanned::span)),
            ("deny_regex", r.deny_regex.as_ref().map(Spanned::span)),
            ("match.protocol", m.protocol.as_ref().map(Spanned::span)),
            ("match.sni", m.sni.as_ref().map(Spanned::span)),
            ("match.alpn", m.alpn.as_ref().map(Spanned::span)),
            ("match.http_host (use host)", m.http_host.as_ref().map(Spanned::span)),
            ("match.prefix", m.prefix.as_ref().map(Spanned::span)),
            ("match.regex", m.regex.as_ref().map(Spanned::span)),
            ("match.source", m.source.first().map(Spanned::span)),
        ];
        for (key, span) in spans {
            if let Some(span) = span {
                self.error(
                    span,
                    format!("route `{name}`: `{key}` is for routes of TCP listeners; listener `{listener}` is http"),
                );
            }
        }
    }

    fn tcp_matcher(&mut self, name: &str, m: &RawMatch, l: &RawListener) -> Option<TcpMatcher> {
        let mut matcher = TcpMatcher::default();
        if let Some(p) = &m.protocol {
            match p.get_ref().as_str() {
                "proxy" if l.proxy_protocol_from.is_empty() => {
                    self.error(
                        p.span(),
                        format!(
                            "route `{name}` matches a PROXY header, which this listener reads only from the \
                             sources in `proxy_protocol_from` (none set): it can never match"
                        ),
                    );
                    return None;
                }
                "proxy" => matcher.proxy_header = true,
                other => match Protocol::from_name(other) {
                    Some(protocol) => matcher.protocol = Some(protocol),
                    None => {
                        self.error(
                            p.span(),
                            format!(
                                "unknown protocol `{other}` (expected tls, http, h2, ssh, postgres, redis, proxy or unknown)"
                            ),
                        );
                        return None;
                    }
                },
            }
        }
        matcher.sni = m.sni.as_ref().map(|s| super::http::host_match(s.get_ref()));
        matcher.http_host = m.http_host.as_ref().map(|h| super::http::host_match(h.get_ref()));
        matcher.alpn = m.alpn.as_ref().map(|a| a.get_ref().as_bytes().to_vec());
        // Keys that need one protocol, against the protocol the route asks for.
        let needs = [
            ("sni", m.sni.as_ref(), Protocol::Tls),
            ("alpn", m.alpn.as_ref(), Protocol::Tls),
            ("http_host", m.http_host.as_ref(), Protocol::Http),
        ];
        let mut implied: Option<(&str, Protocol)> = None;
        for (key, value, protocol) in needs {
            let Some(value) = value else { continue };
            let clash = match (matcher.protocol, implied) {
                (Some(p), _) if p != protocol => Some(format!("protocol = \"{}\"", p.as_str())),
                (_, Some((other, p))) if p != protocol => Some(format!("`{other}`")),
                _ => None,
            };
            if let Some(clash) = clash {
                self.error(
                    value.span(),
                    format!(
                        "route `{name}` can never match: `{key}` is read from {} and the route also has {clash}",
                        if protocol == Protocol::Tls {
                            "a TLS ClientHello"
                        } else {
                            "an HTTP/1.x request head"
                        }
                    ),
                );
                return None;
            }
            implied = Some((key, protocol));
        }
        if let Some(p) = &m.prefix {
            match unescape_bytes(p.get_ref()) {
                Ok(bytes) if !bytes.is_empty() => matcher.prefix = Some(bytes),
                Ok(_) => {
                    self.error(p.span(), "`prefix` is empty: it would match every connection");
                    return None;
                }
                Err(e) => {
                    self.error(p.span(), e);
                    return None;
                }
            }
        }
        if let Some(re) = &m.regex {
            matcher.regex = Some(self.payload_regex(re)?);
        }
        for net in &m.source {
            match net.get_ref().parse::<IpNet>() {
                Ok(n) => matcher.source.push(n),
                Err(e) => {
                    self.error(net.span(), e.to_string());
                    return None;
                }
            }
        }
        Some(matcher)
    }
}

/// The bytes `s` stands for: `\xHH` is one byte, `\\` a backslash, `\r`, `\n`, `\t` and `\0` as
/// in C; any other character is its UTF-8. (TOML basic strings have no `\x`, so prefixes are
/// written as literal strings: `prefix = '\x16\x03'`.)
pub(super) fn unescape_bytes(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut utf8 = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            continue;
        }
        match chars.next() {
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(b) if hex.len() == 2 => out.push(b),
                    _ => return Err(format!("`\\x{hex}` is not a byte: write two hex digits, as in \\x16")),
                }
            }
            Some('\\') => out.push(b'\\'),
            Some('r') => out.push(b'\r'),
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some(other) => {
                return Err(format!(
                    "unknown escape `\\{other}` (use \\xHH, \\\\, \\r, \\n, \\t or \\0)"
                ))
            }
            None => return Err("a lone `\\` at the end (write `\\\\` for a backslash)".to_string()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
