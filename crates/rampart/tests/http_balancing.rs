//! HTTP-only balancing and limits through real sockets: consistent hashing on a header or a
//! cookie, P2C on latency (EWMA), and the whole-request timeout.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::http::{is_closed, send, HttpBackend, Reply};
use common::*;

/// Backends that answer with their own letter as the body.
fn lettered() -> Vec<HttpBackend> {
    [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nA"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nB",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nC",
    ]
    .into_iter()
    .map(|r| HttpBackend::start(Reply::Raw(r)))
    .collect()
}

fn gateway(dir: &std::path::Path, backends: &[&HttpBackend], upstream_extra: &str) -> (Rampart, u16) {
    let targets: Vec<String> = backends.iter().map(|b| b.target()).collect();
    http_gateway(dir, &targets, upstream_extra)
}

/// Sends three requests per user, each on a new connection, with `header(user)` added, and
/// returns which backend letters each user got.
fn letters_per_user(port: u16, header: impl Fn(usize) -> String) -> HashMap<usize, HashSet<Vec<u8>>> {
    let mut seen: HashMap<usize, HashSet<Vec<u8>>> = HashMap::new();
    for round in 0..3 {
        for user in 0..30 {
            let mut client = connect(port);
            let req = format!("GET /r{round} HTTP/1.1\r\nHost: app\r\n{}\r\n\r\n", header(user));
            let (status, _, body) = send(&mut client, req.as_bytes());
            assert_eq!(status, 200);
            seen.entry(user).or_default().insert(body);
        }
    }
    seen
}

fn assert_sticky_and_spread(seen: &HashMap<usize, HashSet<Vec<u8>>>) {
    assert!(
        seen.values().all(|letters| letters.len() == 1),
        "a user moved: {seen:?}"
    );
    let used: HashSet<&Vec<u8>> = seen.values().flatten().collect();
    assert_eq!(used.len(), 3, "30 users should reach all 3 targets: {seen:?}");
}

#[test]
fn hashing_on_a_header_keeps_each_user_on_one_target() {
    let backends = lettered();
    let dir = tempfile::tempdir().unwrap();
    let refs: Vec<&HttpBackend> = backends.iter().collect();
    let (_proxy, port) = gateway(
        dir.path(),
        &refs,
        "balance = \"consistent_hash\"\nhash_key = \"header:X-User\"",
    );
    // All requests come from 127.0.0.1: only the header can tell users apart.
    assert_sticky_and_spread(&letters_per_user(port, |u| format!("x-user: user-{u}")));
}

#[test]
fn hashing_on_a_cookie_keeps_each_session_on_one_target() {
    let backends = lettered();
    let dir = tempfile::tempdir().unwrap();
    let refs: Vec<&HttpBackend> = backends.iter().collect();
    let (_proxy, port) = gateway(
        dir.path(),
        &refs,
        "balance = \"consistent_hash\"\nhash_key = \"cookie:session\"",
    );
    let seen = letters_per_user(port, |u| format!("Cookie: theme=dark; session=s{u}; lang=en"));
    assert_sticky_and_spread(&seen);
}

#[test]
fn p2c_ewma_sends_requests_to_the_faster_target() {
    let fast = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nfast"));
    let slow = HttpBackend::start(Reply::Slow(Duration::from_millis(40)));
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = gateway(dir.path(), &[&fast, &slow], "balance = \"p2c_ewma\"");
    let mut client = connect(port);
    let mut fast_answers = 0;
    for i in 0..60 {
        let (status, _, body) = send(&mut client, format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(status, 200);
        fast_answers += usize::from(body == b"fast");
    }
    // Both are tried while unmeasured; after that the slow one loses every comparison.
    assert!(fast_answers >= 55, "only {fast_answers} of 60 went to the fast target");
}

#[test]
fn request_timeout_is_504_before_the_response_and_a_close_after_it() {
    let slow = HttpBackend::start(Reply::Slow(Duration::from_secs(5)));
    let dir = tempfile::tempdir().unwrap();
    // The response header timeout alone (60 s) would wait far longer.
    let (_proxy, port) = gateway(dir.path(), &[&slow], "request_timeout = \"300ms\"");
    let mut client = connect(port);
    let start = Instant::now();
    let (status, _, body) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 504);
    assert_eq!(body, b"504 Gateway Timeout\n");
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());

    // A head promising 100 bytes, then silence: the head reaches the client, then the
    // connection closes when the request's time is up (the read timeout is 60 s).
    let stalled = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"));
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = gateway(dir.path(), &[&stalled], "request_timeout = \"300ms\"");
    let mut client = connect(port);
    use std::io::{Read, Write};
    client.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"partial") {
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the head: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK"));
    assert!(
        is_closed(&mut client),
        "the connection should close at the request timeout"
    );
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
}

#[test]
fn request_timeout_adds_nothing_to_an_answer_of_the_proxy_itself() {
    // A dead target: the exchange ends at once with Rampart's own 502, well inside the timeout.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = dead.local_addr().unwrap().to_string();
    drop(dead);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_gateway(dir.path(), &[target], "request_timeout = \"5s\"\nconnect_attempts = 1");
    let mut client = connect(port);
    let (status, _, body) = send(&mut client, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 502);
    assert_eq!(body, b"502 Bad Gateway\n");
    client.set_read_timeout(Some(WAIT)).unwrap();
    // Nothing follows the 502: no second answer, just the close.
    assert!(is_closed(&mut client));
}
