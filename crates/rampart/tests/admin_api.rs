//! The admin listener over real sockets: the token, health and readiness (also while draining),
//! status, reload through the API with a good and a bad file, JSON errors, and `--admin` on the
//! one-line modes.

use crate::common;

use std::io::Write;
use std::time::Instant;

use common::http::{HttpBackend, Reply};
use common::scrape::{scrape, value};
use common::Bounded;
use common::*;

fn config(admin_port: u16, port: u16, backend: &str, extra_admin: &str) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n{extra_admin}\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{backend}\"]\n"
    )
}

#[test]
fn the_token_guards_every_endpoint_and_status_describes_the_process() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = config(admin_port, port, &backend.target(), "token = \"s3cret\"");
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    for endpoint in ["/healthz", "/readyz", "/api/status", "/nope"] {
        let (status, body) = admin(admin_port, "GET", endpoint, None);
        assert_eq!(status, 401, "{endpoint}");
        assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
        assert_eq!(admin(admin_port, "GET", endpoint, Some("wrong")).0, 401);
    }
    let token = Some("s3cret");
    assert_eq!(
        admin(admin_port, "GET", "/healthz", token),
        (200, serde_json::json!({"status": "ok"}))
    );
    let (status, body) = admin(admin_port, "GET", "/api/status", token);
    assert_eq!(status, 200);
    assert_eq!(body["workers"], 2);
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(body["config"]["path"], path.as_str());
    // The hash is of the file's text (sha256sum's answer).
    let sum = std::process::Command::new("sha256sum")
        .arg(&path)
        .output_within(common::TOOL_WAIT)
        .unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert_eq!(body["config"]["sha256"], sum.split_whitespace().next().unwrap());
    assert_eq!(body["listeners"][0]["name"], "web");
    assert_eq!(body["listeners"][0]["bind"], format!("127.0.0.1:{port}"));
    assert_eq!(body["last_reload"], serde_json::Value::Null);
    let (status, body) = admin(admin_port, "GET", "/nope", token);
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("/nope"));
    let (status, body) = admin(admin_port, "DELETE", "/api/status", token);
    assert_eq!(status, 405);
    assert!(body["error"].as_str().unwrap().contains("GET"));
}

#[test]
fn reload_through_the_api_applies_a_good_file_and_refuses_a_bad_one_with_its_places() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port, second) = (free_port(), free_port(), free_port());
    let text = config(admin_port, port, &backend.target(), "");
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // Good: a second listener appears.
    let added =
        format!("{text}\n[listeners.more]\nbind = \"127.0.0.1:{second}\"\nprotocol = \"http\"\nupstream = \"app\"\n");
    write_file(dir.path(), "rampart.toml", &added);
    let (status, body) = admin(admin_port, "POST", "/api/reload", None);
    assert_eq!(status, 200, "{body}");
    assert!(body["summary"].as_str().unwrap().contains("more on"), "{body}");
    let mut client = connect(second);
    let (code, _, _) = common::http::send(&mut client, &common::http::get("/x"));
    assert_eq!(code, 200);
    let (_, status_now) = admin(admin_port, "GET", "/api/status", None);
    assert_eq!(status_now["last_reload"]["result"], "ok");
    assert_eq!(status_now["reloads"]["succeeded"], 1);
    assert_eq!(status_now["listeners"].as_array().unwrap().len(), 2);
    // Bad: 422 with file:line:col, and the running config stays.
    write_file(
        dir.path(),
        "rampart.toml",
        &format!("{added}\n[upstreams.app2]\ntargets = []\n"),
    );
    let (status, body) = admin(admin_port, "POST", "/api/reload", None);
    assert_eq!(status, 422, "{body}");
    let errors = body["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().starts_with(&format!("{path}:"))
                && e.as_str().unwrap().contains("has no targets")),
        "{body}"
    );
    let (code, _, _) = common::http::send(&mut connect(second), &common::http::get("/y"));
    assert_eq!(code, 200, "the running config stays in force");
    let (_, status_now) = admin(admin_port, "GET", "/api/status", None);
    assert_eq!(status_now["last_reload"]["result"], "failed");
    assert_eq!(status_now["reloads"]["failed"], 1);
    assert_eq!(admin(admin_port, "GET", "/api/reload", None).0, 405);
}

