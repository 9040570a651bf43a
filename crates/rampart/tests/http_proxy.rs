//! The HTTP/1.1 proxy through real sockets: keep-alive and pooling, forwarded and hop-by-hop
//! headers, pipelining, 100-continue, HTTP/1.0, HEAD, WebSocket upgrade, streamed bodies.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::http::{get, read_response, send, HttpBackend, Reply};
use common::*;

fn http_proxy(dir: &std::path::Path, backend: &HttpBackend, extra: &[&str]) -> (Rampart, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let target = backend.target();
    let mut args = vec![
        "http",
        "--listen",
        listen.as_str(),
        "--to",
        target.as_str(),
        "--workers",
        "1",
    ];
    args.extend_from_slice(extra);
    (Rampart::start(dir, &args), port)
}

#[test]
fn keep_alive_clients_share_pooled_upstream_connections() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (mut proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    for i in 0..20 {
        let (status, _, body) = send(&mut client, &get(&format!("/req/{i}")));
        assert_eq!(status, 200);
        assert!(String::from_utf8_lossy(&body).starts_with(&format!("GET /req/{i} HTTP/1.1")));
    }
    // A second client reuses the same upstream connection too.
    let mut other = connect(port);
    assert_eq!(send(&mut other, &get("/other")).0, 200);
    assert_eq!(backend.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop((client, other));
    assert_eq!(proxy.stop(), 0);
    let line = proxy
        .log
        .iter()
        .find(|l| l.contains("upstream connections:"))
        .cloned()
        .unwrap_or_default();
    assert!(
        line.contains("21 request(s); upstream connections: 1 opened, 20 reuse(s)"),
        "{line}"
    );
}

#[test]
fn forwarded_headers_are_added_and_hop_by_hop_headers_dropped() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    let raw = b"GET /h HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, X-Private\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\nX-Forwarded-For: 203.0.113.9\r\nX-App: kept\r\n\r\n";
    assert_eq!(send(&mut client, raw).0, 200);
    let head = backend.next_head().to_ascii_lowercase();
    for gone in [
        "x-private",
        "keep-alive: timeout",
        "\r\nte:",
        "proxy-connection",
        "connection:",
    ] {
        assert!(!head.contains(gone), "{gone} reached the backend:\n{head}");
    }
    assert!(head.contains("x-app: kept"), "{head}");
    assert!(head.contains("x-forwarded-for: 203.0.113.9, 127.0.0.1\r\n"), "{head}");
    assert!(
        head.contains("x-forwarded-proto: http\r\n") && head.contains("x-forwarded-host: app.test\r\n"),
        "{head}"
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    let mut all = Vec::new();
    for i in 0..5 {
        all.extend_from_slice(&get(&format!("/p{i}")));
    }
    client.write_all(&all).unwrap();
    for i in 0..5 {
        let (status, head, body) = read_response(&mut client);
        assert_eq!(status, 200, "response {i}: {head}");
        assert!(
            String::from_utf8_lossy(&body).starts_with(&format!("GET /p{i} ")),
            "response {i} out of order"
        );
    }
}

#[test]
fn expect_100_continue_gets_a_continue_then_the_body_goes_through() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    client
        .write_all(b"PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let mut interim = [0u8; 25];
    client.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    client.write_all(b"hello").unwrap();
    let (status, _, body) = read_response(&mut client);
    assert_eq!(status, 200);
    let body = String::from_utf8_lossy(&body).to_string();
    assert!(
        body.ends_with("body-length: 5\n") && !body.to_ascii_lowercase().contains("expect:"),
        "{body}"
    );
}

#[test]
fn http_10_head_and_bodiless_statuses() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut client = connect(port);
    let (status, head, _) = send(&mut client, b"GET /old HTTP/1.0\r\n\r\n");
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    assert!(common::http::is_closed(&mut client));
    // HTTP/1.0 with keep-alive stays open.
    let mut client = connect(port);
    let (_, head, _) = send(&mut client, b"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(head.to_ascii_lowercase().contains("connection: keep-alive"), "{head}");
    assert_eq!(
        send(&mut client, b"GET /again HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").0,
        200
    );
    // HEAD: the length is reported, no body follows, and the connection goes on.
    let mut client = connect(port);
    client.write_all(b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let n = client.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("\r\n\r\n"), "{text}");
    assert_eq!(send(&mut client, &get("/after-head")).0, 200);
}

/// An HTTP/1.0 client cannot read chunks: a chunked upstream body reaches it bare (sizes,
/// extensions and trailers gone), without `Transfer-Encoding`, ended by the close, even when the
/// client asked for keep-alive. An HTTP/1.1 client still gets the chunks.
#[test]
fn http_10_client_gets_a_chunked_body_unchunked_and_closed() {
    let backend = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: t\r\n\r\n",
    ));
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    for request in [
        &b"GET /old HTTP/1.0\r\n\r\n"[..],
        &b"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"[..],
    ] {
        let mut client = connect(port);
        client.write_all(request).unwrap();
        let mut raw = Vec::new();
        client.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let lower = head.to_ascii_lowercase();
        assert!(head.starts_with("HTTP/1.1 200"), "{text}");
        assert!(!lower.contains("transfer-encoding"), "{text}");
        assert!(lower.contains("connection: close"), "{text}");
        assert_eq!(body, "hello, world", "{text}");
    }
    let mut client = connect(port);
    client.write_all(&get("/new")).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = client.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(
        text.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "{text}"
    );
}

