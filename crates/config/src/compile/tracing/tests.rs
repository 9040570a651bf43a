use rampart_model::trace::OtlpProtocol;

use crate::compile::{compile_toml, Compiled, LiveState};
use crate::error::ConfigErrors;

const BASE: &str = "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\
                    [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";

fn compile(text: &str) -> Result<Compiled, ConfigErrors> {
    compile_toml("test.toml", &format!("{text}\n{BASE}"), &mut LiveState::default())
}

fn errors(text: &str) -> Vec<String> {
    match compile(text) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn an_endpoint_becomes_an_internal_upstream_with_the_signals_paths() {
    let c = compile(
        "[tracing]\nendpoint = \"http://127.0.0.1:4318/base/\"\nservice_name = \"edge\"\n\
         resource = { \"deployment.environment\" = \"prod\", \"service.name\" = \"edge-2\" }\n\
         errors = true\nslower_than = \"250ms\"\nqueue = 100\nbatch = 10\ninterval = \"200ms\"",
    )
    .unwrap();
    let t = c.snapshot.tracing.as_deref().unwrap();
    assert!(t.errors);
    assert_eq!(t.slower_than, Some(std::time::Duration::from_millis(250)));
    let e = t.export.as_ref().unwrap();
    assert_eq!(e.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(
        (e.traces_path.as_str(), e.logs_path.as_str()),
        ("/base/v1/traces", "/base/v1/logs")
    );
    assert_eq!(e.authority, "127.0.0.1:4318");
    assert_eq!(
        (e.queue, e.batch, e.interval),
        (100, 10, std::time::Duration::from_millis(200))
    );
    // A resource attribute of the table wins over the one `service_name` sets.
    assert_eq!(e.resource[0], ("service.name".to_string(), "edge-2".to_string()));
    assert!(e
        .resource
        .iter()
        .any(|(k, v)| k == "deployment.environment" && v == "prod"));
    let up = &c.snapshot.upstreams[e.upstream];
    assert!(up.is_internal(), "{}", up.name);
    assert_eq!(up.targets[0].name, "127.0.0.1:4318");

    let grpc = compile("[tracing]\nendpoint = \"http://127.0.0.1:4317\"\nprotocol = \"grpc\"").unwrap();
    let g = grpc.snapshot.tracing.as_deref().unwrap().export.clone().unwrap();
    assert_eq!(g.protocol, OtlpProtocol::Grpc);
    assert_eq!(
        g.traces_path,
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    );
    assert_eq!(
        grpc.snapshot.upstreams[g.upstream].http.protocol,
        rampart_model::UpstreamProtocol::H2c
    );
}

#[test]
fn bad_tracing_keys_are_refused_where_they_are() {
    let cases = [
        (
            "[tracing]\nendpoint = \"ftp://x:1\"",
            "test.toml:2:12: `ftp://x:1` is not an http:// or https:// URL",
        ),
        (
            "[tracing]\nendpoint = \"http://127.0.0.1:1\"\nprotocol = \"thrift\"",
            "test.toml:3:12: unknown OTLP protocol `thrift`",
        ),
        (
            "[tracing]\nerrors = true",
            "test.toml:2:10: [tracing] `errors` needs an `endpoint`",
        ),
        (
            "[tracing]\nendpoint = \"http://127.0.0.1:1\"\nqueue = 10\nbatch = 20",
            "test.toml:4:9: batch = 20 is larger than queue = 10",
        ),
        (
            "[tracing]\nendpoint = \"http://127.0.0.1:1\"\nca = \"x.pem\"",
            "test.toml:3:6: `ca` is for an https:// `endpoint`",
        ),
    ];
    for (text, expected) in cases {
        let found = errors(text);
        assert!(found.iter().any(|e| e.starts_with(expected)), "{text}: {found:?}");
    }
}

#[test]
fn listeners_and_routes_switch_tracing_off_and_logs_go_to_syslog_or_otlp() {
    let text = "[tracing]\nendpoint = \"http://127.0.0.1:4318\"\n\
                [global]\nsession_log = \"syslog+udp://127.0.0.1:514\"\n\
                [listeners.quiet]\nbind = \"127.0.0.1:3\"\nupstream = \"app\"\ntracing = false\n\
                [listeners.api]\nbind = \"127.0.0.1:4\"\nprotocol = \"http\"\n\
                access_log = { path = \"otlp\" }\n\
                [[listeners.api.routes]]\nmatch.path_prefix = \"/health\"\nupstream = \"app\"\ntracing = false\n";
    let c = compile(text).unwrap();
    let listener = |name: &str| c.snapshot.listeners.iter().find(|l| l.name == name).unwrap();
    assert!(!listener("quiet").traced);
    assert!(listener("web").traced);
    let api = listener("api");
    assert!(api.traced);
    assert!(!api.http().unwrap().routes[0].traced);
    assert_eq!(
        c.snapshot.session_log.as_deref(),
        Some(std::path::Path::new("syslog+udp://127.0.0.1:514"))
    );

    // OTLP logs need a collector; a syslog address must be IP:PORT; TCP routes have no switch.
    let found =
        errors("[listeners.api]\nbind = \"127.0.0.1:4\"\nprotocol = \"http\"\naccess_log = { path = \"otlp\" }");
    assert!(
        found
            .iter()
            .any(|e| e.contains("access log to `otlp` needs an OTLP collector")),
        "{found:?}"
    );
    let found = errors("[global]\nsession_log = \"syslog+udp://logs.example:514\"");
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("test.toml:2:15: session log: `syslog+udp://logs.example:514`")),
        "{found:?}"
    );
    let found = errors(
        "[listeners.l4]\nbind = \"127.0.0.1:5\"\nupstream = \"app\"\n[[listeners.l4.routes]]\nupstream = \"app\"\ntracing = false",
    );
    assert!(
        found
            .iter()
            .any(|e| e.contains("`tracing` is for routes of HTTP listeners")),
        "{found:?}"
    );
}
