//! The spans of one request, written when it ends ([`record`]): a server span for the request
//! (also for one refused before routing), with the TLS facts of its connection and events for a
//! filter's refusal and a wait in the upstream's queue, and a client span per attempt at the
//! upstream under it (its target, a new or reused connection, the connect time, the time to the
//! response head, the status or error, why a retry followed), read from the request's attempts
//! record. A request not sampled is written only when a tail decision keeps it (`errors`,
//! `slower_than`). Names and attributes follow OpenTelemetry's HTTP conventions, with Rampart's
//! own under `rampart.`.

use std::time::{Duration, Instant, SystemTime};

use rampart_model::trace::TraceSettings;
use rampart_model::{Target, Upstream};
use rampart_proto::message::{Protocol, RequestHead};

use super::RequestTrace;
use crate::http::attempts::Attempt;
use crate::http::context::RequestContext;
use crate::http::error::{ErrorSource, HttpError};
use crate::telemetry::otlp::{Attribute, Event, SpanData, SpanKind, Value};
use crate::telemetry::unix_nanos;
use crate::tls::TlsInfo;
use crate::worker::WorkerContext;

/// What the end of a request knows beside its context.
pub(crate) struct RequestFacts<'a> {
    pub head: Option<&'a RequestHead>,
    pub listener: &'a str,
    pub route: Option<&'a str>,
    pub upstream: Option<&'a Upstream>,
    /// The client's address as text (the connection's, formatted once).
    pub client_ip: &'a str,
    pub scheme: &'a str,
    pub protocol: Protocol,
    pub tls: Option<TlsInfo<'a>>,
    pub user: Option<&'a str>,
    pub request_id: Option<&'a str>,
    /// How long the request took.
    pub took: Duration,
}

