//! The traffic metrics under real traffic, read by a Prometheus text-format parser: HTTP requests
//! by route and status class, durations, upstream responses, errors by kind, retries, pooled
//! connections, in-flight requests, bytes; TCP sessions, refusals and dead targets.

use crate::common;

use std::io::{Read, Write};
use std::time::Duration;

use common::http::{get, send, HttpBackend, Reply};
use common::scrape::{scrape, value, Sample};
use common::tls::eventually;
use common::*;

fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
        .map(|(_, _, v)| v)
        .sum()
}

#[test]
fn http_requests_count_by_route_code_target_and_error() {
    let live = HttpBackend::start(Reply::Echo);
    let slow = HttpBackend::start(Reply::Slow(Duration::from_millis(600)));
    let broken = HttpBackend::start(Reply::Raw(b"this is not http\r\n\r\n"));
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/api/\" }}\nupstream = \"app\"\n\n\
         [[listeners.web.routes]]\nname = \"hello\"\nmatch = {{ path = \"/hello\" }}\nrespond = {{ status = 200, body = \"hi\\n\" }}\n\n\
         [[listeners.web.routes]]\nname = \"broken\"\nmatch = {{ path = \"/broken\" }}\nupstream = \"bad\"\n\n\
         [[listeners.web.routes]]\nname = \"slow\"\nmatch = {{ path = \"/slow\" }}\nupstream = \"slow\"\n\n\
         [upstreams.app]\ntargets = [\"{dead}\", \"{}\"]\npassive_backoff = \"60s\"\n\n\
         [upstreams.bad]\ntargets = [\"{}\"]\n\n\
         [upstreams.slow]\ntargets = [\"{}\"]\n",
        live.target(),
        broken.target(),
        slow.target(),
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "2"]);

    // Four API requests on one keep-alive connection: the first tries the dead target, fails to
    // connect and goes on to the live one; the rest go to the live one over its pooled connection.
    let mut client = connect(port);
    for _ in 0..4 {
        let (code, _, _) = send(&mut client, &get("/api/x"));
        assert_eq!(code, 200);
    }
    for _ in 0..2 {
        assert_eq!(send(&mut client, &get("/hello")).0, 200);
    }
    assert_eq!(send(&mut client, &get("/nowhere")).0, 404);
    assert_eq!(send(&mut connect(port), &get("/broken")).0, 502);
    assert_eq!(send(&mut connect(port), b"NOT HTTP AT ALL\r\n\r\n").0, 400);

    // A slow request is in flight while the scrape runs.
    let in_flight = std::thread::spawn(move || send(&mut connect(port), &get("/slow")).0);
    let slow_target = slow.target();
    let slow_labels = [("upstream", "slow"), ("target", slow_target.as_str())];
    eventually("the slow request is active", || {
        value(&scrape(admin_port), "rampart_target_active", &slow_labels) == 1.0
    });
    assert_eq!(in_flight.join().unwrap(), 200);
    // The client may read its answer before the proxy has counted it.
    let slow_route = [("listener", "web"), ("route", "slow"), ("code", "2xx")];
    eventually("the slow request is counted", || {
        value(&scrape(admin_port), "rampart_http_requests_total", &slow_route) == 1.0
    });

    let m = scrape(admin_port);
    let requests = |route: &str, code: &str| {
        value(
            &m,
            "rampart_http_requests_total",
            &[("listener", "web"), ("route", route), ("code", code)],
        )
    };
    assert_eq!(requests("api", "2xx"), 4.0);
    assert_eq!(requests("api", "5xx"), 0.0);
    assert_eq!(requests("hello", "2xx"), 2.0);
    assert_eq!(requests("broken", "5xx"), 1.0);
    assert_eq!(requests("slow", "2xx"), 1.0);
    assert_eq!(requests("(unrouted)", "4xx"), 2.0, "the 404 and the 400");
    let duration_count = |route: &str| {
        value(
            &m,
            "rampart_http_request_duration_seconds_count",
            &[("listener", "web"), ("route", route)],
        )
    };
    assert_eq!(duration_count("api"), 4.0);
    assert_eq!(duration_count("slow"), 1.0);
    // The slow request took at least 0.6 s: it is above the 0.5 s bucket.
    let slow_fast = value(
        &m,
        "rampart_http_request_duration_seconds_bucket",
        &[("listener", "web"), ("route", "slow"), ("le", "0.5")],
    );
    assert_eq!(slow_fast, 0.0);
    assert!(
        value(
            &m,
            "rampart_http_request_duration_seconds_sum",
            &[("listener", "web"), ("route", "slow")]
        ) >= 0.6
    );

    let live_target = live.target();
    let live_labels = [("upstream", "app"), ("target", live_target.as_str())];
    let dead_labels = [("upstream", "app"), ("target", dead.as_str())];
    assert_eq!(
        value(
            &m,
            "rampart_upstream_requests_total",
            &with(&live_labels, "code", "2xx")
        ),
        4.0
    );
    assert_eq!(
        value(
            &m,
            "rampart_upstream_errors_total",
            &with(&dead_labels, "reason", "connect")
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            "rampart_upstream_errors_total",
            &with(&live_labels, "reason", "connect")
        ),
        0.0
    );
    assert_eq!(value(&m, "rampart_target_up", &dead_labels), 0.0);
    assert_eq!(value(&m, "rampart_upstream_retries_total", &[("upstream", "app")]), 1.0);
    // Each request used one connection, new or pooled (the pool keeps them between requests,
    // unless the backend's idle close raced a request).
    let opened = value(
        &m,
        "rampart_upstream_connections_total",
        &with(&live_labels, "kind", "opened"),
    );
    let reused = value(
        &m,
        "rampart_upstream_connections_total",
        &with(&live_labels, "kind", "reused"),
    );
    assert_eq!(opened + reused, 4.0);
    assert!(opened >= 1.0 && reused >= 1.0, "opened {opened}, reused {reused}");
    assert_eq!(value(&m, "rampart_target_active", &live_labels), 0.0);
    assert_eq!(value(&m, "rampart_target_active", &slow_labels), 0.0);
    let broken_target = broken.target();
    let broken_labels = [("upstream", "bad"), ("target", broken_target.as_str())];
    assert_eq!(
        value(
            &m,
            "rampart_upstream_errors_total",
            &with(&broken_labels, "reason", "bad_response")
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            "rampart_upstream_response_duration_seconds_count",
            &[("upstream", "app")]
        ),
        4.0
    );

    // Connections: the keep-alive client, /broken, the bad request and /slow.
    assert_eq!(
        value(&m, "rampart_connections_accepted_total", &[("listener", "web")]),
        4.0
    );
    assert!(value(&m, "rampart_bytes_total", &[("listener", "web"), ("direction", "in")]) > 100.0);
    assert!(value(&m, "rampart_bytes_total", &[("listener", "web"), ("direction", "out")]) > 100.0);
    assert_eq!(
        sum(&m, "rampart_connections_refused_total", &[("listener", "web")]),
        0.0
    );
    drop(client);
    eventually("no connection is open", || {
        value(
            &scrape(admin_port),
            "rampart_connections_active",
            &[("listener", "web")],
        ) == 0.0
    });

    // The API shows the same figures per target.
    let upstreams = admin_json(admin_port, "/api/upstreams");
    let app = &upstreams["upstreams"].as_array().unwrap()[0];
    assert_eq!(app["name"], "app");
    let live_json = app["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == live_target.as_str())
        .unwrap();
    assert_eq!(live_json["responses"]["2xx"], 4);
    assert!(live_json["latency_ewma_ms"].as_f64().unwrap() > 0.0);
    let dead_json = app["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == dead.as_str())
        .unwrap();
    assert_eq!(dead_json["errors"]["connect"], 1);
    assert_eq!(dead_json["errors_last_minute"], 1);
    assert!(dead_json["latency_ewma_ms"].is_null());

    // The history has the listener, each route and each upstream, with a current interval.
    let history = admin_json(admin_port, "/api/history");
    let names: Vec<String> = history["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{}:{}", s["kind"].as_str().unwrap(), s["name"].as_str().unwrap()))
        .collect();
    for want in ["listener:web", "route:web/api", "route:web/(unrouted)", "upstream:app"] {
        assert!(names.contains(&want.to_string()), "{want} in {names:?}");
    }
}

