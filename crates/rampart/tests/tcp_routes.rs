//! Delayed binding over real sockets: TLS passed through by SNI to backends that hold their own
//! certificates (wildcard, default, ALPN), one name terminated by a hand-over to an HTTP listener
//! with TLS and another passed through on the same port, rejects, payload filters, and bad first
//! bytes that end in the default or a close within `peek_timeout` without harming others.
//! (Real PostgreSQL, Redis and SSH servers: tcp_routes_servers.rs.)

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use common::tls::*;
use common::*;

/// Two TLS backends (`a` for a.example, `b` for *.b.example), a plain fallback, and one port whose
/// routes pass TLS through by SNI and ALPN, terminate `web.example` on a listener without a bind
/// of its own, and reject SSH.
struct Edge {
    ca: Ca,
    certs: [Issued; 3],
    a: TlsBackend,
    b: TlsBackend,
    _fallback: Backend,
    _app: common::http::HttpBackend,
    port: u16,
    admin: u16,
    sessions: std::path::PathBuf,
    _proxy: Rampart,
    _dir: tempfile::TempDir,
}

fn edge(listener_extra: &str) -> Edge {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let certs = [
        ca.issue(&CertSpec::new(&["a.example"])),
        ca.issue(&CertSpec::new(&["*.b.example"])),
        ca.issue(&CertSpec::new(&["web.example"])),
    ];
    let a = TlsBackend::start("backend-a", &certs[0]);
    let b = TlsBackend::start("backend-b", &certs[1]);
    let fallback = Backend::start("fallback", Behavior::TagEcho);
    let app = common::http::HttpBackend::start(common::http::Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\napp\n",
    ));
    let web = certs[2].write(dir.path(), "web");
    let sessions = dir.path().join("sessions.jsonl");
    let (port, admin) = (free_port(), free_port());
    let cfg = format!(
        "[global]\nsession_log = \"{sessions}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.edge]\nbind = \"127.0.0.1:{port}\"\nupstream = \"fallback\"\npeek_timeout = \"500ms\"\n{listener_extra}\n\
         [[listeners.edge.routes]]\nname = \"a\"\nmatch = {{ sni = \"a.example\" }}\nupstream = \"a\"\n\
         [[listeners.edge.routes]]\nname = \"b-h2\"\nmatch = {{ sni = \"*.b.example\", alpn = \"h2\" }}\nupstream = \"b\"\n\
         [[listeners.edge.routes]]\nname = \"b\"\nmatch = {{ sni = \"*.b.example\" }}\nupstream = \"b\"\n\
         [[listeners.edge.routes]]\nname = \"web\"\nmatch = {{ sni = \"web.example\" }}\nlistener = \"web\"\n\
         [[listeners.edge.routes]]\nname = \"no-ssh\"\nmatch = {{ protocol = \"ssh\" }}\nreject = true\n\
         [[listeners.edge.routes]]\nname = \"capped\"\nmatch = {{ prefix = 'CAP ' }}\nupstream = \"fallback\"\nmax_bytes = \"64\"\n\
         [[listeners.edge.routes]]\nname = \"tls-other\"\nmatch = {{ protocol = \"tls\" }}\nupstream = \"b\"\n\n\
         [listeners.web]\nprotocol = \"http\"\nupstream = \"app\"\n[listeners.web.tls]\n{}\n\n\
         [upstreams.a]\ntargets = [\"{}\"]\n[upstreams.b]\ntargets = [\"{}\"]\n\
         [upstreams.fallback]\ntargets = [\"{}\"]\n[upstreams.app]\ntargets = [\"{}\"]\n",
        certificates(&[web]),
        a.target(),
        b.target(),
        fallback.target(),
        app.target(),
        sessions = sessions.display(),
    );
    let (proxy, _) = start_config(dir.path(), &cfg, 1);
    Edge {
        ca,
        certs,
        a,
        b,
        _fallback: fallback,
        _app: app,
        port,
        admin,
        sessions,
        _proxy: proxy,
        _dir: dir,
    }
}

/// The session record whose `route` is `route` (`null` for the default), once written.
fn record_of(sessions: &Path, route: &str) -> serde_json::Value {
    let wanted = if route == "null" {
        "\"route\":null".to_string()
    } else {
        format!("\"route\":\"{route}\"")
    };
    let lines = log_lines_once(sessions, &format!("a record of route {route}"), |l| l.contains(&wanted));
    let line = lines.iter().find(|l| l.contains(&wanted)).unwrap();
    serde_json::from_str(line).unwrap()
}

