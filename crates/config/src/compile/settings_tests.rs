//! The upstream and route settings of issues 28 and 29 as the compiler takes and refuses them:
//! the ACME challenge picked to work, `retry_on`, `retry_max_body_size` and `retry_budget`,
//! `outlier_detection`, a route's `mirror`.

use std::time::Duration;

use super::tests::{compile, errors, GOOD};

#[test]
fn acme_picks_http_01_with_a_plain_http_listener_and_tls_alpn_01_without() {
    const TLS_ONLY: &str = r#"
[acme]
storage = "acme"

[listeners.secure]
bind = "127.0.0.1:8443"
protocol = "http"

[listeners.secure.tls]
acme = ["a.example"]

[[listeners.secure.routes]]
respond = { status = 200 }
"#;
    const PLAIN: &str = r#"
[listeners.plain]
bind = "127.0.0.1:8080"
protocol = "http"

[[listeners.plain.routes]]
respond = { status = 200 }
"#;
    let challenge = |src: &str| compile(src).unwrap().snapshot.acme.unwrap().challenge;
    use rampart_model::acme::AcmeChallenge;
    assert_eq!(challenge(TLS_ONLY), AcmeChallenge::TlsAlpn01);
    assert_eq!(challenge(&format!("{TLS_ONLY}{PLAIN}")), AcmeChallenge::Http01);
    let chosen = TLS_ONLY.replace("storage = \"acme\"", "storage = \"acme\"\nchallenge = \"http-01\"");
    assert_eq!(challenge(&chosen), AcmeChallenge::Http01, "a challenge given is kept");
}

#[test]
fn retry_on_and_the_retry_budget_compile_and_bad_values_are_refused_where_they_are() {
    let http_good = GOOD.replace("upstream = \"app\"", "protocol = \"http\"\nupstream = \"app\"");
    let src = http_good.replace(
        "[upstreams.app]\n",
        "[upstreams.app]\nretry_on = [\"timeout\", \"gateway-error\", \"429\"]\nretry_budget = { percent = 50 }\nretry_pass_over = \"0s\"\n",
    );
    let c = compile(&src).unwrap();
    let http = c.snapshot.upstreams[0].http;
    assert!(http.retry_on.timeout && !http.retry_on.reset);
    assert!(http.retry_on.status(429) && http.retry_on.status(503) && !http.retry_on.status(500));
    assert_eq!(
        (http.retry_budget.percent, http.retry_budget.min_retries_per_second),
        (50, 10)
    );
    assert_eq!(http.retry_pass_over, std::time::Duration::ZERO, "0s: never passed over");

    let bad = http_good.replace(
        "[upstreams.app]\n",
        "[upstreams.app]\nretry_on = [\"503\", \"teapot\", \"200\"]\nretry_budget = { percent = 150, min_retrying = 3 }\n",
    );
    let errors = errors(&bad);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("test.toml:8:20: retry_on: `teapot` is not one of")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("test.toml:8:30: retry_on: `200`")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("test.toml:9:28: retry_budget percent = 150 is out of range (0 to 100)")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("test.toml:9:48: retry_budget: `min_retrying` is gone")),
        "{errors:?}"
    );
}

#[test]
fn kept_bodies_and_non_idempotent_retries_compile_and_a_bad_size_is_refused_where_it_is() {
    let http_good = GOOD.replace("upstream = \"app\"", "protocol = \"http\"\nupstream = \"app\"");
    let c = compile(&http_good).unwrap();
    let http = c.snapshot.upstreams[0].http;
    assert_eq!(http.retry_body_max, 64 * 1024);
    assert!(!http.retry_on.non_idempotent);
    let src = http_good.replace(
        "[upstreams.app]\n",
        "[upstreams.app]\nretry_on = [\"non-idempotent\", \"503\"]\nretry_max_body_size = \"1MiB\"\n",
    );
    let http = compile(&src).unwrap().snapshot.upstreams[0].http;
    assert!(http.retry_on.non_idempotent && http.retry_on.status(503));
    assert_eq!(http.retry_body_max, 1 << 20);
    let bad = http_good.replace("[upstreams.app]\n", "[upstreams.app]\nretry_max_body_size = \"lots\"\n");
    let errors = errors(&bad);
    assert!(errors.iter().any(|e| e.contains("test.toml:8:23: ")), "{errors:?}");
}