#[test]
fn tcp_sessions_refusals_and_dead_targets_count() {
    let backend = Backend::start("b", Behavior::TagEcho);
    let dead = dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port, limited) = (free_port(), free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.db]\nbind = \"127.0.0.1:{port}\"\nupstream = \"db\"\n\n\
         [listeners.one]\nbind = \"127.0.0.1:{limited}\"\nupstream = \"db\"\nmax_connections = 1\n\n\
         [upstreams.db]\ntargets = [\"{dead}\", \"{}\"]\npassive_backoff = \"60s\"\n",
        backend.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);

    for _ in 0..3 {
        let mut s = connect(port);
        assert_eq!(read_line(&mut s), "b");
        s.write_all(b"ping\n").unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping\n");
    }
    // The limited listener takes one connection; a second is refused.
    let mut first = connect(limited);
    assert_eq!(read_line(&mut first), "b");
    let mut second = connect(limited);
    let mut buf = [0u8; 1];
    assert_eq!(second.read(&mut buf).unwrap_or(0), 0, "refused at once");

    let backend_target = backend.target();
    let live = [("upstream", "db"), ("target", backend_target.as_str())];
    eventually("the three sessions end", || {
        let m = scrape(admin_port);
        value(&m, "rampart_tcp_session_duration_seconds_count", &[("listener", "db")]) == 3.0
    });
    let m = scrape(admin_port);
    assert_eq!(
        value(&m, "rampart_connections_accepted_total", &[("listener", "db")]),
        3.0
    );
    assert_eq!(
        value(&m, "rampart_connections_accepted_total", &[("listener", "one")]),
        2.0
    );
    assert_eq!(
        value(
            &m,
            "rampart_connections_refused_total",
            &[("listener", "one"), ("reason", "limit")]
        ),
        1.0
    );
    assert_eq!(value(&m, "rampart_connections_active", &[("listener", "one")]), 1.0);
    assert_eq!(value(&m, "rampart_connections_active", &[("listener", "db")]), 0.0);
    // Each session: "b\n" out, "ping\n" in and back.
    assert_eq!(
        value(&m, "rampart_bytes_total", &[("listener", "db"), ("direction", "in")]),
        15.0
    );
    assert_eq!(
        value(&m, "rampart_bytes_total", &[("listener", "db"), ("direction", "out")]),
        21.0
    );
    let dead_labels = [("upstream", "db"), ("target", dead.as_str()), ("reason", "connect")];
    assert_eq!(value(&m, "rampart_upstream_errors_total", &dead_labels), 1.0);
    assert_eq!(
        value(
            &m,
            "rampart_target_up",
            &[("upstream", "db"), ("target", dead.as_str())]
        ),
        0.0
    );
    let mut opened = live.to_vec();
    opened.push(("kind", "opened"));
    assert_eq!(value(&m, "rampart_upstream_connections_total", &opened), 4.0);
    assert_eq!(
        value(&m, "rampart_target_active", &live),
        1.0,
        "the limited listener's session"
    );
    drop(first);
    eventually("the last session ends", || {
        value(&scrape(admin_port), "rampart_target_active", &live) == 0.0
    });
}