#[test]
fn readiness_turns_off_while_draining_and_health_stays_on() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[global]\ndrain_timeout = \"20s\"\n\n{}",
        config(admin_port, port, &backend.target(), "")
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(
        admin(admin_port, "GET", "/readyz", None),
        (200, serde_json::json!({"ready": true}))
    );
    // A request in flight keeps the drain going: the backend never answers it.
    let slow = HttpBackend::start(Reply::Slow(std::time::Duration::from_secs(30)));
    let slow_cfg = text.replace(&backend.target(), &slow.target());
    write_file(dir.path(), "rampart.toml", &slow_cfg);
    assert_eq!(admin(admin_port, "POST", "/api/reload", None).0, 200);
    let mut stuck = connect(port);
    stuck.write_all(&common::http::get("/hang")).unwrap();
    // In flight: the backend has the request (and holds it).
    slow.next_head();
    proxy.signal(libc::SIGTERM);
    proxy.wait_for("draining open connections");
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = admin(admin_port, "GET", "/readyz", None);
        if status == 503 {
            assert_eq!(body["reason"], "draining");
            break;
        }
        assert!(Instant::now() < deadline, "readyz still {status} while draining");
    }
    assert_eq!(admin(admin_port, "GET", "/healthz", None).0, 200);
    let (status, body) = admin(admin_port, "POST", "/api/reload", None);
    assert_eq!(status, 503, "{body}");
}

#[test]
fn the_one_line_modes_take_admin_on_loopback_only() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{port}");
    let admin_at = format!("127.0.0.1:{admin_port}");
    let _proxy = Rampart::start(
        dir.path(),
        &[
            "http",
            "--listen",
            &listen,
            "--to",
            &backend.target(),
            "--admin",
            &admin_at,
            "--workers",
            "1",
        ],
    );
    assert_eq!(admin(admin_port, "GET", "/healthz", None).0, 200);
    let (status, body) = admin(admin_port, "POST", "/api/reload", None);
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("nothing to reload"));
    let (code, _, err) = run_rampart(
        dir.path(),
        &[
            "tcp",
            "--listen",
            "127.0.0.1:1",
            "--to",
            "127.0.0.1:2",
            "--admin",
            "0.0.0.0:9901",
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("--admin 0.0.0.0:9901: only a loopback address"), "{err}");
}

