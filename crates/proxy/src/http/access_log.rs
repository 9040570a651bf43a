//! Access log lines: JSON, or the combined log format extended with Rampart's fields.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use rampart_proto::message::RequestHead;

use super::attempts::{Attempt, AttemptEnd, AttemptLog};
use crate::session_log::{write_json_str, write_timestamp, write_tls_json};
use crate::tls::TlsInfo;
use rampart_model::{AccessLogFormat, Upstream};

/// The facts of one request, borrowed from the session.
pub struct AccessRecord<'a> {
    pub time: SystemTime,
    pub client: SocketAddr,
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub version: &'a str,
    pub host: &'a [u8],
    pub referer: &'a [u8],
    pub user_agent: &'a [u8],
    pub status: u16,
    /// Every response byte sent ([`crate::http::downstream::Downstream::bytes_sent`]).
    pub bytes: u64,
    /// The response body's bytes (nginx's `$body_bytes_sent`).
    pub body_bytes: u64,
    pub route: &'a str,
    pub upstream_target: Option<&'a str>,
    pub upstream_time: Option<Duration>,
    /// What each attempt at the upstream did, and the upstream (to name their targets).
    pub attempts: &'a AttemptLog,
    pub upstream: Option<&'a Upstream>,
    pub total_time: Duration,
    pub error: Option<&'a str>,
    /// What the client connection's TLS handshake negotiated, on a TLS listener.
    pub tls: Option<TlsInfo<'a>>,
    /// The request's id (`request_id` filter).
    pub request_id: Option<&'a str>,
    /// Who an auth filter authenticated the request as.
    pub user: Option<&'a str>,
    /// What a route's cache did (`hit`, `stale`, `revalidated`, `miss`).
    pub cache: Option<&'a str>,
    /// The request's trace context, with `[tracing]` on.
    pub trace: Option<&'a super::trace::RequestTrace>,
}