/// A GET over `tls`, answered by a backend of common::tls (its tag on the first body line).
fn tag_over(tls: &mut TlsStream, host: &str) -> String {
    let response = request(tls, &get_host("/", host)).expect("a response");
    response.text().lines().next().unwrap_or_default().to_string()
}

#[test]
fn tls_passes_through_by_sni_with_each_backends_own_certificate() {
    let e = edge("");
    let client = ClientOpts::new(&e.ca).build();
    let mut to_a = handshake(e.port, &client, "a.example").expect("handshake through to a");
    assert_eq!(served(&to_a, &[&e.certs[0], &e.certs[1]]), Some(0));
    assert_eq!(tag_over(&mut to_a, "a.example"), "backend-a");
    assert_eq!(e.a.next_handshake().sni.as_deref(), Some("a.example"));
    // Wildcard: any subdomain of b.example.
    let mut to_b = handshake(e.port, &client, "api.b.example").expect("handshake through to b");
    assert_eq!(served(&to_b, &[&e.certs[0], &e.certs[1]]), Some(1));
    assert_eq!(tag_over(&mut to_b, "api.b.example"), "backend-b");
    assert_eq!(e.b.next_handshake().sni.as_deref(), Some("api.b.example"));
    // A name no route has, still TLS: the catch-all TLS route (b's certificate, not for the name).
    let any_name = ClientOpts::new(&e.ca).any_name().build();
    let other = handshake(e.port, &any_name, "nobody.example").expect("handshake to the TLS catch-all");
    assert_eq!(served(&other, &[&e.certs[0], &e.certs[1]]), Some(1));
    drop((to_a, to_b, other));

    let a = record_of(&e.sessions, "a");
    assert_eq!(a["protocol"], "tls");
    assert_eq!(a["sni"], "a.example");
    assert_eq!(a["upstream"], "a");
    assert_eq!(a["close"], "completed");
    assert!(a["peek_ms"].as_f64().unwrap() >= 0.0);
    let b = record_of(&e.sessions, "b");
    assert_eq!(b["sni"], "api.b.example");
    assert_eq!(record_of(&e.sessions, "tls-other")["sni"], "nobody.example");
}

#[test]
fn alpn_chooses_between_routes_for_the_same_name() {
    let e = edge("");
    // Offered h2 (and http/1.1, which the backend picks): the b-h2 route.
    let h2 = ClientOpts::new(&e.ca).alpn(&["h2", "http/1.1"]).build();
    let mut conn = handshake(e.port, &h2, "api.b.example").expect("handshake");
    assert_eq!(tag_over(&mut conn, "api.b.example"), "backend-b");
    drop(conn);
    let record = record_of(&e.sessions, "b-h2");
    assert_eq!(record["alpn"], serde_json::json!(["h2", "http/1.1"]));
    // Without h2: the plain b route.
    let h1 = ClientOpts::new(&e.ca).alpn(&["http/1.1"]).build();
    drop(handshake(e.port, &h1, "api.b.example").expect("handshake"));
    assert_eq!(record_of(&e.sessions, "b")["alpn"], serde_json::json!(["http/1.1"]));
}

#[test]
fn one_name_is_terminated_and_another_passed_through_on_one_port() {
    let e = edge("");
    let client = ClientOpts::new(&e.ca).build();
    // web.example: Rampart's own certificate, and HTTP routed by the `web` listener.
    let mut web = handshake(e.port, &client, "web.example").expect("handshake with rampart");
    assert_eq!(served(&web, &[&e.certs[0], &e.certs[1], &e.certs[2]]), Some(2));
    let response = request(&mut web, &get_host("/hello", "web.example")).expect("a response");
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(response.text().contains("app"), "{}", response.text());
    // Keep-alive works on the handed-over connection.
    let again = request(&mut web, &get_host("/again", "web.example")).expect("a second response");
    assert_eq!(again.status, 200);
    // a.example on the same port: the backend's own certificate.
    let to_a = handshake(e.port, &client, "a.example").expect("handshake through to a");
    assert_eq!(served(&to_a, &[&e.certs[0], &e.certs[1], &e.certs[2]]), Some(0));
}

