//! TLS on HTTP listeners: which certificate a client gets (SNI exact, wildcard, default, strict),
//! RSA beside ECDSA, protocol versions, ALPN, session resumption (one and two workers), what the
//! upstream and the access log learn of TLS, the `http` command line with certificates, keys in
//! their traditional PEM forms, and the redirect to https.

use crate::common;

use std::path::Path;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::*;
use rustls::{AlertDescription, CipherSuite, HandshakeKind};

/// One CA and certificates for `a.example.com`, `*.example.com` and `default.test`, written into
/// `dir` as a.pem/a.key, wild.pem/wild.key, default.pem/default.key.
struct Names {
    ca: Ca,
    a: Issued,
    wild: Issued,
    default: Issued,
    pairs: Vec<(String, String)>,
}

fn names(dir: &Path) -> Names {
    let ca = Ca::new("Rampart Test CA");
    let wild = ca.issue(&CertSpec::new(&["*.example.com"]));
    let a = ca.issue(&CertSpec::new(&["a.example.com"]));
    let default = ca.issue(&CertSpec::new(&["default.test"]));
    // The wildcard comes first: an exact name must win over it wherever it is listed.
    let pairs = vec![
        wild.write(dir, "wild"),
        a.write(dir, "a"),
        default.write(dir, "default"),
    ];
    Names {
        ca,
        a,
        wild,
        default,
        pairs,
    }
}

/// A request on an open TLS connection that must succeed with 200.
fn get_ok(tls: &mut TlsStream, host: &str) -> Response {
    let response = request(tls, &get_host("/", host)).expect("request over TLS");
    assert_eq!(response.status, 200, "{response:?}");
    response
}

#[test]
fn sni_picks_the_exact_name_over_a_wildcard_and_falls_back_to_the_default_certificate() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let tls = format!("{}\ndefault_certificate = \"default.test\"", certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    let all = [&n.a, &n.wild, &n.default];
    let verified = ClientOpts::new(&n.ca).build();
    let any_name = ClientOpts::new(&n.ca).any_name().build();

    // Exact beats the wildcard listed before it; the name is verified by the client too.
    let mut conn = handshake(port, &verified, "a.example.com").expect("handshake for a.example.com");
    assert_eq!(served(&conn, &all), Some(0), "a.example.com got the wrong certificate");
    get_ok(&mut conn, "a.example.com");
    // One label under the wildcard.
    let mut conn = handshake(port, &verified, "b.example.com").expect("handshake for b.example.com");
    assert_eq!(served(&conn, &all), Some(1), "b.example.com should get *.example.com");
    get_ok(&mut conn, "b.example.com");
    // Two labels: the wildcard does not match, so the default.
    let conn = handshake(port, &any_name, "x.y.example.com").expect("handshake for x.y.example.com");
    assert_eq!(served(&conn, &all), Some(2), "x.y.example.com should get the default");
    // An unknown name and no SNI at all: the default.
    let mut conn = handshake(port, &any_name, "unknown.test").expect("handshake for unknown.test");
    assert_eq!(served(&conn, &all), Some(2), "an unknown name should get the default");
    get_ok(&mut conn, "unknown.test");
    let conn = handshake(port, &any_name, "127.0.0.1").expect("handshake without SNI");
    assert_eq!(served(&conn, &all), Some(2), "no SNI should get the default");
}

