//! Compiling HTTP listeners: routes (matchers, one action, filters) and listener settings.

use std::sync::Arc;

use rampart_model::net::IpNet;
use rampart_model::route::{
    HeaderMatch, HostMatch, PathMatch, QueryMatch, RedirectTo, Route, RouteAction, RouteMatcher,
};
use rampart_model::{AccessLogFormat, ForwardedHeaders, Http2Settings, HttpListener};
use rampart_proto::h1::Limits;
use regex::bytes::Regex;
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawHttp2, RawListener, RawMatch, RawRoute};
use rampart_model::defaults;

impl Checker<'_> {
    /// Compiles the HTTP side of listener `name`. `upstream_index` finds an upstream by name.
    pub(super) fn http_listener(
        &mut self,
        name: &str,
        l: &RawListener,
        upstream_index: &dyn Fn(&str) -> Option<usize>,
        upstream_names: &str,
        live: &mut LiveState,
    ) -> Option<HttpListener> {
        let forwarded = match l.forwarded_headers.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
            None | Some(("append", _)) => ForwardedHeaders::Append,
            Some(("replace", _)) => ForwardedHeaders::Replace,
            Some(("off", _)) => ForwardedHeaders::Off,
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown forwarded_headers `{other}` (expected \"append\", \"replace\" or \"off\")"),
                );
                ForwardedHeaders::Append
            }
        };
        let access_log = l.access_log.as_ref().map(Spanned::get_ref).and_then(|a| {
            let path: Arc<std::path::Path> = Arc::from(self.log_file("access log", &a.path));
            let format = match a.format.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
                None | Some(("json", _)) => AccessLogFormat::Json,
                Some(("combined", _)) => AccessLogFormat::Combined,
                Some((other, span)) => {
                    self.error(
                        span,
                        format!("unknown access log format `{other}` (expected \"json\" or \"combined\")"),
                    );
                    return None;
                }
            };
            Some((path, format))
        });
        let listener_filters = self.filter_list(name, &l.filters, live);
        let error_pages = self.error_pages(&l.error_pages).map(Arc::new);
        let mut routes = Vec::new();
        for (i, r) in l.routes.iter().enumerate() {
            if let Some(mut route) = self.route(name, i, r, &listener_filters, upstream_index, upstream_names, live) {
                // A route's own pages over its listener's.
                route.error_pages = match (route.error_pages.take(), &error_pages) {
                    (Some(own), Some(listener)) => Some(Arc::new(own.over(listener))),
                    (own, listener) => own.or_else(|| listener.clone()),
                };
                routes.push(route);
            }
        }
        if let Some(up) = &l.upstream {
            match upstream_index(up.get_ref()) {
                Some(upstream) => routes.push(Route {
                    name: "default".to_string(),
                    matcher: RouteMatcher::default(),
                    action: RouteAction::Proxy { upstream },
                    filters: self.route_chain(&format!("{name}/default"), &listener_filters, None, live),
                    mirror: None,
                    cache: None,
                    retry: Default::default(),
                    error_pages: error_pages.clone(),
                    traced: true,
                    metrics: live.route_metrics(name, "default"),
                }),
                None => self.error(
                    up.span(),
                    format!(
                        "listener `{name}` refers to unknown upstream `{}` {}",
                        up.get_ref(),
                        super::suggest::defined(up.get_ref(), upstream_names)
                    ),
                ),
            }
        }
        if routes.is_empty() && l.routes.is_empty() && l.upstream.is_none() && self.acme_configured && l.tls.is_none() {
            // A plain listener for ACME alone (Caddy's): HTTP-01 answers (put first later) and a
            // redirect of everything else to HTTPS.
            routes.push(super::acme::https_redirect(name, live));
        } else if routes.is_empty() && l.routes.is_empty() && l.upstream.is_none() {
            self.error(
                l.bind.as_ref().map_or(0..0, Spanned::span),
                format!("HTTP listener `{name}` has no routes and no upstream"),
            );
        }
        Some(HttpListener {
            routes,
            forwarded,
            limits: Limits::default(),
            client_header_timeout: self.duration(&l.client_header_timeout, defaults::CLIENT_HEADER_TIMEOUT),
            keepalive_timeout: self.duration(&l.keepalive_timeout, defaults::KEEPALIVE_TIMEOUT),
            access_log,
            unrouted: live.route_metrics(name, ""),
            http2: self.http2(l),
            // Set by the listener once its TLS and address are known (`Checker::http3`).
            http3: None,
            alt_svc: None,
            trusted_proxies: self.networks(&l.trusted_proxies),
            error_pages,
        })
    }

    /// The listener's HTTP/2 settings, `None` when `http2 = false`.
    pub(super) fn http2(&mut self, l: &RawListener) -> Option<Http2Settings> {
        let prior_knowledge_only = match l.http2.as_ref().map(|v| (v.get_ref(), v.span())) {
            Some((RawHttp2::On(false), _)) => return None,
            None | Some((RawHttp2::On(true), _)) => false,
            Some((RawHttp2::Mode(mode), _)) if mode == "only" => true,
            Some((RawHttp2::Mode(mode), span)) => {
                self.error(span, format!("http2 must be true, false or \"only\", not {mode:?}"));
                false
            }
        };
        let d = Http2Settings::default();
        let mut count = |v: &Option<Spanned<i64>>, key: &str, default: u32, min: i64, max: i64| {
            v.as_ref()
                .and_then(|v| self.count(v, key, min, max))
                .map_or(default, |n| n as u32)
        };
        let max_concurrent_streams = count(
            &l.http2_max_concurrent_streams,
            "http2_max_concurrent_streams",
            d.max_concurrent_streams,
            1,
            10_000,
        );
        let max_resets_per_second = count(
            &l.http2_max_resets_per_second,
            "http2_max_resets_per_second",
            d.max_resets_per_second,
            1,
            1_000_000,
        );
        // Windows: at least the protocol's initial 65,535 bytes, at most its 2^31-1.
        let window = |s: &mut Self, v: &Option<Spanned<String>>, default: u32| {
            s.size(v, default as usize, 65_535, (1 << 31) - 1) as u32
        };
        Some(Http2Settings {
            max_concurrent_streams,
            max_header_list_size: self.size(
                &l.http2_max_header_list_size,
                d.max_header_list_size as usize,
                1024,
                16 << 20,
            ) as u32,
            stream_window: window(self, &l.http2_stream_window, d.stream_window),
            connection_window: window(self, &l.http2_connection_window, d.connection_window),
            max_resets_per_second,
            prior_knowledge_only,
        })
    }

    /// Networks written as strings, each error at its string.
    fn networks(&mut self, list: &[Spanned<String>]) -> Vec<IpNet> {
        let mut out = Vec::new();
        for net in list {
            match net.get_ref().parse::<IpNet>() {
                Ok(n) => out.push(n),
                Err(e) => self.error(net.span(), e.to_string()),
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn route(
        &mut self,
        listener: &str,
        index: usize,
        r: &Spanned<RawRoute>,
        listener_filters: &[std::sync::Arc<rampart_model::filter::FilterInstance>],
        upstream_index: &dyn Fn(&str) -> Option<usize>,
        upstream_names: &str,
        live: &mut LiveState,
    ) -> Option<Route> {
        let span = r.span();
        let r = r.get_ref();
        let name = r.name.clone().unwrap_or_else(|| format!("{listener}#{}", index + 1));
        self.tcp_route_keys(listener, &name, r);
        let actions = [
            r.upstream.is_some(),
            r.respond.is_some(),
            r.redirect.is_some(),
            r.static_files.is_some(),
            r.split.is_some(),
        ]
        .iter()
        .filter(|a| **a)
        .count();
        if actions != 1 {
            self.error(
                span.clone(),
                format!("route `{name}` needs exactly one of `upstream`, `split`, `respond`, `redirect` or `static`"),
            );
            return None;
        }
        let action = if let Some(split) = &r.split {
            RouteAction::Split(std::sync::Arc::new(self.split(
                &name,
                split,
                upstream_index,
                upstream_names,
            )?))
        } else if let Some(files) = &r.static_files {
            RouteAction::Static(self.static_files(files.get_ref())?)
        } else if let Some(up) = &r.upstream {
            match upstream_index(up.get_ref()) {
                Some(upstream) => RouteAction::Proxy { upstream },
                None => {
                    self.error(
                        up.span(),
                        format!(
                            "route `{name}` refers to unknown upstream `{}` {}",
                            up.get_ref(),
                            super::suggest::defined(up.get_ref(), upstream_names)
                        ),
                    );
                    return None;
                }
            }
        } else if let Some(resp) = &r.respond {
            let resp = resp.get_ref();
            let status = self.status(resp.status.as_ref(), 200, 100..=599)?;
            let headers = self.header_pairs(&resp.headers, &format!("route `{name}`: respond"))?;
            RouteAction::Respond {
                status,
                headers,
                body: resp.body.clone().into_bytes(),
            }
        } else {
            let redirect = r.redirect.as_ref()?.get_ref();
            if let (Some(port), None) = (&redirect.port, &redirect.scheme) {
                self.error(
                    port.span(),
                    format!("route `{name}`: a redirect's `port` goes with `scheme`"),
                );
                return None;
            }
            let to = match (&redirect.to, &redirect.scheme) {
                (Some(location), None) => {
                    if !self.check_uri(
                        location.span(),
                        location.get_ref(),
                        &format!("route `{name}`: redirect `to`"),
                    ) {
                        return None;
                    }
                    RedirectTo::Location {
                        location: location.get_ref().clone(),
                        keep_path: redirect.keep_path,
                    }
                }
                (None, Some(scheme)) if ["http", "https"].contains(&scheme.get_ref().as_str()) => {
                    let port = match &redirect.port {
                        Some(p) => Some(self.count(p, "redirect port", 1, 65535)? as u16),
                        None => None,
                    };
                    RedirectTo::Scheme {
                        scheme: scheme.get_ref().clone(),
                        port,
                    }
                }
                (None, Some(scheme)) => {
                    self.error(
                        scheme.span(),
                        format!("redirect scheme `{}` must be \"http\" or \"https\"", scheme.get_ref()),
                    );
                    return None;
                }
                _ => {
                    self.error(
                        span.clone(),
                        format!("route `{name}`: a redirect needs exactly one of `to` or `scheme`"),
                    );
                    return None;
                }
            };
            // A scheme change is permanent by habit (nginx `return 301 https://...`).
            let default = if redirect.scheme.is_some() { 301 } else { 302 };
            let status = self.status(redirect.status.as_ref(), default, 300..=399)?;
            RouteAction::Redirect { status, to }
        };
        let matcher = self.matcher(&r.matcher)?;
        let mirror = match &r.mirror {
            Some(m) if !matches!(action, RouteAction::Proxy { .. } | RouteAction::Split(_)) => {
                self.error(m.span(), format!("route `{name}`: `mirror` is for routes that proxy"));
                return None;
            }
            Some(m) => Some(self.mirror(&name, m.get_ref(), upstream_index, upstream_names)?),
            None => None,
        };
        let proxies = matches!(action, RouteAction::Proxy { .. } | RouteAction::Split(_));
        let retry = self.route_retry(&name, r, proxies)?;
        let cache = match &r.cache {
            Some(c) => Some(self.route_cache(&name, c, proxies)?),
            None => None,
        };
        let filters = self.route_chain(&format!("{listener}/{name}"), listener_filters, Some(r), live);
        Some(Route {
            matcher,
            action,
            filters,
            mirror,
            cache,
            retry,
            error_pages: self.error_pages(&r.error_pages).map(Arc::new),
            traced: r.tracing.as_ref().is_none_or(|t| *t.get_ref()),
            metrics: live.route_metrics(listener, &name),
            name,
        })
    }

    fn matcher(&mut self, m: &RawMatch) -> Option<RouteMatcher> {
        let host = m.host.as_ref().map(|h| host_match(h.get_ref()));
        let paths: Vec<&Spanned<String>> = [&m.path, &m.path_prefix, &m.path_glob, &m.path_regex]
            .into_iter()
            .flatten()
            .collect();
        if paths.len() > 1 {
            self.error(
                paths[1].span(),
                "use only one of `path`, `path_prefix`, `path_glob`, `path_regex`",
            );
            return None;
        }
        let path = if let Some(p) = &m.path {
            Some(PathMatch::Exact(self.path_prefix(p)?))
        } else if let Some(p) = &m.path_prefix {
            Some(PathMatch::Prefix(self.path_prefix(p)?))
        } else if let Some(p) = &m.path_glob {
            Some(PathMatch::Glob(self.path_prefix(p)?))
        } else if let Some(p) = &m.path_regex {
            Some(PathMatch::Regex(self.regex(p)?))
        } else {
            None
        };
        let mut methods = Vec::new();
        for method in &m.methods {
            let v = method.get_ref();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
                self.error(method.span(), format!("`{v}` is not an HTTP method"));
                return None;
            }
            methods.push(v.to_ascii_uppercase());
        }
        let mut headers: Vec<HeaderMatch> = m
            .headers_present
            .iter()
            .map(|n| HeaderMatch::Present(n.to_ascii_lowercase()))
            .collect();
        headers.extend(
            m.headers
                .iter()
                .map(|(n, v)| HeaderMatch::Equals(n.to_ascii_lowercase(), v.clone())),
        );
        for (n, re) in &m.headers_regex {
            headers.push(HeaderMatch::Regex(n.to_ascii_lowercase(), self.regex(re)?));
        }
        let mut query: Vec<QueryMatch> = m
            .query_present
            .iter()
            .map(|n| QueryMatch {
                name: n.clone(),
                value: None,
            })
            .collect();
        query.extend(m.query.iter().map(|(n, v)| QueryMatch {
            name: n.clone(),
            value: Some(v.clone()),
        }));
        Some(RouteMatcher {
            host,
            path,
            methods,
            headers,
            query,
        })
    }

    pub(super) fn path_prefix(&mut self, p: &Spanned<String>) -> Option<String> {
        if p.get_ref().starts_with('/') {
            Some(p.get_ref().clone())
        } else {
            self.error(p.span(), format!("path `{}` must start with /", p.get_ref()));
            None
        }
    }

    pub(super) fn regex(&mut self, r: &Spanned<String>) -> Option<Regex> {
        self.regex_with(r, true)
    }

    /// A bytes regex, with Unicode (paths, headers) or without (payloads: `.` is any byte).
    pub(super) fn regex_with(&mut self, r: &Spanned<String>, unicode: bool) -> Option<Regex> {
        match regex::bytes::RegexBuilder::new(r.get_ref()).unicode(unicode).build() {
            Ok(re) => Some(re),
            Err(e) => {
                let first = e.to_string().lines().last().unwrap_or("invalid").trim().to_string();
                self.error(r.span(), format!("invalid regex `{}`: {first}", r.get_ref()));
                None
            }
        }
    }

    fn status(
        &mut self,
        s: Option<&Spanned<i64>>,
        default: u16,
        allowed: std::ops::RangeInclusive<i64>,
    ) -> Option<u16> {
        match s {
            None => Some(default),
            Some(v) if allowed.contains(v.get_ref()) => Some(*v.get_ref() as u16),
            Some(v) => {
                self.error(
                    v.span(),
                    format!(
                        "status {} is out of range ({} to {})",
                        v.get_ref(),
                        allowed.start(),
                        allowed.end()
                    ),
                );
                None
            }
        }
    }
}

/// An exact host, or `*.example.com` (any subdomain of example.com, at any depth).
pub(super) fn host_match(host: &str) -> HostMatch {
    let v = host.to_ascii_lowercase();
    match v.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') => HostMatch::Suffix(suffix.to_string()),
        _ => HostMatch::Exact(v),
    }
}

mod static_files;
#[cfg(test)]
mod tests;