#[test]
fn ssh_is_rejected_and_unknown_bytes_go_to_the_default() {
    let e = edge("");
    let mut ssh = connect(e.port);
    ssh.write_all(b"SSH-2.0-OpenSSH_9.2p1\r\n").unwrap();
    assert!(
        read_until_closed(&mut ssh).is_empty(),
        "a rejected connection gets nothing"
    );
    let record = record_of(&e.sessions, "no-ssh");
    assert_eq!(record["close"], "rejected");
    assert_eq!(record["protocol"], "ssh");
    // Bytes no detector knows decide at once (no wait for peek_timeout): the default.
    let mut other = connect(e.port);
    other.write_all(b"\x01\x02hello\n").unwrap();
    assert_eq!(read_line(&mut other), "fallback");
    drop(other);
    assert_eq!(record_of(&e.sessions, "null")["protocol"], "unknown");
    let m = common::scrape::scrape(e.admin);
    fn route(r: &str) -> [(&str, &str); 2] {
        [("listener", "edge"), ("route", r)]
    }
    assert_eq!(
        common::scrape::value(&m, "rampart_tcp_route_connections_total", &route("no-ssh")),
        1.0
    );
    assert_eq!(
        common::scrape::value(&m, "rampart_tcp_route_connections_total", &route("(default)")),
        1.0
    );
    assert_eq!(
        common::scrape::value(&m, "rampart_tcp_route_undecided_total", &[("listener", "edge")]),
        0.0
    );
}

#[test]
fn max_bytes_closes_a_connection_that_sends_too_much() {
    let e = edge("");
    let mut capped = connect(e.port);
    capped.write_all(b"CAP hello\n").unwrap();
    assert_eq!(read_line(&mut capped), "fallback");
    assert_eq!(read_line(&mut capped), "CAP hello");
    capped.write_all(&[b'x'; 100]).unwrap();
    // Closed without relaying the read that crossed the limit.
    let rest = read_until_closed(&mut capped);
    assert!(!rest.contains(&b'x'), "{rest:?}");
    assert_eq!(record_of(&e.sessions, "capped")["close"], "filter_closed");
    let m = common::scrape::scrape(e.admin);
    let labels = [("listener", "edge"), ("route", "capped")];
    assert_eq!(
        common::scrape::value(&m, "rampart_tcp_route_filter_closes_total", &labels),
        1.0
    );
}

#[test]
fn bad_first_bytes_end_in_the_default_or_a_close_and_harm_no_one_else() {
    let e = edge("");
    let mut hello = raw_client_hello(0x0303, &[0x1301, 0xc02f], "a.example");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a bad handshake length", {
            let mut bad = hello.clone();
            bad[6..9].copy_from_slice(&[0xff, 0xff, 0xff]);
            bad
        }),
        ("a truncated record", hello[..hello.len() - 10].to_vec()),
        (
            "an SNI over 255 bytes",
            raw_client_hello(0x0303, &[0x1301], &"x".repeat(300)),
        ),
        ("16 KiB of garbage", vec![0x16; 16 << 10]),
        ("one byte, then nothing", vec![0x16]),
    ];
    let mut clients = Vec::new();
    for (what, bytes) in &cases {
        let mut c = connect(e.port);
        // The server may close before all is written: only the outcome matters.
        let _ = c.write_all(bytes);
        clients.push((what, c));
    }
    // Meanwhile a good client is served at once.
    let client = ClientOpts::new(&e.ca).build();
    let mut good = handshake(e.port, &client, "a.example").expect("a good client is served");
    assert_eq!(tag_over(&mut good, "a.example"), "backend-a");
    for (what, mut c) in clients {
        // Each ends in the default (which says "fallback" first) or a close, within peek_timeout.
        let got = first_line_or_close(&mut c);
        assert!(
            got.is_empty() || got == b"fallback\n",
            "{what}: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    // A split ClientHello (two TCP segments, a pause between them) is routed by its SNI.
    hello = raw_client_hello(0x0303, &[0x1301, 0xc02f], "a.example");
    let mut split = connect(e.port);
    split.set_nodelay(true).unwrap();
    split.write_all(&hello[..40]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    split.write_all(&hello[40..]).unwrap();
    // The backend answers the hello through the relay (a handshake record, or an alert: this
    // raw hello may share no cipher suite with it).
    let mut answer = [0u8; 1];
    split.set_read_timeout(Some(WAIT)).unwrap();
    split.read_exact(&mut answer).unwrap();
    assert!(
        [0x15, 0x16].contains(&answer[0]),
        "a TLS record from backend a: {answer:?}"
    );
    drop(split);
    assert_eq!(record_of(&e.sessions, "a")["sni"], "a.example");
}

#[test]
fn a_proxy_header_is_read_before_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    let tagged = Backend::start("via-proxy", Behavior::TagEcho);
    let direct = Backend::start("direct", Behavior::TagEcho);
    let port = free_port();
    let cfg = format!(
        "[listeners.edge]\nbind = \"127.0.0.1:{port}\"\nupstream = \"direct\"\nproxy_protocol_from = [\"127.0.0.2/32\"]\n\
         [[listeners.edge.routes]]\nmatch = {{ protocol = \"proxy\", source = [\"192.0.2.0/24\"] }}\nupstream = \"tagged\"\n\
         [upstreams.tagged]\ntargets = [\"{}\"]\n[upstreams.direct]\ntargets = [\"{}\"]\n",
        tagged.target(),
        direct.target()
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let mut via = connect_from("127.0.0.2".parse().unwrap(), port);
    via.write_all(b"PROXY TCP4 192.0.2.9 127.0.0.1 5000 80\r\nhello\n")
        .unwrap();
    assert_eq!(read_line(&mut via), "via-proxy");
    assert_eq!(read_line(&mut via), "hello");
    // A PROXY header followed by nothing: decided at once by the header and source alone.
    let mut silent = connect_from("127.0.0.2".parse().unwrap(), port);
    silent
        .write_all(b"PROXY TCP4 192.0.2.10 127.0.0.1 5000 80\r\n")
        .unwrap();
    assert_eq!(read_line(&mut silent), "via-proxy");
    // A direct client: no header, not that route.
    let mut plain = connect(port);
    plain.write_all(b"x\n").unwrap();
    assert_eq!(read_line(&mut plain), "direct");
}

/// The first line the server sends (with its newline), or what came before it closed.
fn first_line_or_close(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\n") {
        match stream.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer and no close: {e}"),
        }
    }
    got
}

