//! Outlier detection on real traffic: a target answering 503 to everything is ejected after
//! `consecutive_5xx` of them and gets no more requests while the others serve; no more than
//! `max_ejection_percent` of the upstream is ever out; a target whose responses turn slow is
//! ejected too. No retry is configured, so every request a bad target got reached the client.

use crate::common;

use common::http::{get, send, HttpBackend, Reply, UNAVAILABLE};
use common::{free_port, write_file, Rampart};

fn config(port: u16, admin: u16, backends: &[&HttpBackend], upstream_extra: &str) -> String {
    common::http::one_upstream_config(port, admin, backends, &format!("retries = 0\n{upstream_extra}"))
}

/// `n` GETs on one keep-alive connection: how many were answered 503.
fn unavailable(port: u16, n: usize) -> usize {
    let mut conn = common::connect(port);
    (0..n).filter(|_| send(&mut conn, &get("/")).0 == 503).count()
}

#[test]
fn a_target_answering_503_is_ejected_and_no_more_than_the_share_is_out() {
    let good = HttpBackend::start(Reply::Echo);
    let bad = [
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
        HttpBackend::start(Reply::Raw(UNAVAILABLE)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());

    // One bad target of three: out after 3 of its 503s, for the whole test.
    let outlier =
        "outlier_detection = { consecutive_5xx = 3, base_ejection_time = \"60s\", max_ejection_percent = 34 }";
    let text = config(
        port,
        admin,
        &[&good, &bad[0], &HttpBackend::start(Reply::Echo)],
        outlier,
    );
    let path = write_file(dir.path(), "one.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let answered_503 = unavailable(port, 60);
    assert_eq!(answered_503, 3, "three 503s, then the target is out");
    assert_eq!(bad[0].seen(), 3);
    let line = proxy.wait_for("ejected for");
    assert!(
        line.contains(&format!("target {}", bad[0].target())) && line.contains("3 bad outcomes"),
        "{line}"
    );
    let samples = common::scrape::scrape(admin);
    let target = bad[0].target();
    let labels = [("upstream", "app"), ("target", target.as_str())];
    assert_eq!(
        common::scrape::value(&samples, "rampart_target_ejections_total", &labels),
        1.0
    );
    assert_eq!(common::scrape::value(&samples, "rampart_target_up", &labels), 0.0);
    // The admin API says it is ejected, why, for how long, and counts its 503s as failures.
    let shown = target_in_api(admin, &target);
    assert!(shown["ejected_for_ms"].as_u64().unwrap() > 50_000, "{shown}");
    assert_eq!(shown["state"], "ejected", "{shown}");
    assert_eq!(shown["outlier"]["ejection_reason"], "5xx", "{shown}");
    assert_eq!(shown["errors"]["status_5xx"], 3, "{shown}");
    assert_eq!(shown["errors_last_minute"], 3, "{shown}");
    proxy.stop();

    // Two bad targets of three with 34%: one is ejected, the other keeps getting its share.
    let _ = (bad[0].seen(), bad[1].seen());
    let text = config(port, admin, &[&good, &bad[0], &bad[1]], outlier);
    let path = write_file(dir.path(), "two.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let answered_503 = unavailable(port, 90);
    let (first, second) = (bad[0].seen(), bad[1].seen());
    assert!(
        first.min(second) == 3 && first.max(second) >= 20,
        "{first} and {second}"
    );
    assert_eq!(answered_503, first + second);
}

/// The `/api/upstreams` entry of `target` (of the only upstream).
fn target_in_api(admin: u16, target: &str) -> serde_json::Value {
    let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
    upstreams["upstreams"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == target)
        .cloned()
        .unwrap()
}

#[test]
fn a_target_answering_503_shows_its_failures_without_outlier_detection() {
    // No outlier detection: the target keeps its share, and the admin API shows it failing
    // (it said `0 failures`, `errors_last_minute: 0` while the cards showed its 5xx).
    let good = HttpBackend::start(Reply::Echo);
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let path = write_file(dir.path(), "plain.toml", &config(port, admin, &[&good, &bad], ""));
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(unavailable(port, 20), 10);
    let shown = target_in_api(admin, &bad.target());
    assert_eq!(shown["state"], "serving", "{shown}");
    assert_eq!(shown["errors"]["status_5xx"], 10, "{shown}");
    assert_eq!(shown["errors_last_minute"], 10, "{shown}");
    assert_eq!(shown["outlier"]["bad_outcomes_in_a_row"], 10, "{shown}");
    let healthy = target_in_api(admin, &good.target());
    assert_eq!(
        (
            &healthy["errors_last_minute"],
            &healthy["outlier"]["bad_outcomes_in_a_row"]
        ),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{healthy}"
    );
}

#[test]
fn a_target_turning_slow_is_ejected() {
    let fast = HttpBackend::start(Reply::Echo);
    let slow = HttpBackend::start(Reply::Slow(std::time::Duration::from_millis(150)));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let outlier = "outlier_detection = { consecutive_5xx = 2, slow_response = \"50ms\", base_ejection_time = \"60s\" }";
    let path = write_file(dir.path(), "slow.toml", &config(port, admin, &[&fast, &slow], outlier));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(unavailable(port, 30), 0);
    assert_eq!(slow.seen(), 2, "two slow responses, then out");
    let line = proxy.wait_for("ejected for");
    assert!(line.contains("slow responses"), "{line}");
}
