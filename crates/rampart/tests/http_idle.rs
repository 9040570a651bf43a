//! Idle keep-alive client connections: parked outside any task after a pause, woken by their
//! next request, closed when keep-alive ends or the proxy drains.

use crate::common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::{get, is_closed, send, HttpBackend, Reply};
use common::*;

/// An HTTP listener in front of `backend`, logging at debug level (parking is logged there).
fn proxy_with(dir: &std::path::Path, backend: &HttpBackend, listener_extra: &str) -> (Rampart, u16) {
    let port = free_port();
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n{listener_extra}\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let path = write_file(dir, "rampart.toml", &text);
    let proxy = Rampart::start_logging(dir, &["run", "-c", &path, "--workers", "1"], "debug");
    (proxy, port)
}

/// Sends one request and waits until the proxy has parked the connection.
fn request_then_park(proxy: &mut Rampart, port: u16) -> TcpStream {
    let mut client = connect(port);
    assert_eq!(send(&mut client, &get("/first")).0, 200);
    proxy.wait_for("parking idle connection");
    client
}

#[test]
fn a_parked_connection_wakes_for_its_next_request() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (mut proxy, port) = proxy_with(dir.path(), &backend, "");
    let mut client = request_then_park(&mut proxy, port);
    for i in 0..3 {
        let (status, _, body) = send(&mut client, &get(&format!("/again/{i}")));
        assert_eq!(status, 200);
        assert!(String::from_utf8_lossy(&body).starts_with(&format!("GET /again/{i} HTTP/1.1")));
        // Parked again after each pause, and woken again.
        proxy.wait_for("parking idle connection");
    }
    // A parked connection whose client closes is cleaned up, and others are not disturbed.
    let mut other = request_then_park(&mut proxy, port);
    drop(client);
    assert_eq!(send(&mut other, &get("/other")).0, 200);
    drop(other);
    assert_eq!(proxy.stop(), 0);
    let line = proxy
        .log
        .iter()
        .find(|l| l.contains("request(s);"))
        .cloned()
        .unwrap_or_default();
    assert!(line.contains("6 request(s)"), "{line}");
}

#[test]
fn a_parked_connection_closes_when_its_keep_alive_time_is_over() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (mut proxy, port) = proxy_with(dir.path(), &backend, "keepalive_timeout = \"2s\"");
    let mut client = request_then_park(&mut proxy, port);
    let parked_at = Instant::now();
    client.set_read_timeout(Some(WAIT)).unwrap();
    assert!(is_closed(&mut client), "the proxy should close the idle connection");
    let waited = parked_at.elapsed();
    assert!(waited < WAIT, "closed by the read timeout, not by the proxy");
    assert!(waited >= Duration::from_millis(500), "closed too early: {waited:?}");
    assert_eq!(proxy.stop(), 0);
}

#[test]
fn draining_closes_parked_connections_at_once() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    // Keep-alive and the drain deadline are both far longer than the test may wait.
    let (mut proxy, port) = proxy_with(dir.path(), &backend, "keepalive_timeout = \"300s\"");
    let mut client = request_then_park(&mut proxy, port);
    assert_eq!(proxy.stop(), 0);
    assert!(
        !proxy.log.iter().any(|l| l.contains("drain deadline")),
        "{}",
        proxy.log.join("\n")
    );
    client.set_read_timeout(Some(WAIT)).unwrap();
    assert!(is_closed(&mut client));
}