/// Reads until the peer closes (or the read fails), with a bound on the wait.
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    got
}

#[test]
fn a_tcp_route_config_error_names_its_place_and_keeps_the_running_config() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::start("kept", Behavior::TagEcho);
    let port = free_port();
    let good = format!(
        "[listeners.edge]\nbind = \"127.0.0.1:{port}\"\nupstream = \"app\"\n\
         [[listeners.edge.routes]]\nmatch = {{ protocol = \"ssh\" }}\nreject = true\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let (mut proxy, path) = start_config(dir.path(), &good, 1);
    let bad = good.replace(
        "match = { protocol = \"ssh\" }",
        "match = { protocol = \"ssh\", sni = \"x\" }",
    );
    std::fs::write(&path, bad).unwrap();
    let line = proxy.reload();
    assert!(line.contains("rampart.toml:5:"), "{line}");
    assert!(line.contains("can never match"), "{line}");
    let mut c = connect(port);
    c.write_all(b"hi\n").unwrap();
    assert_eq!(read_line(&mut c), "kept");
}

#[test]
fn the_tcp_command_line_passes_tls_through_by_sni() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let certs = [
        ca.issue(&CertSpec::new(&["a.example"])),
        ca.issue(&CertSpec::new(&["*.b.example"])),
    ];
    let a = TlsBackend::start("backend-a", &certs[0]);
    let b = TlsBackend::start("backend-b", &certs[1]);
    let fallback = Backend::start("fallback", Behavior::TagEcho);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (to_a, to_b) = (
        format!("a.example={}", a.target()),
        format!("*.b.example={}", b.target()),
    );
    let target = fallback.target();
    let args = [
        "tcp",
        "--listen",
        &listen,
        "--sni",
        &to_a,
        "--sni",
        &to_b,
        "--to",
        &target,
        "--workers",
        "1",
    ];
    let _proxy = Rampart::start(dir.path(), &args);
    let client = ClientOpts::new(&ca).build();
    let mut conn = handshake(port, &client, "a.example").expect("through to a");
    assert_eq!(served(&conn, &[&certs[0], &certs[1]]), Some(0));
    assert_eq!(tag_over(&mut conn, "a.example"), "backend-a");
    let mut conn = handshake(port, &client, "www.b.example").expect("through to b");
    assert_eq!(tag_over(&mut conn, "www.b.example"), "backend-b");
    let mut plain = connect(port);
    plain.write_all(b"hello\n").unwrap();
    assert_eq!(read_line(&mut plain), "fallback");
    // Mistakes are refused before anything starts.
    let (code, _, err) = run_rampart(dir.path(), &["tcp", "--listen", &listen, "--sni", "a.example"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("NAME=HOST:PORT"), "{err}");
}
