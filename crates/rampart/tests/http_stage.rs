//! The connection stage and reloads under HTTP: PROXY headers in and out on HTTP listeners and
//! upstreams, the connection limit's records, absolute-form targets, and keep-alive clients that
//! follow a reload at their next request.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::channel;
use std::time::Instant;

use common::http::{get, is_closed, send, HttpBackend, Reply};
use common::*;
use rampart_proto::proxy_protocol::{self, ProxyAddresses};

/// Polls `check` until it holds (or fails the test after [`WAIT`]).
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::yield_now();
    }
}

fn start(dir: &std::path::Path, cfg: &str) -> (Rampart, String) {
    let path = write_file(dir, "rampart.toml", cfg);
    (Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]), path)
}

#[test]
fn a_trusted_client_sends_a_proxy_header_v1_or_v2_on_an_http_listener() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         proxy_protocol_from = [\"127.0.0.0/8\"]\n\n[upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let (_proxy, _) = start(dir.path(), &cfg);
    let addresses = |source: &str| ProxyAddresses {
        source: source.parse().unwrap(),
        destination: format!("127.0.0.1:{port}").parse().unwrap(),
    };
    for (version, source) in [(1, "192.0.2.9:4000"), (2, "198.51.100.7:5000")] {
        let mut header = Vec::new();
        match version {
            1 => proxy_protocol::encode_v1(&addresses(source), &mut header),
            _ => proxy_protocol::encode_v2(&addresses(source), &mut header),
        }
        let mut client = connect(port);
        // The header and the first request in one write: the request's bytes arrive with it.
        header.extend_from_slice(&get("/one"));
        client.write_all(&header).unwrap();
        let (status, _, _) = common::http::read_response(&mut client);
        assert_eq!(status, 200);
        let ip = source.split(':').next().unwrap();
        let head = backend.next_head().to_ascii_lowercase();
        assert!(
            head.contains(&format!("x-forwarded-for: {ip}\r\n")),
            "v{version}: {head}"
        );
        // Later requests on the connection are the same client.
        assert_eq!(send(&mut client, &get("/two")).0, 200);
        assert!(backend
            .next_head()
            .to_ascii_lowercase()
            .contains(&format!("x-forwarded-for: {ip}\r\n")));
    }
    // A trusted client without a header is cut off: the request is never seen.
    let mut client = connect(port);
    client.write_all(&get("/no-header")).unwrap();
    assert!(is_closed(&mut client));
    assert!(backend.heads.try_recv().is_err());
}

/// An upstream that expects a PROXY header on each connection, then answers HTTP requests with
/// `200` and the header's source address as the body. Reports each header it reads.
fn proxy_header_backend() -> (SocketAddr, std::sync::mpsc::Receiver<SocketAddr>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || serve_proxied(conn, tx));
        }
    });
    (addr, rx)
}

