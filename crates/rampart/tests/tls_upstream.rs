//! TLS to upstreams: verification against a CA (and its failures: 502, `upstream_tls`), the SNI
//! sent (explicit, the target's host name, none for an IP), `verify = false`, a client
//! certificate, and HTTP health checks over TLS.

use crate::common;

use std::path::Path;

use common::http::{HttpBackend, Reply};
use common::tls::*;
use common::*;

/// A plain HTTP listener `web` (JSON access log `access.json` in `dir`) to upstream `app` over
/// `targets`, with `upstream_tls` lines in `[upstreams.app.tls]` and `extra` appended.
fn gateway(dir: &Path, targets: &[String], upstream_tls: &str, extra: &str) -> (Rampart, u16) {
    let port = free_port();
    let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"{}\", format = \"json\" }}\n\n\
         [upstreams.app]\ntargets = [{}]\n\n[upstreams.app.tls]\n{upstream_tls}\n{extra}\n",
        dir.join("access.json").display(),
        list.join(", ")
    );
    let (proxy, _) = start_config(dir, &cfg, 1);
    (proxy, port)
}

fn get(port: u16, path: &str) -> (u16, String, Vec<u8>) {
    let mut client = connect(port);
    common::http::send(&mut client, &common::http::get(path))
}

#[test]
fn a_verified_upstream_gets_the_configured_sni_and_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let backend = TlsBackend::start("secure", &ca.issue(&CertSpec::new(&["backend.example.com"])));
    let ca_path = ca.write(dir.path(), "ca.pem");
    let tls = format!("sni = \"backend.example.com\"\nca = \"{ca_path}\"\nalpn = [\"http/1.1\"]");
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], &tls, "");
    let mut client = connect(port);
    for i in 0..3 {
        let (status, _, body) = common::http::send(&mut client, &common::http::get(&format!("/item/{i}")));
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "request {i} on one client connection: {body}");
        assert!(body.starts_with("secure\nGET /item/"), "{body}");
    }
    let seen = backend.next_handshake();
    assert_eq!(seen.sni.as_deref(), Some("backend.example.com"));
    assert_eq!(seen.alpn.as_deref(), Some("http/1.1"));
    assert!(!seen.client_cert);
    let head = backend.next_head().to_ascii_lowercase();
    assert!(head.contains("\r\nx-forwarded-proto: http\r\n"), "{head}");
}

/// `protocol = "auto"` to a backend that speaks only HTTP/1.1: ALPN offers h2 and http/1.1, the
/// backend takes http/1.1, and requests go over HTTP/1.1 text (the connection pooled between
/// them).
#[test]
fn auto_speaks_http1_to_a_backend_that_chose_it_by_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let backend = TlsBackend::start("secure", &ca.issue(&CertSpec::new(&["backend.example.com"])));
    let ca_path = ca.write(dir.path(), "ca.pem");
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\nprotocol = \"auto\"\n\n\
         [upstreams.app.tls]\nsni = \"backend.example.com\"\nca = \"{ca_path}\"\n",
        backend.target()
    );
    let (_proxy, _) = start_config(dir.path(), &cfg, 1);
    let mut client = connect(port);
    for i in 0..3 {
        let (status, _, body) = common::http::send(&mut client, &common::http::get(&format!("/auto/{i}")));
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "request {i}: {body}");
        assert!(body.starts_with(&format!("secure\nGET /auto/{i} HTTP/1.1")), "{body}");
    }
    let seen = backend.next_handshake();
    assert_eq!(seen.alpn.as_deref(), Some("http/1.1"));
}

#[test]
fn an_upstream_certificate_that_fails_verification_gives_502_and_upstream_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let other = Ca::new("Another CA");
    let backend = TlsBackend::start("secure", &ca.issue(&CertSpec::new(&["backend.example.com"])));
    for (what, tls) in [
        (
            "an untrusted CA",
            format!(
                "sni = \"backend.example.com\"\nca = \"{}\"",
                other.write(dir.path(), "other.pem")
            ),
        ),
        (
            "a name the certificate does not have",
            format!(
                "sni = \"elsewhere.example.com\"\nca = \"{}\"",
                ca.write(dir.path(), "ca.pem")
            ),
        ),
    ] {
        let _ = std::fs::remove_file(dir.path().join("access.json"));
        let (mut proxy, port) = gateway(dir.path(), &[backend.target()], &tls, "");
        let (status, head, _) = get(port, "/refused");
        assert_eq!(status, 502, "{what}: {head}");
        let lines = log_lines_once(&dir.path().join("access.json"), "the 502 is logged", |l| {
            l.contains("/refused")
        });
        let line = lines.iter().find(|l| l.contains("/refused")).unwrap();
        assert!(line.contains("\"error\":\"upstream_tls\""), "{what}: {line}");
        assert!(
            backend.heads.try_recv().is_err(),
            "{what}: a request went to the upstream"
        );
        assert_eq!(proxy.stop(), 0);
    }
}

