//! W3C Trace Context through Rampart (`[tracing]`, issue 41's first part): what the upstream
//! receives for a client's `traceparent` and `tracestate` (valid, invalid, absent), over HTTP/1.1
//! and HTTP/2, and the trace id in the access log; without `[tracing]` the fields pass as they
//! came.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use crate::common::http::{HttpBackend, Reply};
use crate::common::{free_port, json_log_lines, write_file, Bounded, Rampart, TOOL_WAIT};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An HTTP listener to `backend`, with `tracing` as its `[tracing]` table (none when empty) and a
/// JSON access log at `dir/access.log`.
fn gateway(dir: &std::path::Path, backend: &HttpBackend, tracing: &str) -> (Rampart, u16) {
    let port = free_port();
    let log = dir.join("access.log");
    let text = format!(
        "{tracing}\n[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{}\", format = \"json\" }}\n\n[upstreams.app]\ntargets = [\"{}\"]\n",
        log.display(),
        backend.target()
    );
    let path = write_file(dir, "tracing.toml", &text);
    (Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]), port)
}

/// One HTTP/1.1 request with `fields`; the head the backend received, its fields lowercased.
fn through(port: u16, backend: &HttpBackend, fields: &[(&str, &str)]) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = String::from("GET /t HTTP/1.1\r\nHost: a\r\nConnection: close\r\n");
    for (n, v) in fields {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    backend.next_head().to_ascii_lowercase()
}

/// The values of field `name` in a received head.
fn values<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
        .map(str::trim)
        .collect()
}

#[test]
fn a_trace_is_continued_started_or_restarted_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &backend, "[tracing]\nsampling = 0");

    // Continued: the caller's trace and decision, a span of Rampart's as the parent, tracestate
    // kept.
    let head = through(
        port,
        &backend,
        &[
            ("traceparent", CALLER),
            ("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        ],
    );
    let sent = values(&head, "traceparent");
    assert_eq!(sent.len(), 1, "{head}");
    assert!(sent[0].starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"), "{head}");
    assert!(sent[0].ends_with("-01"), "the caller's sampling decision: {head}");
    let continued_span = sent[0][36..52].to_string();
    assert_ne!(continued_span, "00f067aa0ba902b7");
    assert_eq!(values(&head, "tracestate"), ["rojo=00f067aa0ba902b7,congo=t61rcwkgmze"]);

    // Started: no traceparent; sampling = 0 marks it unsampled.
    let head = through(port, &backend, &[]);
    let started = values(&head, "traceparent")[0].to_string();
    assert!(
        started.starts_with("00-") && started.ends_with("-00") && started.len() == 55,
        "{head}"
    );

    // Restarted: an invalid traceparent is replaced by a new trace, and its tracestate dropped.
    let bad = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let head = through(port, &backend, &[("traceparent", bad), ("tracestate", "foo=1")]);
    let restarted = values(&head, "traceparent");
    assert_eq!(restarted.len(), 1);
    assert!(!restarted[0].contains("00000000000000000000000000000000"), "{head}");
    assert!(values(&head, "tracestate").is_empty(), "{head}");

    // The access log joins them: the trace ids, and Rampart's server span (the upstream's
    // parent is the attempt's client span under it: the export tests check the link).
    let lines = json_log_lines(&dir.path().join("access.log"), 3);
    assert_eq!(lines[0]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let server_span = lines[0]["span_id"].as_str().unwrap();
    assert_eq!(server_span.len(), 16);
    assert!(server_span.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(server_span, continued_span.as_str());
    assert_ne!(server_span, "00f067aa0ba902b7");
    assert_eq!(lines[1]["trace_id"], &started[3..35]);
    assert_eq!(lines[2]["trace_id"], &restarted[0][3..35]);
}

#[test]
fn an_http2_request_is_traced_as_an_http1_one() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &backend, "[tracing]");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge", "-o", "/dev/null"])
        .args(["-H", &format!("traceparent: {CALLER}")])
        .arg(format!("http://127.0.0.1:{port}/h2"))
        .output_within(TOOL_WAIT)
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let head = backend.next_head().to_ascii_lowercase();
    let sent = values(&head, "traceparent");
    assert_eq!(sent.len(), 1, "{head}");
    assert!(
        sent[0].starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && sent[0].ends_with("-01"),
        "{head}"
    );
}

#[test]
fn without_tracing_the_fields_pass_as_they_came() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &backend, "");
    let head = through(port, &backend, &[("traceparent", CALLER), ("tracestate", "foo=1")]);
    assert_eq!(values(&head, "traceparent"), [CALLER]);
    assert_eq!(values(&head, "tracestate"), ["foo=1"]);
    let line = &json_log_lines(&dir.path().join("access.log"), 1)[0];
    assert!(line.get("trace_id").is_none(), "{line}");
}
