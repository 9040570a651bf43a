//! Compiling an HTTP listener's HTTP/3 settings (`http3 = true` and the `http3_*` keys) and the
//! `Alt-Svc` its TCP side advertises.

use std::net::SocketAddr;
use std::ops::Range;

use rampart_model::http3::{default_alt_svc, Http3Settings};
use toml::Spanned;

use super::Checker;
use crate::raw::RawListener;

/// The `http3_*` keys that tune HTTP/3, each with where it is written (if it is).
pub(super) fn limit_keys(l: &RawListener) -> [(&'static str, Option<Range<usize>>); 7] {
    [
        (
            "http3_max_concurrent_streams",
            l.http3_max_concurrent_streams.as_ref().map(Spanned::span),
        ),
        ("http3_stream_window", l.http3_stream_window.as_ref().map(Spanned::span)),
        (
            "http3_connection_window",
            l.http3_connection_window.as_ref().map(Spanned::span),
        ),
        ("http3_idle_timeout", l.http3_idle_timeout.as_ref().map(Spanned::span)),
        ("http3_early_data", l.http3_early_data.as_ref().map(Spanned::span)),
        (
            "http3_max_resets_per_second",
            l.http3_max_resets_per_second.as_ref().map(Spanned::span),
        ),
        ("http3_retry", l.http3_retry.as_ref().map(Spanned::span)),
    ]
}

impl Checker<'_> {
    /// `http3_early_data`, refused beside client certificates: a request in early data would be
    /// served before the client's certificate is checked.
    fn early_data(&mut self, l: &RawListener) -> bool {
        let Some(on) = l.http3_early_data.as_ref().filter(|v| *v.get_ref()) else {
            return false;
        };
        let client_certs = l.tls.as_ref().is_some_and(|t| t.get_ref().client_ca.is_some());
        if client_certs {
            self.error(
                on.span(),
                "`http3_early_data` cannot be used with client certificates (`client_ca`): early requests would come before the certificate is checked",
            );
            return false;
        }
        true
    }

    /// The listener's HTTP/3 settings (`None` when off) and its `Alt-Svc` value. `tls`: the
    /// listener terminates TLS (QUIC always does); `bind`: its address, whose port `Alt-Svc`
    /// names.
    pub(super) fn http3(
        &mut self,
        l: &RawListener,
        tls: bool,
        bind: Option<SocketAddr>,
    ) -> (Option<Http3Settings>, Option<Box<str>>) {
        let on = l.http3.as_ref().is_some_and(|v| *v.get_ref());
        if let (true, Some(v)) = (on && !tls, &l.http3) {
            self.error(
                v.span(),
                "`http3` needs TLS on the listener (QUIC is always encrypted): add [listeners.NAME.tls]",
            );
        }
        if let (true, Some(v)) = (on && bind.is_none(), &l.http3) {
            self.error(
                v.span(),
                "`http3` needs `bind`: QUIC listens on the listener's own UDP port",
            );
        }
        let alt_svc = match l.alt_svc.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("auto", _)) if on => bind.map(|b| default_alt_svc(b.port())),
            None | Some(("off", _)) => None,
            Some(("auto", span)) => {
                self.error(
                    span,
                    "alt_svc = \"auto\" advertises this listener's HTTP/3: set http3 = true",
                );
                None
            }
            Some((value, span)) => {
                if value.bytes().any(|b| b.is_ascii_control()) || value.trim().is_empty() {
                    self.error(span, "alt_svc must be \"auto\", \"off\" or a header value");
                }
                Some(value.into())
            }
        };
        if !on {
            for (key, span) in limit_keys(l) {
                if let Some(span) = span {
                    self.error(span, format!("`{key}` needs http3 = true on this listener"));
                }
            }
            return (None, alt_svc);
        }
        let d = Http3Settings::default();
        let mut count = |v: &Option<Spanned<i64>>, key: &str, default: u32, max: i64| {
            v.as_ref()
                .and_then(|v| self.count(v, key, 1, max))
                .map_or(default, |n| n as u32)
        };
        let max_concurrent_streams = count(
            &l.http3_max_concurrent_streams,
            "http3_max_concurrent_streams",
            d.max_concurrent_streams,
            10_000,
        );
        let max_resets_per_second = count(
            &l.http3_max_resets_per_second,
            "http3_max_resets_per_second",
            d.max_resets_per_second,
            1_000_000,
        );
        let window = |s: &mut Self, v: &Option<Spanned<String>>, default: u32| {
            s.size(v, default as usize, 16 << 10, (1 << 30) - 1) as u32
        };
        let always_retry = match l.http3_retry.as_ref().map(|v| (v.get_ref().as_str(), v.span())) {
            None | Some(("under_load", _)) => false,
            Some(("always", _)) => true,
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown http3_retry `{other}` (expected \"under_load\" or \"always\")"),
                );
                false
            }
        };
        let settings = Http3Settings {
            max_concurrent_streams,
            stream_window: window(self, &l.http3_stream_window, d.stream_window),
            connection_window: window(self, &l.http3_connection_window, d.connection_window),
            idle_timeout: self.duration(&l.http3_idle_timeout, d.idle_timeout),
            early_data: self.early_data(l),
            max_resets_per_second,
            always_retry,
        };
        (Some(settings), alt_svc)
    }
}

#[cfg(test)]
mod tests;
