//! Compiling UDP listeners (`protocol = "udp"`) and the checks on what they may use: keys that
//! mean nothing for datagrams are errors at their values, an upstream they use is checked with
//! a DNS query or not at all, and no address is taken twice on the same transport.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;

use rampart_model::net::binds_overlap;
use rampart_model::{ListenerProtocol, Transport};
use toml::Spanned;

use super::{parse_bind, Checker};
use crate::raw::{RawConfig, RawListener};

/// Whether the listener is a UDP one.
pub(super) fn is_udp(l: &RawListener) -> bool {
    l.protocol.as_ref().is_some_and(|p| p.get_ref() == "udp")
}

impl Checker<'_> {
    /// The protocol of UDP listener `name`: its upstream (required), every key that has no
    /// meaning for datagrams an error.
    pub(super) fn udp_listener(&mut self, name: &str, l: &RawListener, upstreams: &[&str]) -> Option<ListenerProtocol> {
        let keys: [(&str, Option<Range<usize>>); 8] = [
            ("tls", l.tls.as_ref().map(Spanned::span)),
            ("routes", l.routes.first().map(Spanned::span)),
            ("proxy_protocol_from", l.proxy_protocol_from.first().map(Spanned::span)),
            (
                "proxy_header_timeout",
                l.proxy_header_timeout.as_ref().map(Spanned::span),
            ),
            ("peek_timeout", l.peek_timeout.as_ref().map(Spanned::span)),
            ("peek_max", l.peek_max.as_ref().map(Spanned::span)),
            ("buffer_size", l.buffer_size.as_ref().map(Spanned::span)),
            // UDP sessions are not traced.
            ("tracing", l.tracing.as_ref().map(Spanned::span)),
        ];
        for (key, span) in keys {
            if let Some(span) = span {
                self.error(span, format!("`{key}` has no meaning on UDP listener `{name}`"));
            }
        }
        let Some(up) = &l.upstream else {
            self.error(
                l.protocol.as_ref().map_or(0..0, Spanned::span),
                format!("UDP listener `{name}` needs `upstream`"),
            );
            return None;
        };
        let responses = l
            .session_responses
            .as_ref()
            .and_then(|n| self.count(n, "session_responses", 1, 1_000_000))
            .map(|n| n as u32);
        match upstreams.iter().position(|u| *u == up.get_ref()) {
            Some(upstream) => Some(ListenerProtocol::Udp { upstream, responses }),
            None => {
                let known = upstreams.join(", ");
                self.error(
                    up.span(),
                    format!(
                        "listener `{name}` refers to unknown upstream `{}` (defined: {known})",
                        up.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// An upstream that UDP listeners use is reached by datagrams: no TLS, no HTTP, and an active
    /// check that is a DNS query (a TCP connect or an HTTP request would test another service).
    pub(super) fn udp_upstream_keys(&mut self, raw: &RawConfig) {
        for (spanned_name, up) in &raw.upstreams {
            let name = spanned_name.get_ref();
            let udp_user = raw
                .listeners
                .iter()
                .find(|(_, l)| is_udp(l) && l.upstream.as_ref().is_some_and(|u| u.get_ref() == name));
            let Some((listener, _)) = udp_user else {
                continue;
            };
            let listener = listener.get_ref();
            if let Some(tls) = &up.tls {
                self.error(
                    tls.span(),
                    format!("upstream `{name}` is used by UDP listener `{listener}`: datagrams carry no TLS"),
                );
            }
            if let Some(v1) = up.send_proxy_protocol.as_ref().filter(|v| v.get_ref() == "v1") {
                self.error(
                    v1.span(),
                    format!(
                        "upstream `{name}` is used by UDP listener `{listener}`: PROXY v1 cannot say UDP; use \"v2\""
                    ),
                );
            }
            if let Some(protocol) = &up.protocol {
                self.error(
                    protocol.span(),
                    format!("`protocol` is for HTTP upstreams; upstream `{name}` is used by UDP listener `{listener}`"),
                );
            }
            if let Some(check) = &up.health_check {
                if check.dns_query.is_none() {
                    let span = check.http_path.as_ref().map_or(spanned_name.span(), Spanned::span);
                    self.error(
                        span,
                        format!(
                            "upstream `{name}` is used by UDP listener `{listener}`: check it with `dns_query = \"NAME\"` (a TCP connect or an HTTP request would test another service)"
                        ),
                    );
                }
            }
        }
    }

    /// A `dns_query` name: a DNS name of labels of at most 63 octets, 253 in all; not beside
    /// `http_path`.
    pub(super) fn dns_query_name(&mut self, q: &Spanned<String>, with_http: bool) -> Option<String> {
        let name = q.get_ref().trim_end_matches('.');
        if with_http {
            self.error(
                q.span(),
                "`dns_query` and `http_path` are two kinds of check: choose one",
            );
            return None;
        }
        let labels_ok = name.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if name.is_empty() || name.len() > 253 || !labels_ok {
            self.error(q.span(), format!("`{}` is not a DNS name", q.get_ref()));
            return None;
        }
        Some(name.to_string())
    }

    /// Two listeners that would take the same traffic: the same transport and port, and equal
    /// addresses or a wildcard of the other's family among them (an HTTP listener with `http3`
    /// takes UDP on its address too). TCP and UDP on one address do not overlap (DNS serves
    /// both). The later one in the file is the error.
    pub(super) fn overlapping_binds(&mut self, listeners: &BTreeMap<Spanned<String>, RawListener>) {
        let mut binds: Vec<(&str, Range<usize>, Transport, SocketAddr)> = Vec::new();
        for (name, l) in listeners {
            let Some(bind) = l.bind.as_ref() else { continue };
            let Ok(addr) = parse_bind(bind.get_ref()) else { continue };
            let name = name.get_ref().as_str();
            match is_udp(l) {
                true => binds.push((name, bind.span(), Transport::Udp, addr)),
                false => {
                    binds.push((name, bind.span(), Transport::Tcp, addr));
                    if l.http3.as_ref().is_some_and(|h| *h.get_ref()) {
                        binds.push((name, bind.span(), Transport::Udp, addr));
                    }
                }
            }
        }
        binds.sort_by_key(|(_, span, _, _)| span.start);
        for (i, (name, span, transport, addr)) in binds.iter().enumerate() {
            let earlier = binds[..i]
                .iter()
                .find(|(other, _, t, a)| t == transport && other != name && binds_overlap(*a, *addr));
            let Some((other, _, _, other_addr)) = earlier else {
                continue;
            };
            let on = match transport {
                Transport::Tcp => "",
                Transport::Udp => " (udp)",
            };
            let message = if other_addr == addr {
                format!("listener `{name}` binds {addr}{on} like listener `{other}`")
            } else {
                format!("listener `{name}` binds {addr}{on}, which overlaps listener `{other}` on {other_addr}")
            };
            self.error(span.clone(), message);
        }
    }
}

#[cfg(test)]
mod tests;
