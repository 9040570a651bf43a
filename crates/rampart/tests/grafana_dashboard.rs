//! contrib/grafana/rampart.json against the metrics Rampart really exports. No Grafana can be
//! installed here (it is not in Debian), so the dashboard is checked as JSON: its shape, its
//! variables, and every metric and label its queries name, against a scrape of a running Rampart
//! that has carried HTTP and TCP traffic.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use common::http::{get, send, HttpBackend, Reply};
use common::scrape::scrape;
use common::tls::eventually;
use common::*;
use regex::Regex;

/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

#[test]
fn the_dashboard_queries_only_metrics_and_labels_rampart_exports() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/grafana/rampart.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard is JSON");
    let exported = exported_metrics();

    let vars: BTreeSet<String> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    let mut queries: Vec<String> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["query"].as_str().filter(|q| q.contains('(')).map(str::to_string))
        .collect();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "panel ids are unique");
        assert!(panel["gridPos"]["w"].as_u64().unwrap() > 0);
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("a panel has queries");
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        queries.extend(targets.iter().map(|t| t["expr"].as_str().unwrap().to_string()));
    }
    assert!(queries.len() > 20, "{} queries", queries.len());

    let variable = Regex::new(r"\$\{?([a-z_]+)").unwrap();
    let metric = Regex::new(r"\b((?:rampart|process)_[a-z_]+)\b(\{[^}]*\})?").unwrap();
    let label_key = Regex::new(r"([a-z_]+)\s*(?:=~|!~|!=|=)").unwrap();
    let grouping = Regex::new(r"\bby \(([^)]*)\)").unwrap();
    let mut named = BTreeSet::new();
    for query in &queries {
        for v in variable.captures_iter(query) {
            let name = &v[1];
            assert!(
                vars.contains(name) || name.starts_with("__"),
                "{query}: ${name} is not a dashboard variable"
            );
        }
        let mut labels_here: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
        labels_here.insert("le");
        for m in metric.captures_iter(query) {
            let name = &m[1];
            let labels = exported
                .get(name)
                .unwrap_or_else(|| panic!("{query}: Rampart exports no {name}"));
            named.insert(name.to_string());
            labels_here.extend(labels.iter().map(String::as_str));
            if let Some(selector) = m.get(2) {
                for key in label_key.captures_iter(selector.as_str()) {
                    let key = &key[1];
                    assert!(
                        labels.contains(key) || TARGET_LABELS.contains(&key),
                        "{query}: {name} has no label {key} (it has {labels:?})"
                    );
                }
            }
        }
        for by in grouping.captures_iter(query) {
            for key in by[1].split(',').map(str::trim) {
                assert!(labels_here.contains(key), "{query}: grouping by unknown label {key}");
            }
        }
    }
    // The dashboard shows the families the issue names, not a few of them.
    for family in [
        "rampart_http_requests_total",
        "rampart_http_request_duration_seconds_bucket",
        "rampart_upstream_response_duration_seconds_bucket",
        "rampart_upstream_requests_total",
        "rampart_upstream_errors_total",
        "rampart_upstream_retries_total",
        "rampart_upstream_connections_total",
        "rampart_target_up",
        "rampart_target_active",
        "rampart_connections_active",
        "rampart_connections_accepted_total",
        "rampart_connections_refused_total",
        "rampart_bytes_total",
        "rampart_tcp_session_duration_seconds_bucket",
        "rampart_config_reloads_total",
        "process_cpu_seconds_total",
    ] {
        assert!(named.contains(family), "the dashboard does not show {family}");
    }
}

/// Every sample name a running Rampart exports after HTTP and TCP traffic, with its label names.
fn exported_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let web = HttpBackend::start(Reply::Echo);
    let db = Backend::start("db", Behavior::TagEcho);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, http_port, tcp_port) = (free_port(), free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{http_port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [listeners.db]\nbind = \"127.0.0.1:{tcp_port}\"\nupstream = \"db\"\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n\n[upstreams.db]\ntargets = [\"{}\"]\n",
        web.target(),
        db.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &text);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(send(&mut connect(http_port), &get("/")).0, 200);
    let mut session = connect(tcp_port);
    assert_eq!(read_line(&mut session), "db");
    session.write_all(b"x").unwrap();
    let mut back = [0u8; 1];
    session.read_exact(&mut back).unwrap();
    drop(session);
    eventually("the TCP session is counted", || {
        scrape(admin_port)
            .iter()
            .any(|(n, _, v)| n == "rampart_tcp_session_duration_seconds_count" && *v == 1.0)
    });
    let mut exported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, labels, _) in scrape(admin_port) {
        exported
            .entry(name)
            .or_default()
            .extend(labels.into_iter().map(|(k, _)| k));
    }
    exported
}