#[test]
fn without_default_certificate_the_first_entry_is_the_fallback() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    // default.pem first this time.
    let pairs = vec![n.pairs[2].clone(), n.pairs[0].clone(), n.pairs[1].clone()];
    let cfg = https_config(port, &backend.target(), "", &certificates(&pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let all = [&n.a, &n.wild, &n.default];
    let any_name = ClientOpts::new(&n.ca).any_name().build();
    let conn = handshake(port, &any_name, "unknown.test").unwrap();
    assert_eq!(served(&conn, &all), Some(2));
    let conn = handshake(port, &any_name, "a.example.com").unwrap();
    assert_eq!(served(&conn, &all), Some(0));
}

#[test]
fn strict_sni_refuses_an_unknown_name_or_no_name_with_unrecognized_name() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let tls = format!("{}\nstrict_sni = true", certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    let any_name = ClientOpts::new(&n.ca).any_name().build();
    for name in ["unknown.test", "x.y.example.com", "127.0.0.1"] {
        let err = handshake(port, &any_name, name).expect_err(&format!("strict SNI accepted {name}"));
        assert_eq!(
            alert(&err),
            Some(AlertDescription::UnrecognisedName),
            "{name}: {err} ({:?})",
            rustls_error(&err)
        );
    }
    // Known names (exact and wildcard) still work.
    let verified = ClientOpts::new(&n.ca).build();
    let mut conn = handshake(port, &verified, "a.example.com").unwrap();
    get_ok(&mut conn, "a.example.com");
    let mut conn = handshake(port, &verified, "c.example.com").unwrap();
    get_ok(&mut conn, "c.example.com");
}

#[test]
fn rsa_and_ecdsa_certificates_for_one_name_are_chosen_by_what_the_client_supports() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let rsa = ca.issue(&CertSpec::new(&["dual.example.com"]).rsa());
    let ecdsa = ca.issue(&CertSpec::new(&["dual.example.com"]));
    let pairs = vec![rsa.write(dir.path(), "rsa"), ecdsa.write(dir.path(), "ecdsa")];
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let both = [&rsa, &ecdsa];
    let name = "dual.example.com";

    // TLS 1.3: the signature schemes the client offers decide.
    let ecdsa_only = ClientOpts::new(&ca).tls13_only().schemes(ECDSA_SCHEMES).build();
    let mut conn = handshake(port, &ecdsa_only, name).expect("an ECDSA-only TLS 1.3 client");
    assert_eq!(
        served(&conn, &both),
        Some(1),
        "an ECDSA-only client must get the ECDSA certificate"
    );
    get_ok(&mut conn, name);
    let rsa_only = ClientOpts::new(&ca).tls13_only().schemes(RSA_SCHEMES).build();
    let mut conn = handshake(port, &rsa_only, name).expect("an RSA-only TLS 1.3 client");
    assert_eq!(
        served(&conn, &both),
        Some(0),
        "an RSA-only client must get the RSA certificate"
    );
    get_ok(&mut conn, name);

    // TLS 1.2: the cipher suites decide.
    let ecdsa_suites = ClientOpts::new(&ca)
        .tls12_only()
        .suites(&[
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ])
        .build();
    let mut conn = handshake(port, &ecdsa_suites, name).expect("a TLS 1.2 client with ECDSA suites");
    assert_eq!(
        served(&conn, &both),
        Some(1),
        "ECDHE_ECDSA suites must get the ECDSA certificate"
    );
    get_ok(&mut conn, name);
    let rsa_suites = ClientOpts::new(&ca)
        .tls12_only()
        .suites(&[
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ])
        .build();
    let mut conn = handshake(port, &rsa_suites, name).expect("a TLS 1.2 client with RSA suites");
    assert_eq!(
        served(&conn, &both),
        Some(0),
        "ECDHE_RSA suites must get the RSA certificate"
    );
    get_ok(&mut conn, name);
}

#[test]
fn tls_1_2_and_1_3_are_served_and_min_version_1_3_refuses_a_1_2_client() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let (mut proxy, _) = start_config(
        dir.path(),
        &https_config(port, &backend.target(), "", &certificates(&n.pairs)),
        1,
    );
    let tls12 = ClientOpts::new(&n.ca).tls12_only().build();
    let tls13 = ClientOpts::new(&n.ca).tls13_only().build();
    let mut conn = handshake(port, &tls12, "a.example.com").expect("a TLS 1.2 client");
    assert_eq!(version_name(&conn), "TLSv1.2");
    get_ok(&mut conn, "a.example.com");
    let mut conn = handshake(port, &tls13, "a.example.com").expect("a TLS 1.3 client");
    assert_eq!(version_name(&conn), "TLSv1.3");
    get_ok(&mut conn, "a.example.com");
    assert_eq!(proxy.stop(), 0);

    let port = free_port();
    let tls = format!("{}\nmin_version = \"1.3\"", certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    let err = handshake(port, &tls12, "a.example.com").expect_err("min_version 1.3 accepted TLS 1.2");
    assert_eq!(alert(&err), Some(AlertDescription::ProtocolVersion), "{err}");
    let mut conn = handshake(port, &tls13, "a.example.com").unwrap();
    assert_eq!(version_name(&conn), "TLSv1.3");
    get_ok(&mut conn, "a.example.com");
}

