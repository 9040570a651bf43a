//! Targets written by name, resolved by a real DNS server (BIND 9) whose records the tests
//! change while traffic flows: addresses join and leave without a reload, none of the requests
//! fails, a name with no address answers 503, and a server that stops answering leaves the last
//! answer in use and the upstream degraded after the grace period.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::dns::DnsServer;
use common::http::{read_response, HttpBackend, Reply};
use common::load::{two_backends, Load};
use common::{free_port, write_file, Rampart, WAIT};

/// Upstream `app` in `/api/upstreams` once `ok` holds for it (the admin API shows what the
/// control plane stored just after it logged it).
fn upstream_when(admin: u16, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
        let app = upstreams["upstreams"][0].clone();
        if ok(&app) {
            return app;
        }
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {app}");
        thread::sleep(Duration::from_millis(10));
    }
}

fn gateway(dir: &std::path::Path, dns: &DnsServer, global: &str, targets: &str) -> (Rampart, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let cfg = format!(
        "[global]\n{}\n{global}\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{targets}]\n",
        dns.resolvers()
    );
    let path = write_file(dir, "dns.toml", &cfg);
    (
        Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]),
        port,
        admin,
    )
}

#[test]
fn addresses_join_and_leave_with_their_records_while_traffic_flows() {
    let (backend_port, _a, _b) = two_backends();
    let dns = DnsServer::start("api 1 IN A 127.0.0.2");
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{{ dns = \"api.fleet.test\", port = {backend_port} }}");
    let (mut proxy, port, admin) = gateway(dir.path(), &dns, "", &target);
    let mut load = Load::start(&[port]);
    load.wait_until(0, "the first answer", |seen| seen.iter().any(|s| s == "A"));

    // A second address: both take requests within the record's TTL (1 s) + 1 s.
    let from = load.count();
    dns.update(&["add api.fleet.test. 1 A 127.0.0.3"]);
    let joined = load.wait_until(from, "127.0.0.3 takes requests", |seen| seen.iter().any(|s| s == "B"));
    assert!(joined <= Duration::from_secs(2), "an added address took {joined:?}");
    let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
    let app = &upstreams["upstreams"][0];
    assert_eq!(app["dns"][0]["target"], format!("dns+api.fleet.test:{backend_port}"));
    assert_eq!(app["dns"][0]["state"], "resolved");
    assert_eq!(app["targets"].as_array().unwrap().len(), 2, "{app}");

    // The first address leaves: it drains, and gets nothing new after the TTL + 1 s.
    dns.update(&["delete api.fleet.test. A 127.0.0.2"]);
    let removed_at = load.count();
    let left = load.wait_until(removed_at, "127.0.0.2 leaves", |seen| {
        let last_a = seen.iter().rposition(|s| s == "A");
        seen.len() - last_a.map_or(0, |i| i + 1) >= 50
    });
    assert!(
        left <= Duration::from_secs(3),
        "a removed address took {left:?} to leave"
    );
    eprintln!("an added address took {joined:?} to take requests; a removed one {left:?} to leave (50 answers after)");
    let answers = load.finish();
    let failed: Vec<&String> = answers.iter().filter(|s| *s != "A" && *s != "B").collect();
    assert!(failed.is_empty(), "failed requests: {failed:?}");
    proxy.stop();
    let log = proxy.log.join("\n");
    assert!(!log.contains("reloaded"), "no reload: {log}");
    assert!(log.contains("dns: dns+api.fleet.test"), "{log}");
}

#[test]
fn srv_records_give_ports_priorities_and_weights() {
    let (one, two) = (
        HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1")),
        HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2")),
    );
    let records = format!(
        "one 1 IN A 127.0.0.1\ntwo 1 IN A 127.0.0.1\n\
         _http._tcp.api 1 IN SRV 10 3000 {} one\n_http._tcp.api 1 IN SRV 20 600 {} two",
        one.addr.port(),
        two.addr.port()
    );
    let dns = DnsServer::start(&records);
    let dir = tempfile::tempdir().unwrap();
    let (mut proxy, port, admin) = gateway(dir.path(), &dns, "", "\"srv+_http._tcp.api.fleet.test\"");
    let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
    let targets = upstreams["upstreams"][0]["targets"].as_array().unwrap().clone();
    let shown: Vec<(String, u64, bool)> = targets
        .iter()
        .map(|t| {
            (
                t["address"].as_str().unwrap().to_string(),
                t["weight"].as_u64().unwrap(),
                t["backup"].as_bool().unwrap(),
            )
        })
        .collect();
    let mut want = vec![(one.target(), 1000, false), (two.target(), 200, true)];
    want.sort();
    let mut shown_sorted = shown.clone();
    shown_sorted.sort();
    assert_eq!(
        shown_sorted, want,
        "the SRV weights scaled to 1..1000, the later priority a backup"
    );

    let mut load = Load::start(&[port]);
    load.wait_until(0, "ten answers", |seen| seen.len() >= 10);
    // The first priority gone, the backup takes the traffic.
    dns.update(&[&format!(
        "delete _http._tcp.api.fleet.test. SRV 10 3000 {} one.fleet.test.",
        one.addr.port()
    )]);
    let from = load.count();
    load.wait_until(from, "the second priority takes over", |seen| {
        seen.len() >= 20 && seen[seen.len() - 20..].iter().all(|s| s == "2")
    });
    let answers = load.finish();
    assert!(answers.iter().all(|s| s == "1" || s == "2"), "{answers:?}");
    assert!(answers[..10].iter().all(|s| s == "1"), "the backup waits: {answers:?}");
    proxy.stop();
}

#[test]
fn no_address_is_503_and_a_silent_server_leaves_the_last_answer_degraded() {
    let backend = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
    let mut dns = DnsServer::start("api 1 IN A 127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let port = backend.addr.port();
    let (proxy, web, admin) = gateway(
        dir.path(),
        &dns,
        "dns_grace = \"1s\"",
        &format!("\"dns+api.fleet.test:{port}\", \"dns+nothing.fleet.test:{port}\""),
    );
    let get = || {
        let mut s = TcpStream::connect(("127.0.0.1", web)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
            .unwrap();
        read_response(&mut s).0
    };
    assert_eq!(get(), 200);
    let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
    let lookups = upstreams["upstreams"][0]["dns"].as_array().unwrap().clone();
    let nothing = lookups
        .iter()
        .find(|l| l["target"].as_str().unwrap().contains("nothing"))
        .unwrap();
    assert_eq!(nothing["addresses"], serde_json::json!([]), "{lookups:?}");

    // A name that is all there is and has no address: 503, not a crash.
    drop(proxy);
    let (mut alone, alone_port, _) = gateway(dir.path(), &dns, "", &format!("\"dns+nothing.fleet.test:{port}\""));
    let mut s = TcpStream::connect(("127.0.0.1", alone_port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).0, 503);
    alone.stop();

    // The server stops answering: the last answer stays in use, then the upstream is degraded.
    let (mut proxy, web, admin) = gateway(
        dir.path(),
        &dns,
        "dns_grace = \"1s\"",
        &format!("\"dns+api.fleet.test:{port}\""),
    );
    dns.stop();
    let get = || {
        let mut s = TcpStream::connect(("127.0.0.1", web)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
            .unwrap();
        read_response(&mut s).0
    };
    proxy.wait_for("degraded");
    let app = upstream_when(admin, |app| app["dns_degraded"] == true);
    assert_eq!(app["dns"][0]["state"], "degraded");
    assert_eq!(get(), 200, "the last answer is still in use");
    let samples = common::scrape::scrape(admin);
    let target = format!("dns+api.fleet.test:{port}");
    let labels = [("upstream", "app"), ("target", target.as_str())];
    assert_eq!(
        common::scrape::value(&samples, "rampart_upstream_dns_degraded", &labels),
        1.0
    );
    assert_eq!(
        common::scrape::value(&samples, "rampart_upstream_dns_addresses", &labels),
        1.0
    );
    // It answers again: no longer degraded.
    dns.run();
    proxy.wait_for("answers again");
    let app = upstream_when(admin, |app| app["dns_degraded"] == false);
    assert_eq!(app["dns"][0]["state"], "resolved");
    assert_eq!(get(), 200);
    proxy.stop();
}

/// A server that answers REFUSED or SERVFAIL says nothing about the name: every request is
/// still served from the last answer, and the name is shown failing, not empty.
#[test]
fn refused_and_servfail_keep_the_last_answer() {
    let backend = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
    let mut dns = DnsServer::start("api 1 IN A 127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let port = backend.addr.port();
    let (mut proxy, web, admin) = gateway(dir.path(), &dns, "", &format!("\"dns+api.fleet.test:{port}\""));
    assert_eq!(get(web), 200);
    for (rcode, break_it) in [
        ("REFUSED", DnsServer::refuse_queries as fn(&mut DnsServer)),
        ("SERVFAIL", DnsServer::break_zone),
    ] {
        break_it(&mut dns);
        let line = proxy.wait_for("cannot resolve dns+api.fleet.test");
        assert!(
            line.contains("keeping its last answer (1 address(es))"),
            "{rcode}: {line}"
        );
        let app = upstream_when(admin, |app| app["dns"][0]["state"] == "failing");
        assert_eq!(
            app["dns"][0]["addresses"].as_array().unwrap().len(),
            1,
            "{rcode}: {app}"
        );
        let error = app["dns"][0]["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains(rcode), "{rcode}: {error}");
        // Asked again meanwhile (every 2 to 5 s): no request fails while the server is broken.
        let statuses: Vec<u16> = (0..50).map(|_| get(web)).collect();
        assert!(statuses.iter().all(|s| *s == 200), "{rcode}: {statuses:?}");
        assert!(
            !proxy.log.iter().any(|l| l.contains("no address")),
            "{rcode}: {:?}",
            proxy.log
        );
        dns.restore();
        proxy.wait_for("answers again");
        assert_eq!(get(web), 200);
    }
    proxy.stop();
}

/// A server that answers NXDOMAIN, or NOERROR without the record, says the name has no address:
/// its last addresses are kept for `dns_hold`, then its targets go (503), and they come back with
/// the record.
#[test]
fn nxdomain_and_nodata_remove_targets_after_the_hold() {
    let backend = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
    let dns = DnsServer::start("api 1 IN A 127.0.0.1\napi 1 IN TXT \"kept\"");
    let dir = tempfile::tempdir().unwrap();
    let port = backend.addr.port();
    let (mut proxy, web, admin) = gateway(
        dir.path(),
        &dns,
        "dns_hold = \"3s\"",
        &format!("\"dns+api.fleet.test:{port}\""),
    );
    assert_eq!(get(web), 200);
    for (what, delete) in [
        ("NOERROR without A", "delete api.fleet.test. A"),
        ("NXDOMAIN", "delete api.fleet.test."),
    ] {
        dns.update(&[delete]);
        proxy.wait_for("answers no address; keeping its last answer for 3s");
        // The admin API shows the state once the control plane stored it, after the log line.
        upstream_when(admin, |app| app["dns"][0]["state"] == "holding");
        assert_eq!(get(web), 200, "{what}: held");
        proxy.wait_for("no address (its upstream answers 503)");
        upstream_when(admin, |app| app["dns"][0]["addresses"] == serde_json::json!([]));
        assert_eq!(get(web), 503, "{what}: gone after the hold");
        dns.update(&[
            "add api.fleet.test. 1 A 127.0.0.1",
            "add api.fleet.test. 1 TXT \"kept\"",
        ]);
        proxy.wait_for(&format!("dns+api.fleet.test:{port}: 127.0.0.1:{port}"));
        upstream_when(admin, |app| {
            app["dns"][0]["state"] == "resolved" && app["dns"][0]["addresses"].as_array().is_some_and(|a| !a.is_empty())
        });
        assert_eq!(get(web), 200, "{what}: back");
    }
    proxy.stop();
}

/// One request on a new connection: its status.
fn get(web: u16) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", web)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        .unwrap();
    read_response(&mut s).0
}

#[test]
fn a_tcp_listener_follows_its_names_too() {
    let one = common::Backend::start("one", common::Behavior::TagEcho);
    let two = common::Backend::start("two", common::Behavior::TagEcho);
    let records = format!(
        "one 1 IN A 127.0.0.1\ntwo 1 IN A 127.0.0.1\n_tcp-svc._tcp.api 1 IN SRV 10 1 {} one",
        one.addr.port()
    );
    let dns = DnsServer::start(&records);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[global]\n{}\n\n[listeners.l4]\nbind = \"127.0.0.1:{port}\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{{ srv = \"_tcp-svc._tcp.api.fleet.test\" }}]\n",
        dns.resolvers()
    );
    let path = write_file(dir.path(), "l4.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(common::which_backend(port), "one");
    // A connection open across the change stays with the target it had.
    let mut held = common::connect(port);
    assert_eq!(common::read_line(&mut held), "one");
    dns.update(&[
        &format!(
            "delete _tcp-svc._tcp.api.fleet.test. SRV 10 1 {} one.fleet.test.",
            one.addr.port()
        ),
        &format!(
            "add _tcp-svc._tcp.api.fleet.test. 1 SRV 10 1 {} two.fleet.test.",
            two.addr.port()
        ),
    ]);
    let deadline = Instant::now() + WAIT;
    while common::which_backend(port) != "two" {
        assert!(Instant::now() < deadline, "the new SRV record never took connections");
        thread::sleep(Duration::from_millis(20));
    }
    held.write_all(b"still here\n").unwrap();
    assert_eq!(common::read_line(&mut held), "still here");
    drop(held);
    proxy.stop();
}
