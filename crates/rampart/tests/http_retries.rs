//! Retries on outcomes (`retry_on`) and the retry budget, against real backends: one of three
//! answering 503 to everything is retried around (clients see no 503, even many at once) unless
//! the request is not safe to repeat, and the next requests pass it over for a while; with every
//! target failing, the budget keeps the extra attempts to its share of the requests, where an
//! unlimited budget makes every request try every target, and the last try's response reaches
//! the client as the target sent it.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::http::{get, one_upstream_config, send, HttpBackend, Reply, UNAVAILABLE};
use common::{free_port, write_file, Rampart};

/// `n` requests on one keep-alive connection: how many got each status.
fn statuses(port: u16, n: usize, request: &[u8]) -> std::collections::BTreeMap<u16, usize> {
    let mut conn = common::connect(port);
    let mut got = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (status, _, _) = send(&mut conn, request);
        *got.entry(status).or_default() += 1;
    }
    got
}

#[test]
fn a_target_answering_503_is_retried_on_another_and_clients_see_no_error() {
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let backends = [&good[0], &bad, &good[1]];
    let log = dir.path().join("access.log");
    let text = one_upstream_config(port, admin, &backends, "retries = 2\nretry_on = [\"reset\", \"503\"]").replace(
        "upstream = \"app\"\n\n",
        &format!(
            "upstream = \"app\"\naccess_log = {{ path = \"{}\", format = \"json\" }}\n\n",
            log.display()
        ),
    );
    let path = write_file(dir.path(), "retry.toml", &text);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);

    let got = statuses(port, 60, &get("/"));
    assert_eq!(got.get(&200), Some(&60), "every GET answered by a good target: {got:?}");
    // Round robin reached the bad target; once it failed, the next requests passed it over (for
    // a second: a slow machine may let it have another).
    let retried = bad.seen();
    assert!((1..=5).contains(&retried), "{retried}");
    let samples = common::scrape::scrape(admin);
    let retries = common::scrape::value(&samples, "rampart_upstream_retries_total", &[("upstream", "app")]);
    assert_eq!(retries as usize, retried, "one retry for each 503 dropped");
    // The access log says which requests were retried, and why.
    let mut retried_lines = Vec::new();
    common::tls::eventually("60 access log lines", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        retried_lines = text
            .lines()
            .filter(|l| l.contains("\"attempts\":2"))
            .map(String::from)
            .collect();
        text.lines().count() >= 60
    });
    assert_eq!(retried_lines.len(), retried, "{retried_lines:?}");
    assert!(
        retried_lines
            .iter()
            .all(|l| l.contains("\"retry_reason\":\"upstream_status_retried\"") && l.contains("\"status\":200")),
        "{retried_lines:?}"
    );
    // Each attempt is listed: the bad target's 503, dropped for the retry, then a good target's 200.
    let first = format!(
        "\"upstream_attempts\":[{{\"target\":\"{}\",\"connection\":",
        bad.target()
    );
    let goods: Vec<String> = good
        .iter()
        .map(|g| format!("{{\"target\":\"{}\",\"connection\":", g.target()))
        .collect();
    for line in &retried_lines {
        let attempts = &line[line.find(&first).unwrap_or_else(|| panic!("{line}"))..];
        let (bad_attempt, good_attempt) = attempts.split_once("},").unwrap_or_else(|| panic!("{line}"));
        assert!(
            bad_attempt.contains("\"status\":503,\"retried_for\":\"upstream_status_retried\"")
                && bad_attempt.contains("\"response_ms\":"),
            "{line}"
        );
        assert!(goods.iter().any(|g| good_attempt.starts_with(g.as_str())), "{line}");
        assert!(good_attempt.contains("\"status\":200}]"), "{line}");
    }

    // A POST is not safe to repeat: the 503 reaches the client as the target sent it.
    let post = b"POST / HTTP/1.1\r\nHost: app.test\r\ncontent-length: 2\r\n\r\nhi";
    let got = statuses(port, 30, post);
    assert!(got.get(&503).is_some_and(|n| *n >= 1), "{got:?}");
    drop(proxy);

    // Without `retry_on` naming it, a 503 goes to the client too (the test above would fail).
    let text = one_upstream_config(port, admin, &backends, "retries = 2");
    let path = write_file(dir.path(), "plain.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let got = statuses(port, 30, &get("/"));
    assert!(got.get(&503).is_some_and(|n| *n >= 5), "{got:?}");
}