#[test]
fn outlier_detection_compiles_and_bad_values_are_refused_where_they_are() {
    let http_good = GOOD.replace("upstream = \"app\"", "protocol = \"http\"\nupstream = \"app\"");
    let src = http_good.replace(
        "[upstreams.app]\n",
        "[upstreams.app]\noutlier_detection = { consecutive_5xx = 3, slow_response = \"250ms\" }\n",
    );
    let o = compile(&src).unwrap().snapshot.upstreams[0].outlier.unwrap();
    assert_eq!((o.consecutive, o.slow_response), (3, Some(Duration::from_millis(250))));
    assert_eq!((o.base_ejection, o.max_ejection_percent), (Duration::from_secs(10), 50));
    assert!(compile(&http_good).unwrap().snapshot.upstreams[0].outlier.is_none());

    let bad = http_good.replace(
        "[upstreams.app]\n",
        "[upstreams.app]\noutlier_detection = { consecutive_5xx = 0, base_ejection_time = \"1m\", max_ejection_time = \"10s\" }\n",
    );
    let errors = errors(&bad);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("test.toml:8:41: consecutive_5xx = 0 is out of range")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("max_ejection_time is shorter than base_ejection_time")),
        "{errors:?}"
    );
}

#[test]
fn a_mirror_needs_a_proxying_route_and_a_known_upstream() {
    let route = |extra: &str| {
        format!(
            "[listeners.web]\nbind = \"127.0.0.1:7777\"\nprotocol = \"http\"\n\n\
             [[listeners.web.routes]]\n{extra}\n\n[upstreams.app]\ntargets = [\"127.0.0.1:9001\"]\n"
        )
    };
    let c = compile(&route(
        "upstream = \"app\"\nmirror = { upstream = \"app\", percent = 10 }",
    ))
    .unwrap();
    let m = c.snapshot.listeners[0].http().unwrap().routes[0]
        .mirror
        .clone()
        .unwrap();
    assert_eq!((m.upstream, m.percent), (0, 10));
    let refused = errors(&route("respond = { status = 200 }\nmirror = { upstream = \"app\" }"));
    assert!(
        refused
            .iter()
            .any(|e| e.contains("test.toml:7:10: route `web#1`: `mirror` is for routes that proxy")),
        "{refused:?}"
    );
    let unknown = errors(&route("upstream = \"app\"\nmirror = { upstream = \"ap\" }"));
    assert!(
        unknown
            .iter()
            .any(|e| e.contains("test.toml:7:23: route `web#1`: mirror to unknown upstream `ap`")),
        "{unknown:?}"
    );
}

#[test]
fn a_route_has_its_own_retries_and_retry_on_and_they_are_refused_where_they_cannot_apply() {
    const ROUTES: &str = r#"
[listeners.web]
bind = "127.0.0.1:8080"
protocol = "http"

[[listeners.web.routes]]
match = { path_prefix = "/api/" }
upstream = "app"
retries = 3
retry_on = ["503", "timeout"]

[[listeners.web.routes]]
upstream = "app"

[upstreams.app]
targets = ["127.0.0.1:9001"]
"#;
    let c = compile(ROUTES).unwrap();
    let http = c.snapshot.listeners[0].http().unwrap();
    let api = http.routes[0].retry;
    assert_eq!(api.retries, Some(3));
    let on = api.retry_on.unwrap();
    assert!(on.status(503) && on.timeout && !on.reset);
    assert_eq!(
        http.routes[1].retry,
        Default::default(),
        "the other route keeps the upstream's"
    );

    let answering = ROUTES.replace(
        "upstream = \"app\"\nretries = 3",
        "respond = { status = 200 }\nretries = 3",
    );
    let errors = errors(&answering);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("test.toml:9:11: route `") && e.contains("are for routes that proxy")),
        "{errors:?}"
    );
    let bad = ROUTES.replace("retries = 3", "retries = 30");
    assert!(
        errors_of(&bad, "test.toml:9:11: retries = 30 is out of range"),
        "{:?}",
        super::tests::errors(&bad)
    );
}

fn errors_of(src: &str, what: &str) -> bool {
    errors(src).iter().any(|e| e.contains(what))
}

#[test]
fn tracing_is_off_unless_its_table_is_there_and_its_ratio_is_checked() {
    let base = "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\
                [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let compile = |extra: &str| {
        crate::compile::compile_toml(
            "test.toml",
            &format!("{extra}\n{base}"),
            &mut crate::compile::LiveState::default(),
        )
    };
    assert!(compile("").unwrap().snapshot.tracing.is_none());
    let on = compile("[tracing]").unwrap();
    assert_eq!(on.snapshot.tracing.as_deref().map(|t| t.sampling), Some(1.0));
    let ratio = compile("[tracing]\nsampling = 0.01").unwrap();
    assert_eq!(ratio.snapshot.tracing.as_deref().map(|t| t.sampling), Some(0.01));
    let errors: Vec<String> = compile("[tracing]\nsampling = 2.5")
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("test.toml:2:12: sampling = 2.5 is out of range (0 to 1)")),
        "{errors:?}"
    );
    assert!(
        compile("[tracing]\nexporter = \"otlp\"").is_err(),
        "unknown keys are errors"
    );
}
