//! Checks across keys and listeners that compile no value of their own: keys that do nothing for
//! a listener's or an upstream's kind, listen addresses that overlap, and log files that cannot
//! be opened.

use std::fs::OpenOptions;
use std::ops::Range;

use toml::Spanned;

use super::Checker;
use crate::raw::{RawConfig, RawListener};

/// Whether a listener speaks HTTP; `None` for an unknown protocol (reported elsewhere).
pub(super) fn is_http(l: &RawListener) -> Option<bool> {
    match l.protocol.as_ref().map(|p| p.get_ref().as_str()) {
        None | Some("tcp") => Some(false),
        Some("http") => Some(true),
        Some(_) => None,
    }
}

impl Checker<'_> {
    /// HTTP-only keys on a TCP or UDP listener are errors: they would be silently ignored.
    pub(super) fn tcp_listener_keys(&mut self, name: &str, l: &RawListener) {
        let udp = super::udp::is_udp(l);
        if is_http(l) != Some(false) && !udp {
            return;
        }
        let kind = if udp { "udp" } else { "tcp" };
        let http_keys: [(&str, Option<Range<usize>>); 15] = [
            ("filters", l.filters.first().map(Spanned::span)),
            ("error_pages", l.error_pages.keys().next().map(Spanned::span)),
            ("trusted_proxies", l.trusted_proxies.first().map(Spanned::span)),
            ("forwarded_headers", l.forwarded_headers.as_ref().map(Spanned::span)),
            (
                "client_header_timeout",
                l.client_header_timeout.as_ref().map(Spanned::span),
            ),
            ("keepalive_timeout", l.keepalive_timeout.as_ref().map(Spanned::span)),
            ("access_log", l.access_log.as_ref().map(Spanned::span)),
            ("http2", l.http2.as_ref().map(Spanned::span)),
            (
                "http2_max_concurrent_streams",
                l.http2_max_concurrent_streams.as_ref().map(Spanned::span),
            ),
            (
                "http2_max_header_list_size",
                l.http2_max_header_list_size.as_ref().map(Spanned::span),
            ),
            ("http2_stream_window", l.http2_stream_window.as_ref().map(Spanned::span)),
            (
                "http2_connection_window",
                l.http2_connection_window.as_ref().map(Spanned::span),
            ),
            (
                "http2_max_resets_per_second",
                l.http2_max_resets_per_second.as_ref().map(Spanned::span),
            ),
            ("http3", l.http3.as_ref().map(Spanned::span)),
            ("alt_svc", l.alt_svc.as_ref().map(Spanned::span)),
        ];
        let keys = http_keys.into_iter().chain(super::http3::limit_keys(l));
        for (key, span) in keys {
            if let Some(span) = span {
                self.error(
                    span,
                    format!("`{key}` is for HTTP listeners; listener `{name}` is {kind} (set protocol = \"http\")"),
                );
            }
        }
    }

    /// HTTP-only keys on an upstream that only TCP listeners use are errors.
    pub(super) fn tcp_upstream_keys(&mut self, raw: &RawConfig) {
        for (name, up) in &raw.upstreams {
            let name = name.get_ref();
            let mut tcp_users = Vec::new();
            let mut http_used = false;
            for (listener, l) in &raw.listeners {
                let uses = l.upstream.as_ref().is_some_and(|u| u.get_ref() == name);
                match is_http(l) {
                    Some(false) if uses => tcp_users.push(format!("`{}`", listener.get_ref())),
                    Some(true) => {
                        http_used |= uses || l.routes.iter().any(|r| route_uses(r.get_ref(), name));
                    }
                    _ => {}
                }
            }
            if http_used || tcp_users.is_empty() {
                continue;
            }
            let keys: [(&str, Option<Range<usize>>); 16] = [
                (
                    "response_header_timeout",
                    up.response_header_timeout.as_ref().map(Spanned::span),
                ),
                ("read_timeout", up.read_timeout.as_ref().map(Spanned::span)),
                ("write_timeout", up.write_timeout.as_ref().map(Spanned::span)),
                ("pool_max_idle", up.pool_max_idle.as_ref().map(Spanned::span)),
                ("pool_idle_timeout", up.pool_idle_timeout.as_ref().map(Spanned::span)),
                ("retries", up.retries.as_ref().map(Spanned::span)),
                ("retry_on", up.retry_on.as_ref().map(Spanned::span)),
                ("retry_budget", up.retry_budget.as_ref().map(Spanned::span)),
                ("retry_pass_over", up.retry_pass_over.as_ref().map(Spanned::span)),
                (
                    "retry_max_body_size",
                    up.retry_max_body_size.as_ref().map(Spanned::span),
                ),
                ("outlier_detection", up.outlier_detection.as_ref().map(Spanned::span)),
                ("sticky_cookie", up.sticky_cookie.as_ref().map(Spanned::span)),
                (
                    "max_requests_per_target",
                    up.max_requests_per_target.as_ref().map(Spanned::span),
                ),
                ("queue", up.queue.as_ref().map(Spanned::span)),
                ("request_timeout", up.request_timeout.as_ref().map(Spanned::span)),
                ("protocol", up.protocol.as_ref().map(Spanned::span)),
            ];
            let users = tcp_users.join(", ");
            for (key, span) in keys {
                if let Some(span) = span {
                    self.error(
                        span,
                        format!(
                            "`{key}` is for HTTP upstreams; upstream `{name}` is used only by TCP listener(s) {users}"
                        ),
                    );
                }
            }
        }
    }

    /// Where a log goes ([`rampart_model::log_target::LogTarget`]): a syslog server, OTLP logs
    /// (which need `[tracing]` with an `endpoint`),
    /// standard output, or a file named at `path` (relative to the config file's directory),
    /// opened here the way the writer will (append, create) so that a path that cannot be opened
    /// is an error of the config rather than of its first line.
    pub(super) fn log_file(&mut self, what: &str, path: &Spanned<String>) -> std::path::PathBuf {
        use rampart_model::log_target::LogTarget;
        match LogTarget::parse(path.get_ref()) {
            Ok(LogTarget::File(_)) => {}
            Ok(LogTarget::Otlp) if !self.otlp_configured => {
                self.error(
                    path.span(),
                    format!("{what} to `otlp` needs an OTLP collector: `endpoint` in [tracing]"),
                );
                return path.get_ref().into();
            }
            Ok(_) => return path.get_ref().into(),
            Err(e) => {
                self.error(path.span(), format!("{what}: {e}"));
                return path.get_ref().into();
            }
        }
        let file = self.relative_path(path);
        if let Err(e) = OpenOptions::new().create(true).append(true).open(&file) {
            self.error(path.span(), format!("cannot open {what} {}: {e}", file.display()));
        }
        file
    }
}

#[cfg(test)]
mod tests;

/// Whether an HTTP route sends requests to the upstream `name` (its `upstream`, or a way of its
/// `split`).
fn route_uses(r: &crate::raw::RawRoute, name: &str) -> bool {
    r.upstream.as_ref().is_some_and(|u| u.get_ref() == name)
        || r.split
            .as_ref()
            .is_some_and(|ways| ways.get_ref().iter().any(|w| w.get_ref().upstream.get_ref() == name))
}