#[test]
fn alpn_negotiates_h2_then_http_1_1_and_a_client_without_alpn_is_served() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    // HTTP/2 first (tests/http2 speaks it over such a connection)...
    let offers = ClientOpts::new(&n.ca).alpn(&["h2", "http/1.1"]).build();
    let conn = handshake(port, &offers, "a.example.com").unwrap();
    assert_eq!(conn.conn.alpn_protocol(), Some(&b"h2"[..]));
    // ...HTTP/1.1 for a client that offers only that.
    let offers = ClientOpts::new(&n.ca).alpn(&["http/1.1"]).build();
    let mut conn = handshake(port, &offers, "a.example.com").unwrap();
    assert_eq!(conn.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    get_ok(&mut conn, "a.example.com");
    let none = ClientOpts::new(&n.ca).build();
    let mut conn = handshake(port, &none, "a.example.com").unwrap();
    assert_eq!(conn.conn.alpn_protocol(), None);
    get_ok(&mut conn, "a.example.com");
}

/// A handshake with `config`, one request (which also takes in any session tickets), and how the
/// handshake went.
fn handshake_and_request(port: u16, config: &std::sync::Arc<rustls::ClientConfig>) -> Option<HandshakeKind> {
    let mut conn = handshake(port, config, "a.example.com").expect("handshake");
    get_ok(&mut conn, "a.example.com");
    conn.conn.handshake_kind()
}

#[test]
fn sessions_resume_with_tickets_and_with_session_ids_and_not_when_both_are_off() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&n.pairs));
    let (mut proxy, _) = start_config(dir.path(), &cfg, 1);
    for (what, opts) in [
        ("TLS 1.3 ticket", ClientOpts::new(&n.ca).tls13_only().resume()),
        ("TLS 1.2 ticket", ClientOpts::new(&n.ca).tls12_only().resume()),
    ] {
        let config = opts.build();
        assert_eq!(
            handshake_and_request(port, &config),
            Some(HandshakeKind::Full),
            "{what}"
        );
        assert_eq!(
            handshake_and_request(port, &config),
            Some(HandshakeKind::Resumed),
            "{what}: the second handshake was not resumed"
        );
    }
    assert_eq!(proxy.stop(), 0);

    // Tickets off: TLS 1.2 resumes by session id from the cache.
    let port = free_port();
    let tls = format!(
        "{}\nsession_tickets = false\nsession_cache = 100",
        certificates(&n.pairs)
    );
    let (mut proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    let config = ClientOpts::new(&n.ca).tls12_only().session_id_only().build();
    assert_eq!(handshake_and_request(port, &config), Some(HandshakeKind::Full));
    assert_eq!(
        handshake_and_request(port, &config),
        Some(HandshakeKind::Resumed),
        "TLS 1.2 session id: the second handshake was not resumed"
    );
    assert_eq!(proxy.stop(), 0);

    // Both off: nothing to resume from.
    let port = free_port();
    let tls = format!("{}\nsession_tickets = false\nsession_cache = 0", certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &https_config(port, &backend.target(), "", &tls), 1);
    for opts in [
        ClientOpts::new(&n.ca).tls13_only().resume(),
        ClientOpts::new(&n.ca).tls12_only().resume(),
    ] {
        let config = opts.build();
        assert_eq!(handshake_and_request(port, &config), Some(HandshakeKind::Full));
        assert_eq!(
            handshake_and_request(port, &config),
            Some(HandshakeKind::Full),
            "resumed with session_tickets = false and session_cache = 0"
        );
    }
}

#[test]
fn tickets_issued_by_one_worker_resume_on_the_other() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&n.pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 2);
    for (what, opts) in [
        ("TLS 1.3", ClientOpts::new(&n.ca).tls13_only().resume()),
        ("TLS 1.2", ClientOpts::new(&n.ca).tls12_only().resume()),
    ] {
        let config = opts.build();
        assert_eq!(
            handshake_and_request(port, &config),
            Some(HandshakeKind::Full),
            "{what}"
        );
        // Fresh connections from new source ports: SO_REUSEPORT spreads them over both workers,
        // and every one must resume.
        for i in 0..8 {
            assert_eq!(
                handshake_and_request(port, &config),
                Some(HandshakeKind::Resumed),
                "{what}: resumption {i} was a full handshake"
            );
        }
    }
}

