//! Every end-to-end test of the binary in one test binary: each file of this folder is a
//! module of it (one build and one link instead of one per file, which took most of a fresh
//! clone's test build). A new test file is declared below; `every_test_file_is_declared_here`
//! fails until it is. Run one file's tests with `cargo test -p rampart --test e2e FILE::`.

mod acme;
mod acme_dns01;
mod acme_fleet;
mod acme_renewal;
mod admin_api;
mod cache_suite;
mod cli;
mod common;
mod config_files;
mod control_etcd;
#[path = "cors_browser/main.rs"]
mod cors_browser;
mod dns_targets;
mod error_pages;
mod etcd_config;
mod filters_auth;
mod filters_basic;
mod filters_compress;
mod filters_jwt;
mod filters_rate_limit;
mod fleet;
mod grafana_dashboard;
mod health_h2c;
#[path = "http2/main.rs"]
mod http2;
#[path = "http3/main.rs"]
mod http3;
mod http_balancing;
mod http_cache;
mod http_errors;
mod http_idle;
mod http_limits;
mod http_mirror;
mod http_outliers;
mod http_proxy;
mod http_retries;
mod http_retry_bodies;
mod http_routing;
mod http_stage;
mod http_traffic;
mod jwks_h2;
mod l4_balancing;
mod l4_failures;
mod l4_relay;
mod lifecycle;
mod logs;
mod metrics_traffic;
#[path = "otel/main.rs"]
mod otel;
mod static_files;
#[path = "status_page/main.rs"]
mod status_page;
mod tcp_routes;
mod tcp_routes_servers;
mod tls_bad_input;
mod tls_check;
mod tls_client_auth;
mod tls_listener;
mod tls_reload;
mod tls_tcp;
mod tls_testssl;
mod tls_upstream;
mod tracing;
mod udp_balancing;
#[path = "upgrade/main.rs"]
mod upgrade;

/// Each `.rs` file and each folder with a `main.rs` here is a module of this binary: with
/// `autotests = false` a file that is not declared above would never be built or run.
#[test]
fn every_test_file_is_declared_here() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(here.join("e2e.rs")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&here).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let is_test = match path.extension() {
            Some(ext) => ext == "rs" && name != "e2e",
            None => path.join("main.rs").exists(),
        };
        if is_test && !root.contains(&format!("\nmod {name};\n")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "test files not declared in tests/e2e.rs: {missing:?}"
    );
}
