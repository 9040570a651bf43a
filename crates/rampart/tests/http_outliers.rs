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
    let (_, upstreams) = common::admin(admin, "GET", "/api/upstreams", None);
    let ejected = upstreams["upstreams"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == target.as_str())
        .map(|t| t["ejected_for_ms"].as_u64().unwrap())
        .unwrap();
    assert!(ejected > 50_000, "{upstreams}");
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