#[test]
fn requests_over_tls_carry_x_forwarded_proto_https_and_large_bodies_arrive_whole() {
    let backend = HttpBackend::start(Reply::Echo);
    let download = HttpBackend::start(Reply::ChunkedDownload(3 * 1024 * 1024 + 17));
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let routes = format!(
        "[[listeners.web.routes]]\nmatch = {{ path_prefix = \"/big\" }}\nupstream = \"big\"\n\n\
         [[listeners.web.routes]]\nupstream = \"app\"\n\n[upstreams.big]\ntargets = [\"{}\"]\n",
        download.target()
    );
    let cfg = format!(
        "{}\n{routes}",
        https_config(port, &backend.target(), "", &certificates(&n.pairs))
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let client = ClientOpts::new(&n.ca).build();
    let mut conn = handshake(port, &client, "a.example.com").unwrap();
    for _ in 0..3 {
        get_ok(&mut conn, "a.example.com");
        let head = backend.next_head().to_ascii_lowercase();
        assert!(head.contains("\r\nx-forwarded-proto: https\r\n"), "{head}");
        assert!(head.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"), "{head}");
    }
    let big = request(&mut conn, &get_host("/big", "a.example.com")).unwrap();
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 3 * 1024 * 1024 + 17);
    assert!(big.body.iter().all(|b| *b == b'x'));
    // The connection goes on after the large response.
    get_ok(&mut conn, "a.example.com");
}

#[test]
fn the_access_log_records_version_cipher_sni_and_alpn() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let (tls_port, alt_port, plain_port) = (free_port(), free_port(), free_port());
    let json = dir.path().join("access.json");
    let combined = dir.path().join("access.log");
    let plain_json = dir.path().join("plain.json");
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{tls_port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{}\", format = \"json\" }}\n\n[listeners.web.tls]\n{}\n\n\
         [listeners.alt]\nbind = \"127.0.0.1:{alt_port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{}\", format = \"combined\" }}\n\n[listeners.alt.tls]\n{}\n\n\
         [listeners.plain]\nbind = \"127.0.0.1:{plain_port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{}\", format = \"json\" }}\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        json.display(),
        certificates(&n.pairs),
        combined.display(),
        certificates(&n.pairs),
        plain_json.display(),
        backend.target()
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);

    // TLS 1.3 with SNI and ALPN.
    let with_alpn = ClientOpts::new(&n.ca).tls13_only().alpn(&["http/1.1"]).build();
    let mut conn = handshake(tls_port, &with_alpn, "a.example.com").unwrap();
    let suite13 = suite_name(&conn);
    get_ok(&mut conn, "a.example.com");
    let lines = log_lines_once(&json, "the TLS 1.3 request is logged", |l| {
        l.contains("\"tls_version\":\"TLSv1.3\"")
    });
    let line = lines
        .iter()
        .find(|l| l.contains("\"tls_version\":\"TLSv1.3\""))
        .unwrap();
    assert!(line.contains(&format!("\"tls_cipher\":\"{suite13}\"")), "{line}");
    assert!(line.contains("\"tls_sni\":\"a.example.com\""), "{line}");
    assert!(line.contains("\"tls_alpn\":\"http/1.1\""), "{line}");

    // TLS 1.2, no SNI, no ALPN.
    let plain12 = ClientOpts::new(&n.ca).tls12_only().any_name().build();
    let mut conn = handshake(tls_port, &plain12, "127.0.0.1").unwrap();
    let suite12 = suite_name(&conn);
    get_ok(&mut conn, "127.0.0.1");
    let lines = log_lines_once(&json, "the TLS 1.2 request is logged", |l| {
        l.contains("\"tls_version\":\"TLSv1.2\"")
    });
    let line = lines
        .iter()
        .find(|l| l.contains("\"tls_version\":\"TLSv1.2\""))
        .unwrap();
    assert!(line.contains(&format!("\"tls_cipher\":\"{suite12}\"")), "{line}");
    assert!(line.contains("\"tls_sni\":null"), "{line}");
    assert!(line.contains("\"tls_alpn\":null"), "{line}");

    // A plain listener: all four null.
    let mut plain = connect(plain_port);
    assert_eq!(common::http::send(&mut plain, &common::http::get("/plain")).0, 200);
    let lines = log_lines_once(&plain_json, "the plain request is logged", |l| l.contains("/plain"));
    let line = lines.iter().find(|l| l.contains("/plain")).unwrap();
    for field in ["tls_version", "tls_cipher", "tls_sni", "tls_alpn"] {
        assert!(line.contains(&format!("\"{field}\":null")), "{field}: {line}");
    }

    // Combined: ` tls=VERSION/CIPHER sni=NAME alpn=PROTO`, `-` for what is absent.
    let mut conn = handshake(alt_port, &with_alpn, "b.example.com").unwrap();
    let suite = suite_name(&conn);
    get_ok(&mut conn, "b.example.com");
    let mut conn = handshake(alt_port, &plain12, "127.0.0.1").unwrap();
    let suite12 = suite_name(&conn);
    get_ok(&mut conn, "127.0.0.1");
    let lines = log_lines_once(&combined, "both combined lines are written", |l| l.contains("TLSv1.2"));
    let first = format!(" tls=TLSv1.3/{suite} sni=b.example.com alpn=http/1.1");
    let second = format!(" tls=TLSv1.2/{suite12} sni=- alpn=-");
    assert!(
        lines.iter().any(|l| l.contains(&first)),
        "no line with {first:?}: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(&second)),
        "no line with {second:?}: {lines:#?}"
    );
}