#[test]
fn refusals_by_the_connection_stage_count_by_reason() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let ca = common::tls::Ca::new("Rampart Test CA");
    let pair = ca
        .issue(&common::tls::CertSpec::new(&["edge.example.com"]))
        .write(dir.path(), "edge");
    let (admin_port, port, proxied) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.proxied]\nbind = \"127.0.0.1:{proxied}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         proxy_protocol_from = [\"127.0.0.0/8\"]\n\n{}",
        common::tls::https_config(port, &backend.target(), "", &common::tls::certificates(&[pair]))
    );
    let path = write_file(dir.path(), "rampart.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // Plain HTTP on the TLS port: a 400, and a TLS refusal.
    assert_eq!(send(&mut connect(port), &get("/")).0, 400);
    // No PROXY header from a source that must send one.
    let mut s = connect(proxied);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    eventually("both refusals are counted", || {
        let m = scrape(admin_port);
        value(
            &m,
            "rampart_connections_refused_total",
            &[("listener", "web"), ("reason", "tls")],
        ) == 1.0
            && value(
                &m,
                "rampart_connections_refused_total",
                &[("listener", "proxied"), ("reason", "proxy_header")],
            ) == 1.0
    });
    let m = scrape(admin_port);
    assert_eq!(
        value(
            &m,
            "rampart_connections_refused_total",
            &[("listener", "web"), ("reason", "limit")]
        ),
        0.0
    );
    assert_eq!(
        value(&m, "rampart_connections_accepted_total", &[("listener", "web")]),
        1.0
    );
}

/// `base` and one more label.
fn with<'a>(base: &[(&'a str, &'a str)], key: &'a str, value: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut labels = base.to_vec();
    labels.push((key, value));
    labels
}

/// `GET path` on the admin port, which must answer 200: its JSON.
fn admin_json(port: u16, path: &str) -> serde_json::Value {
    let (status, body) = admin(port, "GET", path, None);
    assert_eq!(status, 200, "{body}");
    body
}
