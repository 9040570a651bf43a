//! Dead backends: retries, passive and active health, all targets down, a backend dying mid-flight.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn failed_connects_go_to_the_next_target_so_clients_never_meet_a_dead_one() {
    let live = Backend::start("live", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let targets = [dead_target(), dead_target(), live.target()];
    let path = write_file(dir.path(), "r.toml", &config(port, &targets, "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    for i in 0..20 {
        assert_eq!(which_backend(port), "live", "client {i}");
    }
    let line = proxy.wait_for("connect to");
    assert!(line.contains("marked down for"), "{line}");
}

#[test]
fn when_every_target_is_down_clients_are_closed_promptly_and_it_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let targets = [dead_target(), dead_target()];
    let path = write_file(dir.path(), "r.toml", &config(port, &targets, "", ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    for _ in 0..3 {
        let start = Instant::now();
        let mut s = connect(port);
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        assert!(buf.is_empty());
        assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    }
    proxy.wait_for("no healthy target left in upstream app after 2 attempts");
    // Both are now in passive backoff: the next clients find no healthy target at all. That is
    // the same outage: counted, not logged again, and summarised (here at the drain).
    proxy.signal(libc::SIGTERM);
    let summary = proxy.wait_for("upstream app: no healthy target:");
    assert!(summary.contains(": 2 more times in the last"), "{summary}");
    assert!(
        !proxy
            .log
            .iter()
            .any(|l| l.contains("no healthy target in upstream app;")),
        "repeated:\n{}",
        proxy.log.join("\n")
    );
}

#[test]
fn a_backend_dying_mid_flight_closes_its_client_and_others_go_on() {
    // A backend that answers, then resets the connection once told to.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let doomed_addr: SocketAddr = listener.local_addr().unwrap();
    let doomed = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"doomed\n").unwrap();
        let mut buf = [0u8; 5];
        conn.read_exact(&mut buf).unwrap();
        // Reset: linger 0 then close; and stop listening.
        socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO)).unwrap();
        drop(conn);
        drop(listener);
    });
    let survivor = Backend::start("survivor", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("s.jsonl");
    let port = free_port();
    let cfg = format!(
        "[global]\nsession_log = \"{}\"\n{}",
        log.display(),
        config(port, &[doomed_addr.to_string(), survivor.target()], "", "")
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // Round robin over two targets: of two clients, one lands on each.
    let (mut first, mut second) = (connect(port), connect(port));
    let (mut victim, mut other) = match (read_line(&mut first).as_str(), read_line(&mut second).as_str()) {
        ("doomed", "survivor") => (first, second),
        ("survivor", "doomed") => (second, first),
        tags => panic!("unexpected targets {tags:?}"),
    };
    victim.write_all(b"die!\n").unwrap();
    doomed.join().unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = victim.read_to_end(&mut rest);
    assert!(start.elapsed() < Duration::from_secs(2));
    // The other client is unaffected, and new clients reach the survivor.
    other.write_all(b"still here\n").unwrap();
    assert_eq!(read_line(&mut other), "still here");
    for _ in 0..4 {
        assert_eq!(which_backend(port), "survivor");
    }
    drop(other);
    assert_eq!(proxy.stop(), 0);
    let records = std::fs::read_to_string(&log).unwrap();
    assert!(
        records.lines().any(|l| l.contains("\"close\":\"upstream_error\"")),
        "{records}"
    );
}

#[test]
fn active_health_checks_take_targets_down_and_bring_them_back() {
    let a = Backend::start("a", Behavior::TagEcho);
    let a_addr = a.addr;
    let b = Backend::start("b", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let checks = "[upstreams.app.health_check]\ninterval = \"50ms\"\ntimeout = \"200ms\"\nrise = 2\nfall = 2\n";
    let cfg = config(port, &[a.target(), b.target()], "", "") + checks;
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    a.stop();
    drop(a);
    let line = proxy.wait_for("is down");
    assert!(line.contains(&a_addr.to_string()), "{line}");
    for _ in 0..6 {
        assert_eq!(which_backend(port), "b");
    }
    let _a = Backend::start_on("a", Behavior::TagEcho, a_addr);
    let line = proxy.wait_for("is up");
    assert!(line.contains(&a_addr.to_string()), "{line}");
    let seen: std::collections::HashSet<String> = (0..6).map(|_| which_backend(port)).collect();
    assert!(seen.contains("a"), "a never came back: {seen:?}");
}