#[test]
fn the_default_sni_is_the_targets_host_name_and_none_for_an_ip_address() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let ca_path = ca.write(dir.path(), "ca.pem");
    let by_name = TlsBackend::start("named", &ca.issue(&CertSpec::new(&["localhost"])));
    let (mut proxy, port) = gateway(
        dir.path(),
        &[format!("localhost:{}", by_name.port())],
        &format!("ca = \"{ca_path}\""),
        "",
    );
    let (status, _, body) = get(port, "/");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(by_name.next_handshake().sni.as_deref(), Some("localhost"));
    assert_eq!(proxy.stop(), 0);

    let by_ip = TlsBackend::start("ip", &ca.issue(&CertSpec::new(&["127.0.0.1"])));
    let (_proxy, port) = gateway(dir.path(), &[by_ip.target()], &format!("ca = \"{ca_path}\""), "");
    let (status, _, body) = get(port, "/");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(by_ip.next_handshake().sni, None, "SNI sent to an IP address target");
}

#[test]
fn verify_false_accepts_any_certificate_with_a_warning_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = Ca::new("Nobody Trusts This CA");
    let backend = TlsBackend::start("unverified", &unknown.issue(&CertSpec::new(&["whatever.test"])));
    let (proxy, port) = gateway(dir.path(), &[backend.target()], "verify = false", "");
    let (status, _, body) = get(port, "/");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).starts_with("unverified\n"));
    assert!(
        proxy.log.iter().any(|l| l.contains("verif") && l.contains("app")),
        "no warning about upstream app's verify = false: {:#?}",
        proxy.log
    );
}

#[test]
fn an_upstream_that_requires_a_client_certificate_gets_the_configured_one() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let client_ca = Ca::new("Proxy Client CA");
    let backend = TlsBackend::start_with(
        "mtls",
        &ca.issue(&CertSpec::new(&["backend.example.com"])),
        Some(&client_ca),
    );
    let ca_path = ca.write(dir.path(), "ca.pem");
    let base = format!("sni = \"backend.example.com\"\nca = \"{ca_path}\"");

    // Without a client certificate the upstream refuses the handshake: 502.
    let (mut proxy, port) = gateway(dir.path(), &[backend.target()], &base, "");
    assert_eq!(get(port, "/").0, 502);
    assert!(backend.heads.try_recv().is_err());
    assert_eq!(proxy.stop(), 0);

    let (cert, key) = client_ca
        .issue(&CertSpec::new(&["proxy.example.com"]))
        .write(dir.path(), "proxy-client");
    let tls = format!("{base}\ncert = \"{cert}\"\nkey = \"{key}\"");
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], &tls, "");
    let (status, _, body) = get(port, "/");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // The refused handshake above was reported first; find the accepted one.
    let seen = std::iter::from_fn(|| backend.handshakes.recv_timeout(WAIT).ok())
        .find(|h| h.client_cert)
        .expect("a handshake with a client certificate");
    assert_eq!(seen.sni.as_deref(), Some("backend.example.com"));
}

#[test]
fn http_health_checks_over_tls_take_a_plain_backend_down_and_keep_a_tls_one_up() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Upstream CA");
    let secure = TlsBackend::start("secure", &ca.issue(&CertSpec::new(&["backend.example.com"])));
    let plain = HttpBackend::start(Reply::Echo);
    let tls = format!(
        "sni = \"backend.example.com\"\nca = \"{}\"",
        ca.write(dir.path(), "ca.pem")
    );
    let check = "[upstreams.app.health_check]\nhttp_path = \"/health\"\ninterval = \"100ms\"\ntimeout = \"1s\"\nfall = 1\nrise = 1\n";
    let (mut proxy, port) = gateway(dir.path(), &[secure.target(), plain.target()], &tls, check);
    proxy.wait_for(&format!("target={} state=down", plain.target()));
    // The TLS backend is checked over TLS with the configured request.
    let health = std::iter::from_fn(|| secure.heads.recv_timeout(WAIT).ok())
        .find(|h| h.starts_with("GET /health HTTP/1.1\r\n"))
        .expect("a health check request over TLS");
    assert!(health.to_ascii_lowercase().contains("\r\nhost: "), "{health}");
    // Every request goes to the healthy TLS backend; the plain one never gets one.
    for i in 0..6 {
        let (status, _, body) = get(port, &format!("/req/{i}"));
        assert_eq!(status, 200, "request {i}: {}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).starts_with("secure\n"));
    }
    assert!(
        plain.heads.try_iter().all(|h| !h.contains("/req/")),
        "a request went to the plain backend"
    );
    assert!(
        !proxy
            .log
            .iter()
            .any(|l| l.contains(&format!("target {} is down", secure.target()))),
        "{:#?}",
        proxy.log
    );
}
