//! Retries on outcomes (`retry_on`) and the retry budget, against real backends: one of three
//! answering 503 to everything is retried around (clients see no 503) unless the request is not
//! safe to repeat; with every target failing, the budget keeps the extra attempts near its share
//! of the requests in flight, where an unlimited budget makes every request try every target.

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
    let retried = bad.seen();
    assert!(retried >= 15, "round robin reached the bad target: {retried}");
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

    // A POST is not safe to repeat: the 503 reaches the client as the target sent it.
    let post = b"POST / HTTP/1.1\r\nHost: app.test\r\ncontent-length: 2\r\n\r\nhi";
    let got = statuses(port, 30, post);
    assert!(got.get(&503).is_some_and(|n| *n >= 5), "{got:?}");
    drop(proxy);

    // Without `retry_on` naming it, a 503 goes to the client too (the test above would fail).
    let text = one_upstream_config(port, admin, &backends, "retries = 2");
    let path = write_file(dir.path(), "plain.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let got = statuses(port, 30, &get("/"));
    assert!(got.get(&503).is_some_and(|n| *n >= 5), "{got:?}");
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
    let budgeted = attempts_per_request("{ percent = 20, min_retrying = 0 }");
    assert!(budgeted <= 1.45, "the budget holds retries near 20%: {budgeted:.2}");
    // Without a limit every request tries all three targets.
    let unlimited = attempts_per_request("{ percent = 100, min_retrying = 0 }");
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
    let got = statuses(port, 30, &get("/api/items"));
    assert_eq!(got.get(&200), Some(&30), "{got:?}");
    let got = statuses(port, 30, &get("/other"));
    assert!(got.get(&503).is_some_and(|n| *n >= 5), "{got:?}");
}
