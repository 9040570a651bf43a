//! What a TLS port does with clients that do not complete a good handshake: plain HTTP gets a 400
//! that says to use HTTPS, garbage is closed, a stalled handshake ends at `handshake_timeout`,
//! old protocol versions and cipher suites get an alert; other connections never notice.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Instant;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::*;

const NAME: &str = "edge.example.com";

struct Edge {
    _backend: HttpBackend,
    _proxy: Rampart,
    _dir: tempfile::TempDir,
    port: u16,
    client: std::sync::Arc<rustls::ClientConfig>,
}

fn edge(tls_extra: &str) -> Edge {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let pair = ca.issue(&CertSpec::new(&[NAME])).write(dir.path(), "edge");
    let port = free_port();
    let tls = format!("{}\n{tls_extra}", certificates(&[pair]));
    let (proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    Edge {
        _backend: backend,
        _proxy: proxy,
        _dir: dir,
        port,
        client: ClientOpts::new(&ca).build(),
    }
}

impl Edge {
    fn open(&self) -> TlsStream {
        handshake(self.port, &self.client, NAME).expect("a good client's handshake")
    }

    fn works(&self, conn: &mut TlsStream) {
        let response = request(conn, &get_host("/", NAME)).expect("a good client's request");
        assert_eq!(response.status, 200);
    }
}

#[test]
fn plain_http_on_a_tls_port_gets_400_that_mentions_https() {
    let edge = edge("");
    let mut good = edge.open();
    edge.works(&mut good);
    let mut plain = connect(edge.port);
    let (status, head, body) = common::http::send(&mut plain, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 400, "{head}");
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let body = String::from_utf8_lossy(&body);
    assert!(body.to_ascii_lowercase().contains("https"), "{body}");
    assert!(common::http::is_closed(&mut plain));
    edge.works(&mut good);
    edge.works(&mut edge.open());
}

#[test]
fn garbage_instead_of_a_client_hello_is_closed_and_nothing_else_is_affected() {
    let edge = edge("");
    let mut good = edge.open();
    edge.works(&mut good);
    let binary: Vec<u8> = (0..200u32).map(|i| (i * 89 + 7) as u8).collect();
    // A handshake record whose message is not a ClientHello, and one whose hello is cut short
    // and padded with junk.
    let bad_record = b"\x16\x03\x01\x00\x08\x0b\x00\x00\x04\xde\xad\xbe\xef".to_vec();
    let mut bad_hello = raw_client_hello(0x0303, &[0x1301, 0xc02b], NAME);
    bad_hello.truncate(60);
    bad_hello[3] = 0;
    bad_hello[4] = 55;
    bad_hello.extend_from_slice(&[0xff; 64]);
    for (what, bytes, must_be_alert) in [
        ("binary junk", binary, true),
        ("a record that is no ClientHello", bad_record, true),
        ("a broken ClientHello", bad_hello, true),
        ("an SSH banner", b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(), false),
    ] {
        let mut s = connect(edge.port);
        let _ = s.write_all(&bytes);
        let answer = read_until_closed(&mut s);
        if must_be_alert {
            assert!(
                answer.is_empty() || fatal_alert(&answer).is_some(),
                "{what}: answered {answer:?}"
            );
        }
        edge.works(&mut good);
    }
    edge.works(&mut edge.open());
}

/// Seconds until the server closes `s`.
fn seconds_until_closed(mut s: TcpStream, since: Instant) -> f64 {
    let _ = read_until_closed(&mut s);
    since.elapsed().as_secs_f64()
}

#[test]
fn a_stalled_handshake_is_closed_at_handshake_timeout_while_others_are_served() {
    let edge = edge("handshake_timeout = \"1s\"");
    let start = Instant::now();
    // Half a ClientHello, then nothing.
    let mut half = connect(edge.port);
    half.write_all(&raw_client_hello(0x0303, &[0x1301, 0xc02b], NAME)[..40])
        .unwrap();
    let half = thread::spawn(move || seconds_until_closed(half, start));
    // Meanwhile a good client is served.
    let mut good = edge.open();
    edge.works(&mut good);
    let waited = half.join().unwrap();
    assert!(
        (0.9..4.0).contains(&waited),
        "a stalled handshake was closed after {waited:.2}s (handshake_timeout 1s)"
    );
    edge.works(&mut good);
}

#[test]
fn a_connection_that_sends_nothing_is_closed_at_handshake_timeout() {
    let edge = edge("handshake_timeout = \"1s\"");
    let start = Instant::now();
    let silent = connect(edge.port);
    let mut good = edge.open();
    edge.works(&mut good);
    let waited = seconds_until_closed(silent, start);
    assert!(
        (0.9..4.0).contains(&waited),
        "a silent connection was closed after {waited:.2}s (handshake_timeout 1s)"
    );
    edge.works(&mut good);
}

#[test]
fn tls_1_0_and_1_1_clients_get_a_protocol_version_alert() {
    let edge = edge("");
    let legacy_suites = [0xc013, 0xc014, 0xc009, 0xc00a, 0x002f, 0x0035];
    for (what, version) in [("TLS 1.0", 0x0301), ("TLS 1.1", 0x0302)] {
        let mut s = connect(edge.port);
        s.write_all(&raw_client_hello(version, &legacy_suites, NAME)).unwrap();
        let answer = read_until_closed(&mut s);
        // protocol_version (70)
        assert_eq!(fatal_alert(&answer), Some(70), "{what}: answered {answer:?}");
    }
    edge.works(&mut edge.open());
}

#[test]
fn a_client_without_a_shared_cipher_suite_gets_a_fatal_alert() {
    let edge = edge("");
    // NULL-MD5, RC4-SHA, DES-CBC3-SHA, EXP-RC4-MD5, ECDHE-RSA-AES128-SHA (CBC-SHA1).
    let weak = [0x0001, 0x0005, 0x000a, 0x0003, 0xc013, 0xc009];
    let mut s = connect(edge.port);
    s.write_all(&raw_client_hello(0x0303, &weak, NAME)).unwrap();
    let answer = read_until_closed(&mut s);
    // A fatal alert (rustls itself says handshake_failure, 40; a certificate resolver that finds
    // nothing for the client says access_denied, 49), then the close.
    assert!(fatal_alert(&answer).is_some(), "answered {answer:?}");
    edge.works(&mut edge.open());
}
