//! Certificates from a real ACME CA: Pebble (in `-strict` mode) issues a certificate for a name a
//! TLS listener lists in `acme = [...]`, validating it by HTTP-01 against Rampart's own HTTP
//! listener; a client then verifies it against Pebble's root. A restart serves the certificate
//! kept on disk and orders nothing.

use crate::common;

use std::io::{Read, Write};

use common::dns::DnsServer;
use common::pebble::{get_verified, Pebble};
use common::tls::{handshake, ClientOpts};
use common::{free_port, write_file, Rampart};

/// A config with an HTTP listener on `http` (none when 0) and an HTTPS one on `https` whose
/// certificate for `a.fleet.test` comes from `pebble`; `acme_extra` goes into `[acme]`.
fn config(pebble: &Pebble, http: u16, https: u16, acme_extra: &str) -> String {
    let plain = match http {
        0 => String::new(),
        port => format!(
            "[listeners.plain]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
             [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n"
        ),
    };
    format!(
        "[acme]\ndirectory = \"{}\"\nemail = \"ops@fleet.test\"\nca = \"{}\"\nstorage = \"acme\"\n{acme_extra}\n\n\
         {plain}\
         [listeners.secure]\nbind = \"127.0.0.1:{https}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [\"a.fleet.test\"]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n",
        pebble.directory(),
        pebble.api_ca.display()
    )
}

/// The next line saying how an order for `name` ended (not that it started).
fn order_ended(proxy: &mut Rampart, name: &str) -> String {
    loop {
        let line = proxy.wait_for(&format!("acme: {name}: "));
        if !line.contains("ordering a certificate") {
            return line;
        }
    }
}

#[test]
fn http_01_gets_a_certificate_a_client_verifies_and_a_restart_keeps_it() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let admin = free_port();
    let text = config(&pebble, http, https, "") + &format!("\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    let path = write_file(dir.path(), "acme.toml", &text);
    let started = std::time::Instant::now();
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let issued = proxy.wait_for("certificate issued");
    assert!(issued.contains("a.fleet.test"), "{issued}");
    // The expiry as a date (RFC 3339), Pebble's five years ahead.
    let until = issued
        .split(" valid until ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next());
    assert!(
        until.is_some_and(|date| date.starts_with("20") && date.ends_with('Z') && date.contains('T')),
        "{issued}"
    );
    let root = pebble.issuing_root();
    assert_eq!(get_verified(https, &root, "a.fleet.test"), "secure");
    eprintln!("cold start to a verified handshake: {:?}", started.elapsed());
    // The name's state in /api/status, its expiry in /metrics.
    let (_, status) = common::admin(admin, "GET", "/api/status", None);
    let name = &status["acme"]["names"][0];
    assert_eq!(
        (name["name"].as_str(), name["state"].as_str()),
        (Some("a.fleet.test"), Some("valid")),
        "{status}"
    );
    let not_after = name["not_after"].as_u64().unwrap();
    assert!(name["renew_at"].as_u64().unwrap() < not_after);
    let samples = common::scrape::scrape(admin);
    let expiry = common::scrape::value(
        &samples,
        "rampart_tls_certificate_expiry_timestamp_seconds",
        &[("listener", "secure"), ("certificate", "acme:a.fleet.test")],
    );
    assert_eq!(expiry as u64, not_after);
    assert_eq!(
        common::scrape::value(&samples, "rampart_acme_failures", &[("name", "a.fleet.test")]),
        0.0
    );
    // The challenge route answers only pending tokens.
    let mut plain = common::connect(http);
    let (status, _, _) = common::http::send(
        &mut plain,
        b"GET /.well-known/acme-challenge/nothing HTTP/1.1\r\nHost: a.fleet.test\r\n\r\n",
    );
    assert_eq!(status, 404);
    proxy.stop();

    // A restart serves the kept certificate and places no new order.
    let orders_before = pebble.log().matches("POST /order-plz").count();
    assert_eq!(orders_before, 1, "one order so far: {}", pebble.log());
    let mut again = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    again.wait_for("serving the certificate kept");
    assert_eq!(get_verified(https, &root, "a.fleet.test"), "secure");
    again.stop();
    assert!(
        !again.log.join("\n").contains("certificate issued"),
        "{}",
        again.log.join("\n")
    );
    assert_eq!(
        pebble.log().matches("POST /order-plz").count(),
        orders_before,
        "{}",
        pebble.log()
    );
}

#[test]
fn tls_alpn_01_is_answered_in_the_tls_listeners_certificate_choice() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let https = free_port();
    // Nothing listens on the HTTP-01 port: only TLS-ALPN-01 can succeed.
    let pebble = Pebble::start(free_port(), https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        dir.path(),
        "acme.toml",
        &config(&pebble, 0, https, "challenge = \"tls-alpn-01\""),
    );
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    // A client that offers acme-tls/1 among others is an ordinary client: h2 or http/1.1.
    let client = ClientOpts::with_roots(&pebble.issuing_root())
        .alpn(&["acme-tls/1", "http/1.1"])
        .build();
    let tls = handshake(https, &client, "a.fleet.test").expect("an ordinary handshake");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    proxy.stop();
}

#[test]
fn a_short_lived_certificate_is_renewed_under_steady_tls_load_without_a_failed_handshake() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    // Valid for 12 s: renewed at two thirds, 8 s after it was issued.
    let pebble = Pebble::start_with(http, https, &dns, 0, Some(12), &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "acme.toml", &config(&pebble, http, https, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    let root = pebble.issuing_root();
    let client = ClientOpts::with_roots(&root).build();
    let leaf = |tls: &common::tls::TlsStream| tls.conn.peer_certificates().unwrap()[0].clone();
    let first = leaf(&handshake(https, &client, "a.fleet.test").unwrap());
    // Handshakes and requests one after another until the served certificate changes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut handshakes = 0;
    loop {
        let mut tls = handshake(https, &client, "a.fleet.test").expect("every handshake succeeds");
        handshakes += 1;
        let changed = leaf(&tls) != first;
        write!(tls, "GET / HTTP/1.1\r\nHost: a.fleet.test\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = tls.read_to_string(&mut answer);
        assert!(answer.ends_with("secure"), "{answer}");
        if changed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not renewed within 30 s");
    }
    eprintln!("renewed after {handshakes} verified handshakes, none failed");
    let renewed = proxy.wait_for("certificate issued");
    assert!(renewed.contains("a.fleet.test"), "{renewed}");
    proxy.stop();
}

#[test]
fn rejected_nonces_and_a_failed_validation_end_in_a_certificate_with_nothing_else_disturbed() {
    // No address for the name yet: the CA's validation fails until the record is added.
    let dns = DnsServer::start("other 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    // Pebble refuses 30% of nonces (instant-acme asks again).
    let pebble = Pebble::start(http, https, &dns, 30);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "acme.toml", &config(&pebble, http, https, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let failed = order_ended(&mut proxy, "a.fleet.test");
    assert!(failed.contains("trying again in"), "{failed}");
    // The HTTP listener serves on meanwhile.
    let mut plain = common::connect(http);
    let (status, _, body) = common::http::send(&mut plain, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((status, body.as_slice()), (200, &b"plain"[..]));
    dns.update(&["add a.fleet.test. 60 A 127.0.0.1"]);
    let issued = proxy.wait_for("certificate issued");
    assert!(issued.contains("a.fleet.test"), "{issued}");
    // The expiry as a date (RFC 3339), Pebble's five years ahead.
    let until = issued
        .split(" valid until ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next());
    assert!(
        until.is_some_and(|date| date.starts_with("20") && date.ends_with('Z') && date.contains('T')),
        "{issued}"
    );
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    proxy.stop();
}

#[test]
fn a_ca_out_of_reach_or_a_name_it_refuses_is_said_plainly() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start_with(http, https, &dns, 0, None, &["fleet.test"]);
    let dir = tempfile::tempdir().unwrap();

    // A name the CA will not issue for: its error, in the log, and serving goes on.
    let path = write_file(dir.path(), "acme.toml", &config(&pebble, http, https, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let refused = order_ended(&mut proxy, "a.fleet.test");
    assert!(
        refused.contains("rejectedIdentifier") || refused.contains("blocked"),
        "{refused}"
    );
    assert!(refused.contains("trying again in"), "{refused}");
    let mut plain = common::connect(http);
    assert_eq!(
        common::http::send(&mut plain, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").0,
        200
    );
    proxy.stop();

    // A directory nobody answers at.
    let nowhere = format!("https://127.0.0.1:{}/dir", free_port());
    let text = config(&pebble, http, https, "").replace(&pebble.directory(), &nowhere);
    let path = write_file(dir.path(), "nowhere.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let failed = order_ended(&mut proxy, "a.fleet.test");
    assert!(failed.contains(&format!("ACME directory {nowhere}")), "{failed}");
    proxy.stop();

    // The config's etcd as the store, with a config that does not come from etcd.
    let text = config(&pebble, http, https, "").replace("storage = \"acme\"", "storage = \"etcd\"");
    let path = write_file(dir.path(), "etcd.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let failed = order_ended(&mut proxy, "a.fleet.test");
    assert!(failed.contains("run with `rampart run --etcd URL`"), "{failed}");
    proxy.stop();

    // A bad table is refused before anything starts.
    let text = config(&pebble, http, https, "challenge = \"carrier-pigeon-01\"");
    let path = write_file(dir.path(), "bad.toml", &text);
    let (code, _, err) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains("bad.toml:6:13: unknown challenge `carrier-pigeon-01`"),
        "{err}"
    );
}

#[test]
fn one_command_line_gets_its_certificate_and_redirects_port_80() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let backend = common::http::HttpBackend::start(common::http::Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nbackend",
    ));
    let dir = tempfile::tempdir().unwrap();
    let (listen, to, http_at) = (
        format!("127.0.0.1:{https}"),
        backend.target(),
        format!("127.0.0.1:{http}"),
    );
    let directory = pebble.directory();
    let ca = pebble.api_ca.display().to_string();
    let args = [
        "http",
        "--listen",
        &listen,
        "--to",
        &to,
        "--acme-domain",
        "a.fleet.test",
        "--acme-directory",
        &directory,
        "--acme-ca",
        &ca,
        "--acme-storage",
        "acme",
        "--acme-http",
        &http_at,
        "--workers",
        "1",
    ];
    let mut proxy = Rampart::start(dir.path(), &args);
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "backend");
    // To the HTTPS listener's port, which is not 443 here.
    assert_redirects_to_https(http, https);
    proxy.stop();
}

#[test]
fn a_plain_listener_with_no_routes_answers_the_ca_and_redirects_the_rest_to_https() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    // As docs/tls.md shows it: a plain listener with nothing but `bind` and `protocol`.
    let text = config(&pebble, 0, https, "")
        + &format!("\n[listeners.plain]\nbind = \"127.0.0.1:{http}\"\nprotocol = \"http\"\n");
    let path = write_file(dir.path(), "acme.toml", &text);
    let (code, _, stderr) = common::run_rampart(dir.path(), &["check", &path]);
    assert_eq!(code, 0, "{stderr}");
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    assert_redirects_to_https(http, https);
    proxy.stop();
}

/// A plain request for `a.fleet.test` on port `http` gets a 301 to the same path and query on the
/// HTTPS port `https`.
fn assert_redirects_to_https(http: u16, https: u16) {
    let mut plain = common::connect(http);
    let (status, head, _) = common::http::send(&mut plain, b"GET /x?y=1 HTTP/1.1\r\nHost: a.fleet.test\r\n\r\n");
    assert_eq!(status, 301, "{head}");
    let location = format!("https://a.fleet.test:{https}/x?y=1");
    assert_eq!(common::http::header(&head, "location"), Some(location.as_str()));
}

#[test]
fn several_names_are_ordered_at_once_up_to_the_limit() {
    let dns = DnsServer::start("n1 60 IN A 127.0.0.1\nn2 60 IN A 127.0.0.1\nn3 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let text = config(&pebble, http, https, "max_concurrent_orders = 2").replace(
        "acme = [\"a.fleet.test\"]",
        "acme = [\"n1.fleet.test\", \"n2.fleet.test\", \"n3.fleet.test\"]",
    );
    let path = write_file(dir.path(), "acme.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    for _ in 0..3 {
        proxy.wait_for("certificate issued");
    }
    proxy.stop();
    // Two orders start before any ends; the third waits for a slot.
    let events: Vec<&str> = proxy
        .log
        .iter()
        .filter_map(|l| {
            if l.contains("ordering a certificate") {
                Some("ordering")
            } else if l.contains("certificate issued") {
                Some("issued")
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        events[..4],
        ["ordering", "ordering", "issued", "ordering"],
        "{}",
        proxy.log.join("\n")
    );
    assert_eq!(pebble.log().matches("POST /order-plz").count(), 3);
}

#[test]
fn a_binary_upgrade_keeps_the_account_and_the_certificate() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "acme.toml", &config(&pebble, http, https, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    let (code, out, err) = common::run_rampart(dir.path(), &["upgrade", "--pid", &proxy.pid().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    // "rampart upgrade: process N serves now"
    let new_pid: i32 = out
        .split_whitespace()
        .skip_while(|w| *w != "process")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no PID in {out:?}"));
    // The new process writes to the same standard error.
    proxy.wait_for("serving the certificate kept");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    assert_eq!(pebble.log().matches("POST /order-plz").count(), 1, "no new order");
    assert_eq!(pebble.log().matches("POST /sign-me-up").count(), 1, "no new account");
    // SAFETY: a signal to the process the upgrade started, which this test owns.
    unsafe { libc::kill(new_pid, libc::SIGTERM) };
    proxy.wait_exit();
}

/// An `ask` endpoint: 200 for `domain=yes...`, 403 for anything else; counts the questions.
fn ask_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = asked.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let status = if head.contains("domain=yes") {
                "200 OK"
            } else {
                "403 Forbidden"
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (port, asked)
}

#[test]
fn on_demand_tls_obtains_an_allowed_name_at_its_first_handshake_and_refuses_the_rest() {
    let dns = DnsServer::start("*.od 60 IN A 127.0.0.1");
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(http, https, &dns, 0);
    let (ask, asked) = ask_server();
    let dir = tempfile::tempdir().unwrap();
    let text = config(&pebble, http, https, "").replace(
        "acme = [\"a.fleet.test\"]",
        &format!(
            "acme_on_demand = {{ allow = [\"*.od.fleet.test\"], ask = \"http://127.0.0.1:{ask}/check\", per_minute = 1 }}"
        ),
    );
    let path = write_file(dir.path(), "acme.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let root = pebble.issuing_root();

    // The first handshake for an allowed name waits for its certificate.
    let started = std::time::Instant::now();
    assert_eq!(get_verified(https, &root, "yes.od.fleet.test"), "secure");
    eprintln!("first handshake for a name obtained on demand: {:?}", started.elapsed());
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &root, "yes.od.fleet.test"), "secure");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);

    // The ask URL says no: refused well before the handshake timeout (10 s).
    let client = ClientOpts::with_roots(&root).build();
    let started = std::time::Instant::now();
    assert!(handshake(https, &client, "no.od.fleet.test").is_err());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let refused = proxy.wait_for("not obtained on demand");
    assert!(refused.contains("answered 403"), "{refused}");
    // Allowed by the ask URL, but the rate (1 a minute) is spent.
    assert!(handshake(https, &client, "yes2.od.fleet.test").is_err());
    let refused = proxy.wait_for("not obtained on demand");
    assert!(refused.contains("a minute"), "{refused}");
    // Not covered by `allow`: refused at once, nobody asked.
    let before = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(handshake(https, &client, "elsewhere.fleet.test").is_err());
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), before);
    assert_eq!(pebble.log().matches("POST /order-plz").count(), 1, "one order");
    proxy.stop();
}