/// Appends one line in `format`.
pub fn write_line(out: &mut Vec<u8>, format: AccessLogFormat, r: &AccessRecord<'_>) {
    match format {
        AccessLogFormat::Json => write_json(out, r),
        AccessLogFormat::Combined => write_combined(out, r),
    }
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

fn write_json(out: &mut Vec<u8>, r: &AccessRecord<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    write_timestamp(out, r.time);
    out.extend_from_slice(b"\",\"client\":");
    write_json_str(out, &r.client.to_string());
    out.extend_from_slice(b",\"method\":");
    write_json_str(out, &lossy(r.method));
    out.extend_from_slice(b",\"path\":");
    write_json_str(out, &lossy(r.target));
    out.extend_from_slice(b",\"host\":");
    write_json_str(out, &lossy(r.host));
    out.extend_from_slice(b",\"protocol\":");
    write_json_str(out, r.version);
    let _ = write!(
        out,
        ",\"status\":{},\"bytes\":{},\"body_bytes\":{},\"route\":",
        r.status, r.bytes, r.body_bytes
    );
    write_json_str(out, r.route);
    out.extend_from_slice(b",\"upstream_target\":");
    match r.upstream_target {
        Some(t) => write_json_str(out, t),
        None => out.extend_from_slice(b"null"),
    }
    match r.upstream_time {
        Some(t) => {
            let _ = write!(out, ",\"upstream_time_ms\":{:.3}", t.as_secs_f64() * 1000.0);
        }
        None => out.extend_from_slice(b",\"upstream_time_ms\":null"),
    }
    if r.attempts.made() > 1 {
        let _ = write!(out, ",\"attempts\":{}", r.attempts.made());
    }
    if let Some(why) = r.attempts.retry_reason() {
        out.extend_from_slice(b",\"retry_reason\":");
        write_json_str(out, why);
    }
    write_attempts_json(out, r);
    let _ = write!(
        out,
        ",\"total_time_ms\":{:.3},\"error\":",
        r.total_time.as_secs_f64() * 1000.0
    );
    match r.error {
        Some(e) => write_json_str(out, e),
        None => out.extend_from_slice(b"null"),
    }
    write_tls_json(out, r.tls.as_ref());
    if let Some(id) = r.request_id {
        out.extend_from_slice(b",\"request_id\":");
        write_json_str(out, id);
    }
    if let Some(user) = r.user {
        out.extend_from_slice(b",\"user\":");
        write_json_str(out, user);
    }
    if let Some(cache) = r.cache {
        out.extend_from_slice(b",\"cache\":");
        write_json_str(out, cache);
    }
    if let Some(trace) = r.trace {
        out.extend_from_slice(b",\"trace_id\":\"");
        out.extend_from_slice(&trace.trace_id_hex());
        out.extend_from_slice(b"\",\"span_id\":\"");
        out.extend_from_slice(&trace.span_id_hex());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"user_agent\":");
    write_json_str(out, &lossy(r.user_agent));
    out.extend_from_slice(b"}\n");
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `client - user [22/Nov/2026:06:10:00 +0000] "GET / HTTP/1.1" 200 123 "referer" "agent" route
/// target upstream_ms total_ms error` (`-` for anything missing; `user` is who an auth filter
/// authenticated), on TLS connections ` tls=TLSv1.3/TLS13_AES_128_GCM_SHA256 sni=name
/// alpn=http/1.1`, and with a request id ` request_id=ID`.
fn write_combined(out: &mut Vec<u8>, r: &AccessRecord<'_>) {
    let mut ts = Vec::with_capacity(32);
    write_timestamp(&mut ts, r.time);
    // ts = YYYY-MM-DDTHH:MM:SS.ffffffZ
    let t = String::from_utf8_lossy(&ts);
    let month = t[5..7].parse::<usize>().unwrap_or(1).clamp(1, 12);
    let _ = write!(
        out,
        "{} - {} [{}/{}/{}:{} +0000] \"{} {} {}\" {} {} \"{}\" \"{}\" {} {} ",
        r.client.ip(),
        r.user.map_or("-".into(), |u| u.replace([' ', '"'], "_")),
        &t[8..10],
        MONTHS[month - 1],
        &t[0..4],
        &t[11..19],
        lossy(r.method),
        lossy(r.target).replace('"', "%22"),
        r.version,
        r.status,
        r.body_bytes,
        dash(&lossy(r.referer)).replace('"', "%22"),
        dash(&lossy(r.user_agent)).replace('"', "%22"),
        dash(r.route),
        r.upstream_target.unwrap_or("-"),
    );
    match r.upstream_time {
        Some(u) => {
            let _ = write!(out, "{:.3} ", u.as_secs_f64() * 1000.0);
        }
        None => out.extend_from_slice(b"- "),
    }
    let _ = write!(
        out,
        "{:.3} {}",
        r.total_time.as_secs_f64() * 1000.0,
        r.error.unwrap_or("-")
    );
    if let Some(tls) = &r.tls {
        let _ = write!(
            out,
            " tls={}/{} sni={} alpn={}",
            tls.version.unwrap_or("-"),
            tls.cipher.unwrap_or("-"),
            tls.sni.map_or("-", |s| dash(s)),
            tls.alpn.map_or("-".into(), |a| lossy(a).replace(' ', "%20")),
        );
    }
    if let Some(id) = r.request_id {
        let _ = write!(out, " request_id={}", id.replace([' ', '"'], "_"));
    }
    if let Some(trace) = r.trace {
        out.extend_from_slice(b" trace_id=");
        out.extend_from_slice(&trace.trace_id_hex());
    }
    if r.attempts.made() > 1 {
        out.extend_from_slice(b" attempts=");
        for (i, a) in r.attempts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let _ = write!(
                out,
                "{}/{}/{}",
                target_name(r, a.target).replace([' ', ',', '/'], "_"),
                if a.reused { "reused" } else { "new" },
                AttemptOutcome(a)
            );
        }
    }
    out.push(b'\n');
}

/// The name of target `index` of the record's upstream (`-` when there is none).
fn target_name<'a>(r: &AccessRecord<'a>, index: usize) -> &'a str {
    r.upstream
        .and_then(|u| u.targets.get(index))
        .map_or("-", |t| t.name.as_str())
}