fn serve_proxied(mut conn: TcpStream, seen: std::sync::mpsc::Sender<SocketAddr>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let source = loop {
        match proxy_protocol::decode(&buf) {
            Ok(Some((header, used))) => {
                buf.drain(..used);
                break header.addresses.map(|a| a.source);
            }
            Ok(None) => {}
            Err(_) => return,
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let Some(source) = source else { return };
    let _ = seen.send(source);
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            let body = source.to_string();
            let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
            if conn.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn an_http_upstream_gets_a_proxy_header_per_client_and_pooled_connections_stay_with_their_client() {
    let (backend, headers) = proxy_header_backend();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    for version in ["v1", "v2"] {
        let cfg = format!(
            "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
             [upstreams.app]\ntargets = [\"{backend}\"]\nsend_proxy_protocol = \"{version}\"\n"
        );
        let (mut proxy, _) = start(dir.path(), &cfg);
        let mut alice = connect(port);
        let mut bob = connect(port);
        for _ in 0..3 {
            for client in [&mut alice, &mut bob] {
                let me = client.local_addr().unwrap().to_string();
                let (status, _, body) = send(client, &get("/"));
                assert_eq!(status, 200, "{version}");
                // The upstream connection that answered began with this client's header.
                assert_eq!(String::from_utf8_lossy(&body), me, "{version}");
            }
        }
        // One upstream connection (and one header) per client: reused, never shared.
        let seen: Vec<SocketAddr> = headers.try_iter().collect();
        assert_eq!(seen.len(), 2, "{version}: {seen:?}");
        assert!(seen.contains(&alice.local_addr().unwrap()) && seen.contains(&bob.local_addr().unwrap()));
        assert_eq!(proxy.stop(), 0);
    }
}

#[test]
fn an_http_connection_refused_at_the_limit_leaves_a_session_record() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let records = dir.path().join("sessions.jsonl");
    let cfg = format!(
        "[global]\nsession_log = \"{}\"\n\n[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         upstream = \"app\"\nmax_connections = 1\n\n[upstreams.app]\ntargets = [\"{}\"]\n",
        records.display(),
        backend.target()
    );
    let (_proxy, _) = start(dir.path(), &cfg);
    let mut first = connect(port);
    assert_eq!(send(&mut first, &get("/")).0, 200);
    let mut second = connect(port);
    let _ = second.write_all(&get("/"));
    assert!(is_closed(&mut second));
    eventually("the refusal is recorded", || {
        std::fs::read_to_string(&records).is_ok_and(|r| {
            r.lines().any(|l| {
                l.contains("\"listener\":\"web\"")
                    && l.contains("\"upstream\":null")
                    && l.contains("\"close\":\"connection_limit\"")
            })
        })
    });
    // The connection that holds the place still works.
    assert_eq!(send(&mut first, &get("/")).0, 200);
}

#[test]
fn an_absolute_form_request_is_routed_on_its_authority_and_forwarded_in_origin_form() {
    let api = HttpBackend::start(Reply::Echo);
    let web = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"web\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ host = \"api.example\" }}\nupstream = \"api\"\n\n\
         [upstreams.api]\ntargets = [\"{}\"]\n\n[upstreams.web]\ntargets = [\"{}\"]\n",
        api.target(),
        web.target()
    );
    let (_proxy, _) = start(dir.path(), &cfg);
    let mut client = connect(port);
    let raw = b"GET http://api.example:8080/items?id=3 HTTP/1.1\r\nHost: web.example\r\n\r\n";
    assert_eq!(send(&mut client, raw).0, 200);
    let head = api.next_head();
    assert!(head.starts_with("GET /items?id=3 HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nhost: api.example:8080\r\n"), "{head}");
    assert!(!lower.contains("web.example"), "{head}");
    assert!(web.heads.try_recv().is_err());
}

fn respond_config(port: u16, body: &str) -> String {
    format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nrespond = {{ status = 200, body = \"{body}\" }}\n"
    )
}

#[test]
fn a_keep_alive_client_follows_a_reload_at_its_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (mut proxy, path) = start(dir.path(), &respond_config(port, "before"));
    let mut client = connect(port);
    assert_eq!(send(&mut client, &get("/")).2, b"before");
    std::fs::write(&path, respond_config(port, "after")).unwrap();
    assert!(proxy.reload().contains("reloaded"));
    // The same connection, the next request: the new config.
    assert_eq!(send(&mut client, &get("/")).2, b"after");
    assert_eq!(send(&mut client, &get("/")).2, b"after");
}

#[test]
fn a_target_removed_by_a_reload_gets_no_request_and_its_pooled_connections_close() {
    let kept = HttpBackend::start(Reply::Echo);
    let removed = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let both = [kept.target(), removed.target()];
    let cfg = |targets: &[String]| {
        let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        format!(
            "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
             [upstreams.app]\ntargets = [{}]\n",
            list.join(", ")
        )
    };
    let (mut proxy, path) = start(dir.path(), &cfg(&both));
    let mut client = connect(port);
    for _ in 0..4 {
        assert_eq!(send(&mut client, &get("/")).0, 200);
    }
    // Round robin reached both, and each keeps an idle pooled connection.
    assert_eq!(removed.connections.load(Ordering::SeqCst), 1);
    let before = (kept.heads.try_iter().count(), removed.heads.try_iter().count());
    assert_eq!(before, (2, 2));

    std::fs::write(&path, cfg(&[kept.target()])).unwrap();
    assert!(proxy.reload().contains("reloaded"));
    for _ in 0..6 {
        assert_eq!(send(&mut client, &get("/")).0, 200);
    }
    assert_eq!(kept.heads.try_iter().count(), 6);
    assert_eq!(removed.heads.try_iter().count(), 0);
    // The worker's next housekeeping round closes the idle connection to the removed target.
    eventually("the removed target's pooled connection closes", || {
        removed.closed.load(Ordering::SeqCst) == 1
    });
    assert_eq!(kept.closed.load(Ordering::SeqCst), 0);
}
