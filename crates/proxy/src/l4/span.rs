//! The span of a TCP (L4) session under `[tracing]` with a collector: a server span of its own
//! trace (a byte stream carries no trace context), sampled at the configured ratio or kept by a
//! tail decision (a session that did not complete, or lasted longer than `slower_than`), with
//! its target, bytes each way, time to connect and to the first byte, TLS facts and how it ended.

use std::io::Write;
use std::time::{Instant, SystemTime};

use crate::http::trace::RequestTrace;
use crate::relay::{RelayEnd, RelayOutcome, Side};
use crate::telemetry::otlp::{SpanData, SpanKind, Value};
use crate::telemetry::unix_nanos;
use crate::worker::WorkerContext;

use super::{Refusal, Session};

/// Writes the session's span when it is to be exported.
pub(super) fn record(ctx: &WorkerContext, s: &Session<'_>, result: &Result<RelayOutcome, Refusal>) {
    let Some(settings) = s.snapshot.tracing.as_deref() else {
        return;
    };
    let Some(export) = settings.export.as_ref().filter(|_| s.listener.traced) else {
        return;
    };
    let trace = RequestTrace::continuing(None, None, settings, || ctx.http.filters.random());
    let took = s.accepted.elapsed();
    // Refused (no target, a failed connect, ...), or cut on the upstream's side.
    let failed = match result {
        Err(_) => true,
        Ok(o) => matches!(o.end, RelayEnd::Error(Side::Upstream, _)),
    };
    let keep = trace.outgoing.sampled()
        || (settings.errors && failed)
        || settings.slower_than.is_some_and(|limit| took > limit);
    if !keep {
        return;
    }
    let end = unix_nanos(SystemTime::now());
    let start = end.saturating_sub(took.as_nanos() as u64);
    let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(s.accepted).as_micros() as i64);
    let upstream = s.choice.upstream.and_then(|u| s.snapshot.upstreams.get(u));
    let target = upstream
        .zip(s.target)
        .and_then(|(u, t)| u.targets.get(t))
        .map(|t| t.name.as_str());
    let (close, bytes_up, bytes_down, first_up, first_down) = match result {
        Ok(o) => (
            o.end.as_str(),
            o.bytes_up,
            o.bytes_down,
            o.first_byte_up,
            o.first_byte_down,
        ),
        Err(r) => (r.as_str(), 0, 0, None, None),
    };
    let mut ip = [0u8; 48];
    let ip_len = {
        let mut w = &mut ip[..];
        let _ = write!(w, "{}", s.client.ip());
        48 - w.len()
    };
    let tls = s.tls.as_ref().map(|t| t.view());
    let mut attrs = Vec::with_capacity(16);
    attrs.push(("network.transport", Value::Str(b"tcp")));
    attrs.push(("client.address", Value::Str(&ip[..ip_len])));
    attrs.push(("client.port", Value::Int(i64::from(s.client.port()))));
    attrs.push(("rampart.listener", Value::Str(s.listener.name.as_bytes())));
    if let Some(up) = upstream {
        attrs.push(("rampart.upstream", Value::Str(up.name.as_bytes())));
    }
    let route = s.choice.route.zip(s.listener.tcp_routing());
    if let Some(route) = route.and_then(|(r, routing)| routing.routes.get(r)) {
        attrs.push(("rampart.route", Value::Str(route.name.as_bytes())));
    }
    if let Some(target) = target {
        let (address, port) = crate::http::trace::span::split_host_port(target.as_bytes());
        attrs.push(("server.address", Value::Str(address)));
        if let Some(port) = port {
            attrs.push(("server.port", Value::Int(i64::from(port))));
        }
    }
    attrs.push(("rampart.bytes_up", Value::Int(bytes_up as i64)));
    attrs.push(("rampart.bytes_down", Value::Int(bytes_down as i64)));
    for (key, at) in [
        ("rampart.connect_time_us", since(s.connected)),
        ("rampart.first_byte_up_us", since(first_up)),
        ("rampart.first_byte_down_us", since(first_down)),
    ] {
        if let Some(us) = at {
            attrs.push((key, Value::Int(us)));
        }
    }
    attrs.push(("rampart.close", Value::Str(close.as_bytes())));
    if let Some(tls) = &tls {
        attrs.extend(crate::http::trace::span::tls_attributes(tls));
    }
    let span = SpanData {
        trace_id: trace.outgoing.trace_id,
        span_id: trace.outgoing.parent_id,
        parent: None,
        remote_parent: false,
        trace_state: b"",
        flags: trace.outgoing.flags,
        name: [b"TCP", s.listener.name.as_bytes()],
        kind: SpanKind::Server,
        start,
        end,
        attributes: &attrs,
        events: &[],
        error: failed.then_some(close.as_bytes()),
    };
    ctx.telemetry.record_span(ctx, export, &span, |_| {});
}