/// `"upstream_attempts":[...]`: every attempt kept, in order, when any was made.
fn write_attempts_json(out: &mut Vec<u8>, r: &AccessRecord<'_>) {
    if r.attempts.made() == 0 {
        return;
    }
    out.extend_from_slice(b",\"upstream_attempts\":[");
    for (i, a) in r.attempts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"target\":");
        write_json_str(out, target_name(r, a.target));
        out.extend_from_slice(if a.reused {
            b",\"connection\":\"reused\""
        } else {
            b",\"connection\":\"new\""
        });
        if let Some(t) = a.connect {
            let _ = write!(out, ",\"connect_ms\":{:.3}", t.as_secs_f64() * 1000.0);
        }
        if let Some(t) = a.response_head {
            let _ = write!(out, ",\"response_ms\":{:.3}", t.as_secs_f64() * 1000.0);
        }
        match a.end {
            AttemptEnd::Status(status) => {
                let _ = write!(out, ",\"status\":{status}");
            }
            AttemptEnd::Failed(error) => {
                out.extend_from_slice(b",\"error\":");
                write_json_str(out, error.reason());
            }
            AttemptEnd::Open => {}
        }
        if let Some(why) = a.retried_for {
            out.extend_from_slice(b",\"retried_for\":");
            write_json_str(out, why);
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// An attempt's end in the combined format: its status, its error, or `-`, then `+retry` when
/// another attempt followed.
struct AttemptOutcome<'a>(&'a Attempt);

impl std::fmt::Display for AttemptOutcome<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.end {
            AttemptEnd::Status(status) => write!(f, "{status}")?,
            AttemptEnd::Failed(error) => f.write_str(error.reason())?,
            AttemptEnd::Open => f.write_str("-")?,
        }
        if self.0.retried_for.is_some() {
            f.write_str("+retry")?;
        }
        Ok(())
    }
}

fn dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// `target` with the value of every query parameter called one of `secrets` (credentials such
/// as an API key read from the query) replaced by `REDACTED`; borrowed when nothing changes.
pub fn redact_query<'t>(target: &'t [u8], secrets: &[&str]) -> std::borrow::Cow<'t, [u8]> {
    let Some(q) = target.iter().position(|&b| b == b'?') else {
        return target.into();
    };
    let is_secret = |pair: &[u8]| {
        let key = pair.split(|&b| b == b'=').next().unwrap_or_default();
        secrets.iter().any(|s| s.as_bytes() == key)
    };
    let query = &target[q + 1..];
    if !query.split(|&b| b == b'&').any(is_secret) {
        return target.into();
    }
    let mut out = target[..=q].to_vec();
    for (i, pair) in query.split(|&b| b == b'&').enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        if is_secret(pair) {
            out.extend_from_slice(pair.split(|&b| b == b'=').next().unwrap_or_default());
            out.extend_from_slice(b"=REDACTED");
        } else {
            out.extend_from_slice(pair);
        }
    }
    out.into()
}

/// Copies what the access log needs of the request head: method, target, host, referer and
/// user agent, each behind its length.
pub fn capture_for_log(scratch: &mut Vec<u8>, head: &RequestHead) {
    let field = |name: &[u8]| head.field(name).unwrap_or_default();
    scratch.clear();
    for part in [
        head.method(),
        head.target(),
        head.host().unwrap_or_default(),
        field(b"referer"),
        field(b"user-agent"),
    ] {
        scratch.extend_from_slice(&(part.len() as u32).to_le_bytes());
        scratch.extend_from_slice(part);
    }
}

/// The five parts [`capture_for_log`] copied: method, target, host, referer, user agent.
pub fn captured(scratch: &[u8]) -> [&[u8]; 5] {
    let mut parts: [&[u8]; 5] = [b""; 5];
    let mut rest = scratch;
    for p in parts.iter_mut() {
        if rest.len() < 4 {
            break;
        }
        let n = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(part) = rest.get(4..4 + n) else { break };
        *p = part;
        rest = &rest[4 + n..];
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_query_parameters_are_blanked() {
        let redacted = |target: &str, secrets: &[&str]| {
            String::from_utf8(redact_query(target.as_bytes(), secrets).into_owned()).unwrap()
        };
        assert_eq!(redacted("/a?apikey=s3cret&b=1", &["apikey"]), "/a?apikey=REDACTED&b=1");
        assert_eq!(
            redacted("/a?b=1&apikey=x&apikey", &["apikey"]),
            "/a?b=1&apikey=REDACTED&apikey=REDACTED"
        );
        assert_eq!(redacted("/a?apikeys=1", &["apikey"]), "/a?apikeys=1");
        assert!(matches!(
            redact_query(b"/a?b=1", &["apikey"]),
            std::borrow::Cow::Borrowed(_)
        ));
        assert!(matches!(
            redact_query(b"/a?apikey=1", &[]),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(redacted("/apikey=1", &["apikey"]), "/apikey=1");
    }
}
