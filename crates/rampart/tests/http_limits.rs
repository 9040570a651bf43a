//! Per-target request limits and the upstream's queue (HAProxy's `maxconn` and queue), against
//! a real backend that takes 300 ms per request: over the limit, requests wait in the queue and
//! are all answered, in waves of the limit (no faster than that: the test would fail without
//! the limit); past the queue's size, or its timeout, they get 503, counted by reason and said
//! in the process log.

use crate::common;

use std::time::{Duration, Instant};

use common::http::{get, send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

const TAKES: Duration = Duration::from_millis(300);

/// Starts Rampart in front of one slow backend with `upstream_extra`, sends `n` requests at once
/// (each on its own connection): their statuses, how long the last took, the requests refused
/// (queue full or wait too long), and the proxy, still running.
fn burst(upstream_extra: &str, n: usize) -> (Vec<u16>, Duration, f64, Rampart) {
    let backend = HttpBackend::start(Reply::Slow(TAKES));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n{upstream_extra}\n",
        backend.target()
    );
    let path = write_file(dir.path(), "limits.toml", &text);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let started = Instant::now();
    let clients: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = common::connect(port);
                send(&mut conn, &get("/")).0
            })
        })
        .collect();
    let mut statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let took = started.elapsed();
    statuses.sort();
    let samples = common::scrape::scrape(admin);
    let refused = ["full", "timeout"]
        .iter()
        .map(|r| {
            common::scrape::value(
                &samples,
                "rampart_upstream_queue_refused_total",
                &[("upstream", "app"), ("reason", r)],
            )
        })
        .sum::<f64>();
    (statuses, took, refused, proxy)
}

#[test]
fn over_the_limit_requests_wait_in_the_queue_and_are_all_answered_in_waves() {
    let (statuses, took, refused, _proxy) = burst("max_requests_per_target = 2", 6);
    assert_eq!(statuses, [200; 6]);
    assert_eq!(refused, 0.0);
    // Three waves of two: no faster than three times the backend's time.
    assert!(took >= TAKES * 3 - Duration::from_millis(30), "{took:?}");
}

#[test]
fn a_full_queue_or_a_wait_too_long_is_503_at_once() {
    // 2 in flight, 2 waiting: the other 2 are refused.
    let (statuses, _, refused, mut proxy) = burst("max_requests_per_target = 2\nqueue = { size = 2 }", 6);
    assert_eq!(statuses, [200, 200, 200, 200, 503, 503]);
    assert_eq!(refused, 2.0);
    // The process log says so once (then counts, as for other outages).
    let line = proxy.wait_for("answering 503 (queue_full)");
    assert!(line.contains("upstream app: the queue is full"), "{line}");

    // Waits of 100 ms for a backend that takes 300: only the first two are answered (with no
    // timeout all four would be, the last two after 600 ms).
    let (statuses, _, refused, mut proxy) = burst("max_requests_per_target = 2\nqueue = { timeout = \"100ms\" }", 4);
    assert_eq!(statuses, [200, 200, 503, 503]);
    assert_eq!(refused, 2.0);
    let line = proxy.wait_for("answering 503 (queue_timeout)");
    assert!(
        line.contains("upstream app: a request waited in the queue past its timeout"),
        "{line}"
    );
}

#[test]
fn waiting_requests_are_served_first_come_first_served() {
    // One request at a time to a target that takes 150 ms: the first is sent, then five more,
    // each only once the one before it is seen waiting in the queue. The backend must get them
    // in that order (waiting requests that each looked for room on their own would come in any
    // order). Two workers: a slot given back on one wakes a request waiting on the other.
    let backend = HttpBackend::start(Reply::Slow(Duration::from_millis(150)));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text = common::http::one_upstream_config(port, admin, &[&backend], "max_requests_per_target = 1");
    let path = write_file(dir.path(), "fifo.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let queued = || {
        common::scrape::value(
            &common::scrape::scrape(admin),
            "rampart_upstream_queued_total",
            &[("upstream", "app")],
        )
    };
    let client = |n: usize| {
        std::thread::spawn(move || {
            let mut conn = common::connect(port);
            send(&mut conn, &get(&format!("/{n}"))).0
        })
    };
    let mut clients = vec![client(0)];
    let first = backend.heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(first.starts_with("GET /0 "), "{first}");
    for n in 1..=5 {
        clients.push(client(n));
        common::tls::eventually(&format!("request {n} waits"), || queued() >= n as f64);
    }
    let statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(statuses, [200; 6]);
    let order: Vec<String> = backend
        .heads
        .try_iter()
        .map(|head| head.split(' ').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(order, ["/1", "/2", "/3", "/4", "/5"]);
}
