//! Checks across keys and listeners that compile no value of their own: keys that do nothing for
//! a listener's or an upstream's kind.

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
    /// HTTP-only keys on a TCP listener are errors: they would be silently ignored.
    pub(super) fn tcp_listener_keys(&mut self, name: &str, l: &RawListener) {
        if is_http(l) != Some(false) {
            return;
        }
        let keys: [(&str, Option<Range<usize>>); 5] = [
            ("forwarded_headers", l.forwarded_headers.as_ref().map(Spanned::span)),
            (
                "client_header_timeout",
                l.client_header_timeout.as_ref().map(Spanned::span),
            ),
            ("keepalive_timeout", l.keepalive_timeout.as_ref().map(Spanned::span)),
            ("access_log", l.access_log.as_ref().map(Spanned::span)),
            ("routes", l.routes.first().map(Spanned::span)),
        ];
        for (key, span) in keys {
            if let Some(span) = span {
                self.error(
                    span,
                    format!("`{key}` is for HTTP listeners; listener `{name}` is tcp (set protocol = \"http\")"),
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
                        http_used |= uses
                            || l.routes
                                .iter()
                                .any(|r| r.get_ref().upstream.as_ref().is_some_and(|u| u.get_ref() == name));
                    }
                    _ => {}
                }
            }
            if http_used || tcp_users.is_empty() {
                continue;
            }
            let keys: [(&str, Option<Range<usize>>); 7] = [
                (
                    "response_header_timeout",
                    up.response_header_timeout.as_ref().map(Spanned::span),
                ),
                ("read_timeout", up.read_timeout.as_ref().map(Spanned::span)),
                ("write_timeout", up.write_timeout.as_ref().map(Spanned::span)),
                ("pool_max_idle", up.pool_max_idle.as_ref().map(Spanned::span)),
                ("pool_idle_timeout", up.pool_idle_timeout.as_ref().map(Spanned::span)),
                ("retries", up.retries.as_ref().map(Spanned::span)),
                ("request_timeout", up.request_timeout.as_ref().map(Spanned::span)),
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
}

#[cfg(test)]
mod tests;