/// Writes the request's spans into the worker's queue when they are to be exported.
pub(crate) fn record(
    ctx: &WorkerContext,
    settings: &TraceSettings,
    trace: &RequestTrace,
    rctx: &RequestContext,
    f: &RequestFacts<'_>,
) {
    let Some(export) = &settings.export else { return };
    // A failure of Rampart's or the upstream's (a client that went away, or sent a bad request,
    // is not one).
    let failed = rctx.status >= 500 || rctx.error.is_some_and(|e| e.source() != ErrorSource::Downstream);
    let keep = trace.outgoing.sampled()
        || (settings.errors && failed)
        || settings.slower_than.is_some_and(|limit| f.took > limit);
    if !keep {
        return;
    }
    let end = unix_nanos(SystemTime::now());
    let start = end.saturating_sub(f.took.as_nanos() as u64);
    let at = |i: Instant| start + i.saturating_duration_since(rctx.began).as_nanos() as u64;
    let at_us = |us: u32| start + u64::from(us) * 1000;
    let method = f.head.map_or(&b""[..], |h| h.method());

    let error = rctx.error.map(HttpError::reason).or(rctx.filter_reason);
    let mut events: [Event<'_>; 2] = [Event {
        time: 0,
        name: "",
        attributes: &[],
    }; 2];
    let mut n_events = 0;
    let waited;
    if let Some((from, to)) = trace.queued.get() {
        waited = [(
            "rampart.queue.waited_us",
            Value::Int(to.saturating_duration_since(from).as_micros() as i64),
        )];
        events[n_events] = Event {
            time: at(from),
            name: "rampart.queue.wait",
            attributes: &waited,
        };
        n_events += 1;
    }
    let refused;
    if let (Some(when), Some(reason)) = (trace.refused_at.get(), rctx.filter_reason) {
        refused = [
            ("rampart.filter.reason", Value::Str(reason.as_bytes())),
            ("http.response.status_code", Value::Int(i64::from(rctx.status))),
        ];
        events[n_events] = Event {
            time: at(when),
            name: "rampart.filter.refused",
            attributes: &refused,
        };
        n_events += 1;
    }
    // A server span's error is a 5xx or a failure of Rampart or the upstream (a 4xx is the
    // client's).
    let server_error = if rctx.status >= 500
        || rctx
            .error
            .is_some_and(|e| e.source() != crate::http::error::ErrorSource::Downstream)
    {
        Some(error.unwrap_or("error").as_bytes())
    } else {
        None
    };
    let server = SpanData {
        trace_id: trace.outgoing.trace_id,
        span_id: trace.outgoing.parent_id,
        parent: trace.parent,
        remote_parent: trace.parent.is_some(),
        trace_state: trace.tracestate.as_deref().unwrap_or_default(),
        flags: trace.outgoing.flags,
        name: [method_or_unknown(method), f.route.unwrap_or_default().as_bytes()],
        kind: SpanKind::Server,
        start,
        end,
        attributes: &[],
        events: &events[..n_events],
        error: server_error,
    };
    ctx.telemetry.record_span(ctx, export, &server, |a| {
        a.text("http.request.method", Some(method));
        if let Some(head) = f.head {
            a.text("url.path", Some(url_path(head.target())));
            if let Some((host, port)) = head.host().map(split_host_port) {
                a.text("server.address", Some(host));
                if let Some(port) = port {
                    a.add("server.port", Value::Int(i64::from(port)));
                }
            }
            a.text("user_agent.original", head.field(b"user-agent"));
        }
        a.add("url.scheme", Value::Str(f.scheme.as_bytes()));
        a.add("network.protocol.version", Value::Str(protocol_version(f.protocol)));
        a.add("client.address", Value::Str(f.client_ip.as_bytes()));
        if rctx.status != 0 {
            a.add("http.response.status_code", Value::Int(i64::from(rctx.status)));
        }
        a.text("http.route", f.route.map(str::as_bytes));
        a.text("error.type", error.map(str::as_bytes));
        a.add("rampart.listener", Value::Str(f.listener.as_bytes()));
        if let Some(up) = f.upstream {
            a.add("rampart.upstream", Value::Str(up.name.as_bytes()));
            if rctx.attempts.made() > 1 {
                a.add("rampart.attempts", Value::Int(i64::from(rctx.attempts.made())));
            }
        }
        a.text("rampart.cache", rctx.cache.map(|c| c.as_str().as_bytes()));
        a.text("enduser.id", f.user.map(str::as_bytes));
        a.text("rampart.request_id", f.request_id.map(str::as_bytes));
        if let Some(tls) = &f.tls {
            for (key, value) in tls_attributes(tls) {
                a.add(key, value);
            }
        }
    });

    let Some(up) = f.upstream else { return };
    let attempts = rctx.attempts.iter().count();
    for (index, attempt) in rctx.attempts.iter().enumerate() {
        let last = index + 1 == attempts;
        let span_start = attempt.began_us.map_or(start, at_us);
        let span_end = match (attempt.ended_us, attempt.response_head) {
            (Some(us), _) => at_us(us),
            (None, _) if last => end,
            (None, Some(head)) => span_start + (attempt.connect.unwrap_or_default() + head).as_nanos() as u64,
            (None, None) => end,
        };
        let target = up.targets.get(attempt.target);
        let failure = attempt.error().map(HttpError::reason);
        let client = SpanData {
            trace_id: trace.outgoing.trace_id,
            span_id: trace.attempt_span(index),
            parent: Some(trace.outgoing.parent_id),
            remote_parent: false,
            trace_state: trace.tracestate.as_deref().unwrap_or_default(),
            flags: trace.outgoing.flags,
            name: [method_or_unknown(method), up.name.as_bytes()],
            kind: SpanKind::Client,
            start: span_start,
            end: span_end.max(span_start),
            attributes: &[],
            events: &[],
            error: client_error(attempt).map(str::as_bytes),
        };
        ctx.telemetry.record_span(ctx, export, &client, |c| {
            c.add("http.request.method", Value::Str(method_or_unknown(method)));
            if let Some(target) = target {
                c.add("server.address", Value::Str(target_host(target)));
                c.add("server.port", Value::Int(i64::from(target.addr.port())));
            }
            c.add("rampart.connection.reused", Value::Bool(attempt.reused));
            if let Some(connect) = attempt.connect {
                c.add("rampart.connect_time_us", Value::Int(connect.as_micros() as i64));
            }
            if let Some(head) = attempt.response_head {
                c.add("rampart.time_to_first_byte_us", Value::Int(head.as_micros() as i64));
            }
            if let Some(status) = attempt.status() {
                c.add("http.response.status_code", Value::Int(i64::from(status)));
            }
            if index > 0 {
                c.add("http.request.resend_count", Value::Int(index as i64));
            }
            c.text("error.type", failure.map(str::as_bytes));
            c.text("rampart.retry_reason", attempt.retried_for.map(str::as_bytes));
        });
    }
}

/// An attempt's error status: it failed, or got a 5xx.
fn client_error(attempt: &Attempt) -> Option<&'static str> {
    match (attempt.error(), attempt.status()) {
        (Some(e), _) => Some(e.reason()),
        (None, Some(s)) if s >= 500 => Some("5xx"),
        _ => None,
    }
}

fn method_or_unknown(method: &[u8]) -> &[u8] {
    if method.is_empty() {
        b"HTTP"
    } else {
        method
    }
}

/// `network.protocol.version`: `1.0`, `1.1`, `2`, `3`.
fn protocol_version(p: Protocol) -> &'static [u8] {
    match p {
        Protocol::Http10 => b"1.0",
        Protocol::Http11 => b"1.1",
        Protocol::Http2 => b"2",
        Protocol::Http3 => b"3",
    }
}

