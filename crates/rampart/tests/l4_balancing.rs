//! Balancing policies through real sockets.

use crate::common;

use std::collections::HashMap;
use std::net::Ipv4Addr;

use common::*;

fn tally(port: u16, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts.entry(which_backend(port)).or_default() += 1;
    }
    counts
}

#[test]
fn round_robin_spreads_evenly() {
    let backends = tagged_backends(&["a", "b", "c"]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["tcp", "--listen", &listen, "--workers", "1"];
    let targets: Vec<String> = backends.iter().map(Backend::target).collect();
    for t in &targets {
        args.extend(["--to", t]);
    }
    let _proxy = Rampart::start(dir.path(), &args);
    let counts = tally(port, 30);
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|&c| c == 10), "{counts:?}");
}

#[test]
fn weights_are_followed() {
    let heavy = Backend::start("heavy", Behavior::TagEcho);
    let light = Backend::start("light", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "[global]\nworkers = 1\n[listeners.main]\nbind = \"127.0.0.1:{port}\"\nupstream = \"app\"\n\
         [upstreams.app]\nbalance = \"weighted_round_robin\"\n\
         targets = [{{ address = \"{}\", weight = 3 }}, {{ address = \"{}\", weight = 1 }}]\n",
        heavy.target(),
        light.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path]);
    let counts = tally(port, 40);
    assert_eq!((counts["heavy"], counts["light"]), (30, 10), "{counts:?}");
}

#[test]
fn least_connections_sends_new_clients_to_the_idlest_target() {
    let a = Backend::start("a", Behavior::TagEcho);
    let b = Backend::start("b", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (ta, tb) = (a.target(), b.target());
    let _proxy = Rampart::start(
        dir.path(),
        &[
            "tcp",
            "--listen",
            &listen,
            "--to",
            &ta,
            "--to",
            &tb,
            "--balance",
            "least_connections",
            "--workers",
            "1",
        ],
    );
    // One long-lived connection keeps its target busy...
    let mut held = connect(port);
    let busy = read_line(&mut held);
    // ...so every short connection, each fully closed before the next opens (the proxy has
    // relayed both FINs, so it has counted the close), goes to the other one. Round robin would
    // alternate.
    for i in 0..10 {
        let mut s = connect(port);
        let tag = read_line(&mut s);
        assert_ne!(tag, busy, "short connection {i} went to the busy target");
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
    }
    // The held connection still works.
    std::io::Write::write_all(&mut held, b"ping\n").unwrap();
    assert_eq!(read_line(&mut held), "ping");
}

#[test]
fn random_two_reaches_every_target() {
    let backends = tagged_backends(&["a", "b", "c"]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let targets: Vec<String> = backends.iter().map(Backend::target).collect();
    let cfg = config(port, &targets, "", "balance = \"random_two\"");
    let path = write_file(dir.path(), "rampart.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let counts = tally(port, 60);
    assert_eq!(counts.len(), 3, "{counts:?}");
}

/// Clients from 120 different source addresses: each keeps its target, and removing one of four
/// targets moves about a quarter of them (only those that were on the removed one, give or take).
#[test]
fn consistent_hash_is_stable_and_moves_about_one_nth() {
    let backends = tagged_backends(&["a", "b", "c", "d"]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let targets: Vec<String> = backends.iter().map(Backend::target).collect();
    let path = write_file(
        dir.path(),
        "rampart.toml",
        &config(port, &targets, "", "balance = \"consistent_hash\""),
    );
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let clients: Vec<Ipv4Addr> = (0..120u8).map(|i| Ipv4Addr::new(127, 0, 1, i + 1)).collect();
    let via = |ip: Ipv4Addr| {
        let mut s = connect_from(ip, port);
        read_line(&mut s)
    };
    let before: Vec<String> = clients.iter().map(|&ip| via(ip)).collect();
    let again: Vec<String> = clients.iter().map(|&ip| via(ip)).collect();
    assert_eq!(
        before, again,
        "a client changed target without any change in the upstream"
    );
    let used: std::collections::HashSet<&String> = before.iter().collect();
    assert_eq!(used.len(), 4, "all four targets should get clients");

    write_file(
        dir.path(),
        "rampart.toml",
        &config(port, &targets[..3], "", "balance = \"consistent_hash\""),
    );
    assert!(proxy.reload().contains("reloaded"));
    let after: Vec<String> = clients.iter().map(|&ip| via(ip)).collect();
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let on_removed = before.iter().filter(|t| *t == "d").count();
    assert!(after.iter().all(|t| t != "d"));
    assert!(moved >= on_removed, "clients of the removed target must move");
    assert!(
        moved <= on_removed + 6,
        "moved {moved}, but only {on_removed} were on the removed target"
    );
    assert!(moved <= clients.len() * 4 / 10, "moved {moved} of {}", clients.len());
}