#[test]
fn one_target_of_three_answering_503_costs_no_request_under_load_without_outlier_detection() {
    // 48 clients at once, the default budget, no outlier detection: every request that met the
    // bad target first has its retry (a concurrency-based budget refused a fifth of them).
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let extra = "retries = 2\nretry_on = [\"503\"]";
    let text = one_upstream_config(port, admin, &[&good[0], &bad, &good[1]], extra);
    let path = write_file(dir.path(), "load.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let start = Arc::new(std::sync::Barrier::new(48));
    let clients: Vec<_> = (0..48)
        .map(|_| {
            let start = start.clone();
            std::thread::spawn(move || {
                let mut conn = common::connect(port);
                start.wait();
                let mut got = std::collections::BTreeMap::<u16, usize>::new();
                for _ in 0..30 {
                    *got.entry(send(&mut conn, &get("/")).0).or_default() += 1;
                }
                got
            })
        })
        .collect();
    let mut failed = 0;
    for c in clients {
        let got = c.join().unwrap();
        failed += got.iter().filter(|(s, _)| **s != 200).map(|(_, n)| n).sum::<usize>();
    }
    let samples = common::scrape::scrape(admin);
    let over = common::scrape::value(
        &samples,
        "rampart_upstream_retries_over_budget_total",
        &[("upstream", "app")],
    );
    assert_eq!(
        (failed, over),
        (0, 0.0),
        "1440 requests, the bad target got {}",
        bad.seen()
    );
}

#[test]
fn a_retry_goes_to_a_target_not_tried_and_the_next_requests_pass_a_failed_one_over() {
    // Two targets, one failing: with the retry taking a round-robin turn every request met the
    // failing one first (40 of 40); now it is passed over for a while after it failed.
    let good = HttpBackend::start(Reply::Echo);
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text = one_upstream_config(port, admin, &[&bad, &good], "retries = 1\nretry_on = [\"503\"]");
    let path = write_file(dir.path(), "two.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let got = statuses(port, 40, &get("/"));
    assert_eq!(got.get(&200), Some(&40), "{got:?}");
    let met = bad.seen();
    assert!(met <= 5, "the failing target met {met} of 40 requests");
}

#[test]
fn the_last_try_passes_the_targets_own_503_on_when_no_target_is_left() {
    // Every target answers 503; outlier detection ejects one (its 50% of three). A request then
    // tries the two left and gets the second one's 503 as it was sent: not a 502 of Rampart's.
    let bad = [
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let extra = "retries = 2\nretry_on = [\"503\"]\nretry_budget = { percent = 100 }\n\
                 outlier_detection = { consecutive_5xx = 2, base_ejection_time = \"60s\" }";
    let text = one_upstream_config(port, admin, &[&bad[0], &bad[1], &bad[2]], extra);
    let path = write_file(dir.path(), "all.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut conn = common::connect(port);
    let mut answers = Vec::new();
    for _ in 0..20 {
        let (status, _, body) = send(&mut conn, &get("/"));
        answers.push((status, String::from_utf8_lossy(&body).into_owned()));
    }
    proxy.wait_for("ejected for");
    assert!(
        answers.iter().all(|(status, body)| *status == 503 && body == "down"),
        "{answers:?}"
    );
}

/// Upstream attempts per client request when all three targets answer 503, with `budget`, under
/// 10 concurrent clients.
fn attempts_per_request(budget: &str) -> f64 {
    let bad = [
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let extra = format!("retries = 2\nretry_on = [\"503\"]\nretry_budget = {budget}");
    let text = one_upstream_config(port, admin, &[&bad[0], &bad[1], &bad[2]], &extra);
    let path = write_file(dir.path(), "budget.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let requests = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let requests = requests.clone();
            std::thread::spawn(move || {
                let got = statuses(port, 40, &get("/"));
                assert_eq!(got.get(&503), Some(&40), "every request answered 503: {got:?}");
                requests.fetch_add(40, Ordering::Relaxed);
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let attempts: usize = bad.iter().map(HttpBackend::seen).sum();
    let samples = common::scrape::scrape(admin);
    let over = common::scrape::value(
        &samples,
        "rampart_upstream_retries_over_budget_total",
        &[("upstream", "app")],
    );
    let ratio = attempts as f64 / requests.load(Ordering::Relaxed) as f64;
    eprintln!("budget {budget}: {attempts} attempts for 400 requests ({ratio:.2} each), {over} retries refused");
    ratio
}

#[test]
fn the_retry_budget_keeps_retries_to_its_share_when_every_target_fails() {
    // Each request deposits a fifth of a retry before any retry is taken: never more than 1.2.
    let budgeted = attempts_per_request("{ percent = 20, min_retries_per_second = 0 }");
    assert!(budgeted <= 1.2, "the budget holds retries to 20%: {budgeted:.2}");
    assert!(budgeted >= 1.1, "and uses it: {budgeted:.2}");
    // Without a limit (a floor far above the load) every request tries all three targets.
    let unlimited = attempts_per_request("{ percent = 100, min_retries_per_second = 100000 }");
    assert!(unlimited >= 2.5, "{unlimited:.2}");
}

#[test]
fn a_route_retries_as_its_own_retry_on_says_over_its_upstreams() {
    // The upstream retries resets only (the default); the `/api/` route names 503 as well.
    let good = [HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo)];
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let text = one_upstream_config(port, admin, &[&good[0], &bad, &good[1]], "").replace(
        "upstream = \"app\"\n\n",
        "\n[[listeners.web.routes]]\nmatch = { path_prefix = \"/api/\" }\nupstream = \"app\"\n\
         retries = 2\nretry_on = [\"503\"]\n\n[[listeners.web.routes]]\nupstream = \"app\"\n\n",
    );
    let path = write_file(dir.path(), "routes.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // `/other` first: once `/api/` has retried around the bad target, the next requests pass it
    // over for a while, whichever route they take.
    let got = statuses(port, 30, &get("/other"));
    assert_eq!(got.get(&503), Some(&10), "{got:?}");
    let got = statuses(port, 30, &get("/api/items"));
    assert_eq!(got.get(&200), Some(&30), "{got:?}");
}