/// The path of a request target: without its query, and without the scheme and authority of an
/// absolute-form one.
fn url_path(target: &[u8]) -> &[u8] {
    let rest = [&b"http://"[..], b"https://"]
        .iter()
        .find_map(|scheme| {
            let tail = target.get(scheme.len()..)?;
            target[..scheme.len()].eq_ignore_ascii_case(scheme).then_some(tail)
        })
        .map_or(target, |tail| {
            let from = tail.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(tail.len());
            &tail[from..]
        });
    let path = rest.split(|&b| b == b'?').next().unwrap_or(rest);
    if path.is_empty() {
        b"/"
    } else {
        path
    }
}

/// The host of a target's `host:port` (without brackets), its port being its address's.
fn target_host(target: &Target) -> &[u8] {
    let name = target.name.as_bytes();
    let digits = match target.addr.port() {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        1000..=9999 => 4,
        _ => 5,
    };
    match name.len().checked_sub(digits + 1) {
        Some(colon) if name[colon] == b':' => unbracketed(&name[..colon]),
        _ => split_host_port(name).0,
    }
}

/// A host without the brackets of an IPv6 address.
fn unbracketed(host: &[u8]) -> &[u8] {
    match (host.first(), host.last()) {
        (Some(b'['), Some(b']')) if host.len() >= 2 => &host[1..host.len() - 1],
        _ => host,
    }
}

/// `host:port` (or `[v6]:port`) taken apart: the host (without brackets) and the port, if any.
pub(crate) fn split_host_port(text: &[u8]) -> (&[u8], Option<u16>) {
    // The digits after the last colon, read from the end.
    let (mut port, mut digits) = (0u32, 0);
    for &b in text.iter().rev() {
        if !b.is_ascii_digit() || digits == 5 {
            break;
        }
        port += u32::from(b - b'0') * 10u32.pow(digits);
        digits += 1;
    }
    let colon = text.len() - digits as usize;
    if digits > 0 && colon > 0 && text[colon - 1] == b':' && port <= u32::from(u16::MAX) {
        let host = &text[..colon - 1];
        // A bare IPv6 address has colons and no port.
        if host.first() == Some(&b'[') || !host.contains(&b':') {
            return (unbracketed(host), Some(port as u16));
        }
    }
    (unbracketed(text), None)
}

/// What a client connection's TLS handshake agreed, as the attributes of a server span (HTTP's
/// and a TCP session's alike): those it has of `tls.protocol.name`, `tls.protocol.version`,
/// `tls.cipher`, `tls.client.server_name` and `tls.next_protocol`.
pub(crate) fn tls_attributes<'a>(tls: &TlsInfo<'a>) -> impl Iterator<Item = Attribute<'a>> {
    let version = tls.version.map(|v| {
        [
            ("tls.protocol.name", &b"tls"[..]),
            ("tls.protocol.version", tls_version(v)),
        ]
    });
    version
        .into_iter()
        .flatten()
        .chain([
            ("tls.cipher", tls.cipher.map(str::as_bytes).unwrap_or_default()),
            ("tls.client.server_name", tls.sni.map(str::as_bytes).unwrap_or_default()),
            ("tls.next_protocol", tls.alpn.unwrap_or_default()),
        ])
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, Value::Str(v)))
}

/// `tls.protocol.version`: `1.3` of `TLSv1.3`.
fn tls_version(version: &str) -> &[u8] {
    version.strip_prefix("TLSv").unwrap_or(version).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_addresses_are_taken_apart_as_the_conventions_want() {
        assert_eq!(url_path(b"/a/b?x=1"), b"/a/b");
        assert_eq!(url_path(b"http://h.example:8080/p?q"), b"/p");
        assert_eq!(url_path(b"HTTPS://h.example"), b"/");
        assert_eq!(url_path(b"*"), b"*");
        assert_eq!(split_host_port(b"gw.test"), (&b"gw.test"[..], None));
        assert_eq!(split_host_port(b"gw.test:8080"), (&b"gw.test"[..], Some(8080)));
        assert_eq!(split_host_port(b"[::1]:443"), (&b"::1"[..], Some(443)));
        assert_eq!(split_host_port(b"[::1]"), (&b"::1"[..], None));
        assert_eq!(split_host_port(b"::1"), (&b"::1"[..], None));
        assert_eq!(split_host_port(b"10.0.0.1:x"), (&b"10.0.0.1:x"[..], None));
        assert_eq!(split_host_port(b"h:70000"), (&b"h:70000"[..], None));
        assert_eq!(split_host_port(b"h:"), (&b"h:"[..], None));
        assert_eq!(split_host_port(b"h:123456"), (&b"h:123456"[..], None));
        assert_eq!(split_host_port(b"h:65535"), (&b"h"[..], Some(65535)));
        assert_eq!(split_host_port(b"h:0443"), (&b"h"[..], Some(443)));
        assert_eq!(split_host_port(b"8080"), (&b"8080"[..], None));
        assert_eq!(split_host_port(b"[::1]:"), (&b"[::1]:"[..], None));
        assert_eq!(split_host_port(b"fe80::1:80"), (&b"fe80::1:80"[..], None));
        assert_eq!(tls_version("TLSv1.3"), b"1.3");
    }
}
