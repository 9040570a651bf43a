//! Bad input and dead upstreams over HTTP: every malformed request gets its status, a closed
//! connection, and never reaches the backend; 502, 503 and 504; retries; HTTP health checks.

use crate::common;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::http::{is_closed, send, HttpBackend, Reply};
use common::*;

/// At least 40 malformed or smuggling-shaped requests, each with its status.
fn malformed_requests() -> Vec<(Vec<u8>, u16)> {
    let mut cases: Vec<(Vec<u8>, u16)> = [
        (
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\nabcd", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3 3\r\n\r\nabc", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\tfolded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 400),
        (b"GET / HTTP/1.1\nHost: a\n\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", 400),
        (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET a HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET ftp://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: evil.example/x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a\x01b\r\nhello\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n\r\n",
            400,
        ),
    ]
    .iter()
    .map(|(r, s)| (r.to_vec(), *s))
    .collect();
    cases.push((
        format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000)).into_bytes(),
        414,
    ));
    cases.push((
        format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "b".repeat(70_000)).into_bytes(),
        431,
    ));
    cases.push((
        format!("GET / HTTP/1.1\r\nHost: a\r\n{}\r\n", "X-A: 1\r\n".repeat(101)).into_bytes(),
        431,
    ));
    cases.push((format!("GET /{}", "a".repeat(9000)).into_bytes(), 414));
    cases
}

#[test]
fn malformed_requests_get_their_status_are_closed_and_never_reach_the_backend() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[backend.target()], "");
    let cases = malformed_requests();
    assert!(cases.len() >= 40);
    for (raw, want) in &cases {
        let mut client = connect(port);
        let (status, head, _) = send(&mut client, raw);
        let shown = String::from_utf8_lossy(&raw[..raw.len().min(90)]).to_string();
        assert_eq!(status, *want, "for {shown:?}: {head}");
        assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
        assert!(is_closed(&mut client), "connection left open after {shown:?}");
    }
    assert_eq!(
        backend.connections.load(Ordering::SeqCst),
        0,
        "a malformed request reached the backend"
    );
    // The same proxy still serves a good request.
    let mut client = connect(port);
    assert_eq!(send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").0, 200);
    assert_eq!(backend.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn a_bad_chunked_body_ends_with_400_and_a_clean_close() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[backend.target()], "");
    let mut client = connect(port);
    let (status, _, _) = send(
        &mut client,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    );
    assert_eq!(status, 400);
    assert!(is_closed(&mut client));
}