#[test]
fn the_http_command_line_serves_several_certificates_by_sni() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let n = names(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (a_cert, a_key) = &n.pairs[1];
    let (w_cert, w_key) = &n.pairs[0];
    let target = backend.target();
    let _proxy = Rampart::start(
        dir.path(),
        &[
            "http",
            "--listen",
            &listen,
            "--to",
            &target,
            "--tls-cert",
            a_cert,
            "--tls-key",
            a_key,
            "--tls-cert",
            w_cert,
            "--tls-key",
            w_key,
            "--workers",
            "1",
        ],
    );
    let all = [&n.a, &n.wild];
    let client = ClientOpts::new(&n.ca).alpn(&["http/1.1"]).build();
    let mut conn = handshake(port, &client, "a.example.com").unwrap();
    assert_eq!(served(&conn, &all), Some(0));
    assert_eq!(conn.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    get_ok(&mut conn, "a.example.com");
    assert!(backend
        .next_head()
        .to_ascii_lowercase()
        .contains("\r\nx-forwarded-proto: https\r\n"));
    let mut conn = handshake(port, &client, "z.example.com").unwrap();
    assert_eq!(served(&conn, &all), Some(1));
    get_ok(&mut conn, "z.example.com");
    // No SNI: the first pair given.
    let any_name = ClientOpts::new(&n.ca).any_name().build();
    let conn = handshake(port, &any_name, "127.0.0.1").unwrap();
    assert_eq!(served(&conn, &all), Some(0));
}

#[test]
fn keys_in_pkcs1_rsa_and_sec1_ec_form_are_loaded() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Rampart Test CA");
    let rsa = ca.issue(&CertSpec::new(&["rsa.example.com"]).rsa());
    let ec = ca.issue(&CertSpec::new(&["ec.example.com"]));
    let rsa_key = rsa.traditional_key_pem();
    let ec_key = ec.traditional_key_pem();
    assert!(rsa_key.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert!(ec_key.starts_with("-----BEGIN EC PRIVATE KEY-----"));
    let pairs = vec![
        (
            write_file(dir.path(), "rsa.pem", &rsa.chain_pem()),
            write_file(dir.path(), "rsa.key", &rsa_key),
        ),
        (
            write_file(dir.path(), "ec.pem", &ec.chain_pem()),
            write_file(dir.path(), "ec.key", &ec_key),
        ),
    ];
    let port = free_port();
    let cfg = https_config(port, &backend.target(), "", &certificates(&pairs));
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let client = ClientOpts::new(&ca).build();
    for (name, cert) in [("rsa.example.com", &rsa), ("ec.example.com", &ec)] {
        let mut conn = handshake(port, &client, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(served(&conn, &[cert]), Some(0), "{name}");
        get_ok(&mut conn, name);
    }
}

#[test]
fn a_redirect_route_sends_plain_http_clients_to_https() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/moved\" }}\nredirect = {{ scheme = \"https\", status = 308 }}\n\n\
         [[listeners.web.routes]]\nredirect = {{ scheme = \"https\" }}\n"
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let mut client = connect(port);
    let (status, head, _) = common::http::send(
        &mut client,
        b"GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: shop.example:8080\r\n\r\n",
    );
    assert_eq!(status, 301, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nlocation: https://shop.example/a/b?x=1&y=2\r\n"),
        "{head}"
    );
    let (status, head, _) = common::http::send(&mut client, b"GET /moved HTTP/1.1\r\nHost: shop.example\r\n\r\n");
    assert_eq!(status, 308, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nlocation: https://shop.example/moved\r\n"),
        "{head}"
    );
}