/// A chunked request body crosses the seam as data and trailers: the backend gets it chunked
/// again (extensions gone, the data whole, sent in pieces across chunk lines), with its trailer
/// fields, and never a framing field among them.
#[test]
fn a_chunked_request_body_goes_upstream_with_its_trailers() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    let head = b"POST /up HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n";
    let body = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: 42\r\nContent-Length: 9\r\n\r\n";
    client.write_all(head).unwrap();
    // In pieces that split chunk lines and data.
    for piece in body.chunks(4) {
        client.write_all(piece).unwrap();
        client.flush().unwrap();
    }
    let (status, _, echoed) = read_response(&mut client);
    let echoed = String::from_utf8_lossy(&echoed).into_owned();
    assert_eq!(status, 200, "{echoed}");
    assert!(
        echoed.to_ascii_lowercase().contains("transfer-encoding: chunked\r\n"),
        "{echoed}"
    );
    // The trailer section as it reached the backend; a framing field is no trailer.
    assert!(
        echoed.ends_with("\r\n\r\nX-Checksum: 42\r\nbody-length: 12\n"),
        "{echoed}"
    );
    // The connection goes on.
    assert_eq!(send(&mut client, &get("/after")).0, 200);
}

#[test]
fn no_content_and_not_modified_carry_no_body() {
    for raw in [
        &b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"[..],
        &b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"[..],
    ] {
        let backend = HttpBackend::start(Reply::Raw(raw));
        let dir = tempfile::tempdir().unwrap();
        let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
        let mut client = connect(port);
        client.write_all(&get("/x")).unwrap();
        client.write_all(&get("/y")).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut text = String::new();
        while text.matches("HTTP/1.1").count() < 2 {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let second = text.rfind("HTTP/1.1").unwrap();
        assert!(
            text[..second].ends_with("\r\n\r\n"),
            "a body followed a bodiless status: {text:?}"
        );
    }
}

#[test]
fn websocket_upgrade_becomes_a_tunnel() {
    let backend = HttpBackend::start(Reply::Upgrade);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    let (status, head, _) = send(
        &mut client,
        b"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert_eq!(status, 101, "{head}");
    assert!(head.to_ascii_lowercase().contains("upgrade: websocket"), "{head}");
    let upstream_head = backend.next_head().to_ascii_lowercase();
    assert!(
        upstream_head.contains("upgrade: websocket") && upstream_head.contains("connection: upgrade"),
        "{upstream_head}"
    );
    for msg in [&b"\x81\x05hello"[..], b"\x81\x03abc", &[0x82; 300]] {
        client.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_gigabyte_streams_up_and_down_chunked_with_flat_memory() {
    const GIB: u64 = 1 << 30;
    let backend = HttpBackend::start(Reply::ChunkedDownload(GIB));
    let dir = tempfile::tempdir().unwrap();
    let (proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let pid = proxy.pid();
    let before = rss_kib(pid);
    let mut client = connect(port);
    // Upload 1 GiB chunked (64 KiB chunks), while the download runs after it.
    client
        .write_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let piece = vec![b'u'; 64 * 1024];
    let mut peak = before;
    for i in 0..(GIB / piece.len() as u64) {
        client.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).unwrap();
        client.write_all(&piece).unwrap();
        client.write_all(b"\r\n").unwrap();
        if i.is_multiple_of(2048) {
            peak = peak.max(rss_kib(pid));
        }
    }
    client.write_all(b"0\r\n\r\n").unwrap();
    // Download 1 GiB chunked, counting the data bytes.
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let head_end = loop {
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0);
        raw.extend_from_slice(&buf[..n]);
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw[..head_end])
    );
    let mut decoder = rampart_proto::h1::ChunkedDecoder::new();
    let mut pending = raw.split_off(head_end);
    let mut reads = 0u64;
    loop {
        let (used, progress) = decoder.advance(&pending).unwrap();
        pending.drain(..used);
        if progress == rampart_proto::h1::ChunkedProgress::Done {
            break;
        }
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0, "download cut short");
        pending.extend_from_slice(&buf[..n]);
        reads += 1;
        if reads.is_multiple_of(2048) {
            peak = peak.max(rss_kib(pid));
        }
    }
    assert_eq!(decoder.declared_size(), GIB);
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 16 * 1024,
        "proxy memory grew by {growth} KiB while streaming 2 GiB"
    );
}

#[test]
fn large_content_length_uploads_stream_through() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (_proxy, port) = http_proxy(dir.path(), &backend, &[]);
    let mut client = connect(port);
    let total: usize = 64 << 20;
    client
        .write_all(format!("POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: {total}\r\n\r\n").as_bytes())
        .unwrap();
    let mut writer = client.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let piece = vec![7u8; 1 << 20];
        for _ in 0..(total >> 20) {
            writer.write_all(&piece).unwrap();
        }
    });
    let (status, _, body) = read_response(&mut client);
    sender.join().unwrap();
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).ends_with(&format!("body-length: {total}\n")));
    let _ = TcpStream::peer_addr(&client);
}