#[test]
fn config_and_upstreams_show_what_runs() {
    let backend = HttpBackend::start(Reply::Echo);
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken = \"hush\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{}\", \"{dead}\"]\nconnect_attempts = 2\npassive_backoff = \"60s\"\n",
        backend.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let token = Some("hush");
    let (status, config) = admin(admin_port, "GET", "/api/config", token);
    assert_eq!(status, 200);
    assert_eq!(config["source"], path.as_str());
    let shown = config["text"].as_str().unwrap();
    assert!(
        shown.contains("token = \"<redacted>\"") && !shown.contains("hush"),
        "{shown}"
    );
    assert!(shown.contains("connect_attempts = 2"), "{shown}");
    // Requests until the dead target was tried (round robin: the second request at the latest).
    for _ in 0..4 {
        let (code, _, _) = common::http::send(&mut connect(port), &common::http::get("/"));
        assert_eq!(code, 200);
    }
    let (status, body) = admin(admin_port, "GET", "/api/upstreams", token);
    assert_eq!(status, 200);
    let targets = body["upstreams"][0]["targets"].as_array().unwrap();
    assert_eq!(body["upstreams"][0]["name"], "app");
    let live = targets
        .iter()
        .find(|t| t["target"] == backend.target().as_str())
        .unwrap();
    let down = targets.iter().find(|t| t["target"] == dead.as_str()).unwrap();
    assert_eq!(live["available"], true);
    assert_eq!(live["passive"]["consecutive_failures"], 0);
    assert_eq!(down["available"], false, "{body}");
    assert_eq!(down["passive"]["consecutive_failures"], 1, "{body}");
    assert!(down["passive"]["down_for_ms"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(
        down["active_check"],
        serde_json::Value::Null,
        "no active check configured"
    );
    // The failed connect was made again on the live target: a retry, under a name that does
    // not read like the `retries` setting.
    let app = &body["upstreams"][0];
    assert_eq!(app["retries_total"], 1, "{app}");
    assert!(app.get("retries").is_none(), "{app}");
    assert_eq!(app["no_target_total"], 0, "{app}");
}

#[test]
fn requests_that_find_no_target_are_counted_on_their_upstream() {
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{dead}\"]\npassive_backoff = \"60s\"\n"
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // The first request tries the target (502); while it backs off the next find none (503).
    let status = || common::http::send(&mut connect(port), &common::http::get("/")).0;
    assert_eq!(status(), 502);
    for _ in 0..3 {
        assert_eq!(status(), 503);
    }
    let (_, body) = admin(admin_port, "GET", "/api/upstreams", None);
    let app = &body["upstreams"][0];
    assert_eq!(app["no_target_total"], 3, "{app}");
    assert_eq!(app["targets"][0]["errors"]["connect"], 1, "{app}");
    let metrics = scrape(admin_port);
    assert_eq!(
        value(&metrics, "rampart_upstream_no_target_total", &[("upstream", "app")]),
        3.0
    );
    // Latency buckets start at 25 µs, as the status page's percentiles do.
    let bounds: Vec<&str> = metrics
        .iter()
        .filter(|(name, labels, _)| {
            name == "rampart_http_request_duration_seconds_bucket"
                && labels.iter().any(|(k, v)| k == "route" && v == "(unrouted)")
        })
        .filter_map(|(_, labels, _)| Some(labels.iter().find(|(k, _)| k == "le")?.1.as_str()))
        .collect();
    assert_eq!(bounds.len(), 19, "18 bounds and +Inf: {bounds:?}");
    assert_eq!(bounds[0].parse::<f64>().ok(), Some(0.000025), "{bounds:?}");
}

#[test]
fn a_drained_target_gets_no_requests_until_enabled_and_stays_drained_across_reloads() {
    let a = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA"));
    let b = HttpBackend::start(Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nB"));
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{}\", \"{}\"]\n",
        a.target(),
        b.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut client = connect(port);
    let mut served = |n: usize| -> String {
        (0..n)
            .map(|_| {
                let (code, _, body) = common::http::send(&mut client, &common::http::get("/"));
                assert_eq!(code, 200);
                String::from_utf8(body).unwrap()
            })
            .collect()
    };
    let both = served(4);
    assert!(both.contains('A') && both.contains('B'), "{both}");
    let drain_b = format!("/api/upstreams/app/targets/{}/drain", b.target().replace(':', "%3A"));
    let (status, body) = admin(admin_port, "POST", &drain_b, None);
    assert_eq!(
        (status, &body["drained"], &body["changed"]),
        (200, &true.into(), &true.into()),
        "{body}"
    );
    assert_eq!(served(6), "AAAAAA");
    let (_, ups) = admin(admin_port, "GET", "/api/upstreams", None);
    let shown = ups["upstreams"][0]["targets"].as_array().unwrap();
    assert!(
        shown
            .iter()
            .any(|t| t["target"] == b.target().as_str() && t["drained"] == true),
        "{ups}"
    );
    // A reload that keeps the target keeps its drain.
    assert_eq!(admin(admin_port, "POST", "/api/reload", None).0, 200);
    assert_eq!(served(4), "AAAA");
    let enable_b = format!("/api/upstreams/app/targets/{}/enable", b.target());
    assert_eq!(admin(admin_port, "POST", &enable_b, None).0, 200);
    let again = served(4);
    assert!(again.contains('B'), "{again}");
    // Unknown names are 404s, other methods 405.
    assert_eq!(
        admin(admin_port, "POST", "/api/upstreams/nope/targets/x/drain", None).0,
        404
    );
    assert_eq!(
        admin(admin_port, "POST", "/api/upstreams/app/targets/10.9.9.9:1/drain", None).0,
        404
    );
    assert_eq!(
        admin(admin_port, "POST", "/api/upstreams/app/targets/x/explode", None).0,
        404
    );
    assert_eq!(admin(admin_port, "GET", &drain_b, None).0, 405);
}

#[test]
fn metrics_parse_and_move_with_reloads_drains_and_dead_targets() {
    let live = HttpBackend::start(Reply::Echo);
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{}\", \"{dead}\"]\npassive_backoff = \"60s\"\n",
        live.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);
    let first = scrape(admin_port);
    assert_eq!(value(&first, "rampart_workers", &[]), 2.0);
    assert_eq!(
        value(&first, "rampart_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        1.0
    );
    assert_eq!(
        value(&first, "rampart_config_reloads_total", &[("result", "success")]),
        0.0
    );
    assert!(value(&first, "process_open_fds", &[]) > 0.0);
    assert!(value(&first, "process_resident_memory_bytes", &[]) > 0.0);
    let live_target = live.target();
    let live_labels = [("upstream", "app"), ("target", live_target.as_str())];
    assert_eq!(value(&first, "rampart_target_up", &live_labels), 1.0);
    // The dead target goes down after a request tried it.
    for _ in 0..4 {
        let (code, _, _) = common::http::send(&mut connect(port), &common::http::get("/"));
        assert_eq!(code, 200);
    }
    let dead_labels = [("upstream", "app"), ("target", dead.as_str())];
    assert_eq!(value(&scrape(admin_port), "rampart_target_up", &dead_labels), 0.0);
    // A drain shows, and so do reloads, good and bad.
    let drain = format!("/api/upstreams/app/targets/{}/drain", live.target());
    assert_eq!(admin(admin_port, "POST", &drain, None).0, 200);
    assert_eq!(admin(admin_port, "POST", "/api/reload", None).0, 200);
    write_file(dir.path(), "rampart.toml", "[listeners.broken]\n");
    assert_eq!(admin(admin_port, "POST", "/api/reload", None).0, 422);
    let after = scrape(admin_port);
    assert_eq!(value(&after, "rampart_target_drained", &live_labels), 1.0);
    assert_eq!(value(&after, "rampart_target_up", &live_labels), 0.0);
    assert_eq!(
        value(&after, "rampart_config_reloads_total", &[("result", "success")]),
        1.0
    );
    assert_eq!(
        value(&after, "rampart_config_reloads_total", &[("result", "failure")]),
        1.0
    );
    assert!(value(&after, "process_cpu_seconds_total", &[]) >= 0.0);
}