#[test]
fn unanswered_and_garbled_upstream_responses_are_502() {
    for reply in [
        Reply::Close,
        Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        Reply::Raw(b"NOT HTTP AT ALL\r\n\r\n"),
    ] {
        let backend = HttpBackend::start(reply);
        let dir = tempfile::tempdir().unwrap();
        let (_proxy, port) = http_gateway(dir.path(), &[backend.target()], "retries = 0");
        let mut client = connect(port);
        let (status, head, body) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status, 502, "{head}");
        assert_eq!(body, b"502 Bad Gateway\n");
        assert_an_http_date(&head);
        // The request was read in full: the connection takes the next one (nginx keeps it too).
        assert!(!head.to_ascii_lowercase().contains("connection: close"), "{head}");
        let (status, _, _) = send(&mut client, b"GET /again HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status, 502);
        // With a body, the connection closes after the answer.
        let (status, head, _) = send(
            &mut client,
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab",
        );
        assert_eq!(status, 502);
        assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
        assert!(is_closed(&mut client));
    }
}

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT`, within a minute of now.
fn assert_an_http_date(head: &str) {
    let date = common::http::header(head, "date").unwrap_or_else(|| panic!("no Date in {head}"));
    let re = regex::Regex::new(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$").unwrap();
    assert!(re.is_match(date), "{date}");
}

#[test]
fn a_slow_upstream_is_504() {
    let backend = HttpBackend::start(Reply::Slow(Duration::from_secs(3)));
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[backend.target()], "response_header_timeout = \"300ms\"");
    let mut client = connect(port);
    let start = Instant::now();
    let (status, _, body) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 504);
    assert_eq!(body, b"504 Gateway Timeout\n");
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn no_healthy_target_is_503_and_a_dead_target_is_skipped() {
    let dead = || dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[dead(), dead()], "passive_backoff = \"1m\"");
    let mut client = connect(port);
    assert_eq!(
        send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").0,
        502,
        "first: every connect fails"
    );
    let mut client = connect(port);
    let (status, head, body) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 503, "then: every target is in backoff");
    assert_eq!(body, b"503 Service Unavailable\n");
    assert_an_http_date(&head);
    // Kept alive: a second request on the same connection gets its own answer.
    let (status, _, _) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 503);
    // Unless the client asked to close.
    let (status, head, _) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 503);
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    assert!(is_closed(&mut client));

    let live = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[dead(), live.target(), dead()], "");
    for _ in 0..10 {
        let mut client = connect(port);
        assert_eq!(send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").0, 200);
    }
}

#[test]
fn an_idempotent_request_reset_before_any_response_byte_is_retried_elsewhere() {
    let closer = HttpBackend::start(Reply::Close);
    let good = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    // The closing target is not passed over after it failed, so that the POSTs below meet it.
    let extra = "retries = 1\nretry_pass_over = \"0s\"";
    let (_proxy, port) = http_gateway(dir.path(), &[closer.target(), good.target()], extra);
    for i in 0..6 {
        let mut client = connect(port);
        let (status, _, body) = send(&mut client, format!("GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(status, 200, "GET {i}");
        assert!(String::from_utf8_lossy(&body).starts_with(&format!("GET /r{i} ")));
    }
    // A POST with a body is never retried: it gets 502 when it meets the closing target.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let mut client = connect(port);
        statuses.push(
            send(
                &mut client,
                b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
            )
            .0,
        );
    }
    assert!(statuses.contains(&502) && statuses.contains(&200), "{statuses:?}");
}

#[test]
fn http_health_checks_take_targets_down_and_bring_them_back() {
    // The backend answers 500 to everything: its HTTP check fails while a TCP check would pass.
    let sick = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
    ));
    let well = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let checks = "[upstreams.app.health_check]\ninterval = \"50ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1\nhttp_path = \"/healthz\"\nexpect_status = \"200-299\"\n";
    let (mut proxy, port) = http_gateway(dir.path(), &[sick.target(), well.target()], checks);
    let line = proxy.wait_for("is down");
    assert!(
        line.contains(&sick.target()) && line.contains("status 500 outside 200-299"),
        "{line}"
    );
    for _ in 0..6 {
        let mut client = connect(port);
        let (status, _, _) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status, 200);
    }
    // The checks reached the backend over HTTP (their order among the proxied requests is the
    // scheduler's).
    let heads: Vec<String> = (0..7).map(|_| well.next_head()).collect();
    assert!(
        heads.iter().any(|h| h.starts_with("GET /healthz HTTP/1.1")),
        "{heads:?}"
    );
    let _ = std::io::stdout().flush();
}

#[test]
fn a_reload_restarts_the_health_checks_with_their_new_settings() {
    let well = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let checks = |path: &str| {
        format!(
            "[upstreams.app.health_check]\ninterval = \"50ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1\nhttp_path = \"{path}\"\n"
        )
    };
    let (mut proxy, _port) = http_gateway(dir.path(), &[well.target()], &checks("/before"));
    let first = well.next_head();
    assert!(first.starts_with("GET /before HTTP/1.1"), "{first}");
    // The same config with another check path: the checks run again with it.
    let path = dir.path().join("gw.toml");
    let text = std::fs::read_to_string(&path).unwrap().replace("/before", "/after");
    std::fs::write(&path, text).unwrap();
    let outcome = proxy.reload();
    assert!(outcome.contains("reloaded"), "{outcome}");
    // Checks already under way may still use the old path; the next ones use the new.
    let mut seen = Vec::new();
    loop {
        let head = well.next_head();
        if head.starts_with("GET /after HTTP/1.1") {
            break;
        }
        assert!(seen.len() < 40, "no check with the new path after the reload: {seen:?}");
        seen.push(head);
    }
}

#[test]
fn an_outage_is_logged_once_then_summarised_not_once_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dead_target();
    let (mut proxy, port) = http_gateway(dir.path(), &[dead], "");
    // Answers of the upstream side keep a bodyless request's connection open: all on one.
    let mut client = connect(port);
    for _ in 0..30 {
        let (status, _, _) = send(&mut client, &common::http::get("/"));
        assert!(status == 502 || status == 503, "{status}");
    }
    proxy.signal(libc::SIGTERM);
    let summary = proxy.wait_for("upstream app: no healthy target:");
    assert!(
        summary.contains("more times in the last") || summary.contains("once more in the last"),
        "{summary}"
    );
    let warnings = proxy.log.iter().filter(|l| l.contains(" WARN ")).count();
    assert!(
        warnings <= 4,
        "30 failing requests, {warnings} warnings:\n{}",
        proxy.log.join("\n")
    );
}
