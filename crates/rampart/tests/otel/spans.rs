//! Spans in Jaeger: the request's server span, a client span per attempt under it, the traced
//! backend's span under that; over OTLP/HTTP and OTLP/gRPC; sampling and tail decisions; a dead
//! collector; refused requests, TCP sessions and a route that is not traced.

use serde_json::Value;

use super::traced_backend::TracedBackend;
use super::{access_lines, request, tracing_table, Gateway};
use crate::common::http::{HttpBackend, Reply, UNAVAILABLE};
use crate::common::telemetry::{tag, Jaeger};
use crate::common::{free_port, Bounded, TOOL_WAIT, WAIT};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn caller(trace: &str, flags: &str) -> String {
    format!("00-{trace}-{CALLER_SPAN}-{flags}")
}

fn spans(trace: &Value) -> Vec<&Value> {
    trace["spans"].as_array().unwrap().iter().collect()
}

fn service<'a>(trace: &'a Value, span: &Value) -> &'a str {
    trace["processes"][span["processID"].as_str().unwrap()]["serviceName"]
        .as_str()
        .unwrap()
}

fn parent(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
        .as_str()
}

/// Rampart's server span of a trace (the traced backend's span is a server span too).
fn rampart_server(trace: &Value) -> &Value {
    spans(trace)
        .into_iter()
        .find(|s| kind(s) == "server" && service(trace, s) == "rampart-test")
        .unwrap_or_else(|| panic!("no server span of Rampart's: {trace}"))
}

fn kind(span: &Value) -> &str {
    tag(span, "span.kind").and_then(Value::as_str).unwrap_or("")
}

/// Jaeger drops leading zero digits of a span id; ids compare as numbers.
fn same_id(a: &str, b: &str) -> bool {
    u64::from_str_radix(a, 16).ok() == u64::from_str_radix(b, 16).ok()
}

#[test]
fn a_request_s_spans_reach_jaeger_linked_to_its_caller_and_its_backend_over_http_and_grpc() {
    for protocol in ["http", "grpc"] {
        let jaeger = Jaeger::start();
        let backend = TracedBackend::start(&jaeger.otlp_http_url());
        let endpoint = match protocol {
            "grpc" => jaeger.otlp_grpc_url(),
            _ => jaeger.otlp_http_url(),
        };
        let gw = Gateway::start(&tracing_table(&endpoint, protocol, ""), "", &[backend.target()], "", "");
        let trace_id = match protocol {
            "grpc" => "0af7651916cd43dd8448eb211c80319c",
            _ => CALLER_TRACE,
        };
        assert_eq!(gw.get("/t?x=1", &[("traceparent", &caller(trace_id, "01"))]), 200);

        let trace = jaeger.trace(trace_id, 3);
        let all = spans(&trace);
        let server = rampart_server(&trace);
        let client = all.iter().find(|s| kind(s) == "client").expect("a client span");
        let theirs = all
            .iter()
            .find(|s| service(&trace, s) == "backend")
            .expect("the backend's span");
        // The links: caller -> Rampart's server span -> its attempt -> the backend.
        assert!(same_id(parent(server).unwrap(), CALLER_SPAN), "{server}");
        assert_eq!(parent(client), server["spanID"].as_str(), "{client}");
        assert_eq!(parent(theirs), client["spanID"].as_str(), "{theirs}");
        // Attributes.
        assert_eq!(server["operationName"], "GET default");
        assert_eq!(tag(server, "http.request.method").unwrap(), "GET");
        assert_eq!(tag(server, "url.path").unwrap(), "/t");
        assert_eq!(tag(server, "server.address").unwrap(), "gw.test");
        assert_eq!(tag(server, "user_agent.original").unwrap(), "otel-test");
        assert_eq!(tag(server, "http.response.status_code").unwrap(), 200);
        assert_eq!(tag(server, "http.route").unwrap(), "default");
        assert_eq!(tag(server, "rampart.listener").unwrap(), "web");
        assert_eq!(tag(server, "client.address").unwrap(), "127.0.0.1");
        assert_eq!(tag(server, "network.protocol.version").unwrap(), "1.1");
        assert!(tag(server, "rampart.attempts").is_none(), "one attempt: not said");
        assert_eq!(client["operationName"], "GET app");
        assert_eq!(tag(client, "server.address").unwrap(), "127.0.0.1");
        assert_eq!(tag(client, "server.port").unwrap(), backend.addr.port());
        assert_eq!(tag(client, "rampart.connection.reused").unwrap(), false);
        assert!(tag(client, "rampart.connect_time_us").is_some(), "{client}");
        assert!(tag(client, "rampart.time_to_first_byte_us").is_some(), "{client}");
        assert_eq!(tag(client, "http.response.status_code").unwrap(), 200);
        let process = &trace["processes"][server["processID"].as_str().unwrap()];
        assert!(tag(process, "service.version").is_some(), "{process}");
        // The access log names the same trace and server span.
        let line = &access_lines(&gw.access_log(), 1)[0];
        assert_eq!(line["trace_id"], trace_id);
        assert!(same_id(
            line["span_id"].as_str().unwrap(),
            server["spanID"].as_str().unwrap()
        ));

        // HTTP/2 from the client: the same spans, its protocol said.
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge"])
            .args([
                "-H",
                &format!("traceparent: {}", caller("11111111111111111111111111111111", "01")),
            ])
            .arg(format!("http://127.0.0.1:{}/h2", gw.port))
            .output_within(TOOL_WAIT)
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
        let trace = jaeger.trace("11111111111111111111111111111111", 3);
        assert_eq!(tag(rampart_server(&trace), "network.protocol.version").unwrap(), "2");
    }
}

#[test]
fn each_attempt_gets_a_client_span_with_its_target_outcome_and_retry_reason() {
    let jaeger = Jaeger::start();
    let good = TracedBackend::start(&jaeger.otlp_http_url());
    let bad = HttpBackend::start(Reply::Raw(UNAVAILABLE));
    let gw = Gateway::start(
        &tracing_table(&jaeger.otlp_http_url(), "http", ""),
        "",
        &[bad.target(), good.target()],
        "retries = 1\nretry_on = [\"503\"]\nretry_pass_over = \"0s\"",
        "",
    );
    // Round robin: one of the two requests meets the 503 first.
    let ids = ["a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"];
    for id in ids {
        assert_eq!(gw.get("/r", &[("traceparent", &caller(id, "01"))]), 200);
    }
    // The access log says which one was retried; its trace has four spans.
    let lines = access_lines(&gw.access_log(), 2);
    let index = lines
        .iter()
        .position(|l| l["upstream_attempts"].as_array().map_or(0, Vec::len) == 2)
        .unwrap_or_else(|| panic!("no request was retried: {lines:?}"));
    let retried = jaeger.trace(ids[index], 4);
    let all = spans(&retried);
    let server = rampart_server(&retried);
    let mut clients: Vec<&&Value> = all.iter().filter(|s| kind(s) == "client").collect();
    clients.sort_by_key(|s| tag(s, "http.request.resend_count").and_then(Value::as_i64).unwrap_or(0));
    let (first, second) = (clients[0], clients[1]);
    assert_eq!(parent(first), server["spanID"].as_str());
    assert_eq!(parent(second), server["spanID"].as_str());
    assert_eq!(tag(first, "server.port").unwrap(), bad.addr.port());
    assert_eq!(tag(first, "http.response.status_code").unwrap(), 503);
    assert_eq!(tag(first, "otel.status_code").unwrap(), "ERROR");
    assert!(tag(first, "rampart.retry_reason").is_some(), "{first}");
    assert_eq!(tag(second, "server.port").unwrap(), good.addr.port());
    assert_eq!(tag(second, "http.request.resend_count").unwrap(), 1);
    assert_eq!(tag(second, "http.response.status_code").unwrap(), 200);
    assert_eq!(tag(server, "rampart.attempts").unwrap(), 2);
    // The backend's span hangs under the attempt that reached it.
    let theirs = all.iter().find(|s| service(&retried, s) == "backend").unwrap();
    assert_eq!(parent(theirs), second["spanID"].as_str());
}

#[test]
fn sampling_is_parent_based_and_tail_decisions_keep_failures_and_slow_requests() {
    let jaeger = Jaeger::start();
    let backend = TracedBackend::start(&jaeger.otlp_http_url());
    let tracing = tracing_table(
        &jaeger.otlp_http_url(),
        "http",
        "sampling = 0\nerrors = true\nslower_than = \"300ms\"",
    );
    let gw = Gateway::start(&tracing, "", &[backend.target()], "", "");
    // In order: not sampled (ratio 0), the caller's "not sampled", the caller's "sampled", a 500,
    // a slow answer.
    assert_eq!(gw.get("/fast", &[]), 200);
    let unsampled = "cccccccccccccccccccccccccccccccc";
    assert_eq!(gw.get("/fast", &[("traceparent", &caller(unsampled, "00"))]), 200);
    let sampled = "dddddddddddddddddddddddddddddddd";
    assert_eq!(gw.get("/fast", &[("traceparent", &caller(sampled, "01"))]), 200);
    assert_eq!(gw.get("/fail", &[]), 500);
    assert_eq!(gw.get("/slow", &[]), 200);
    let lines = access_lines(&gw.access_log(), 5);
    let id = |i: usize| lines[i]["trace_id"].as_str().unwrap().to_string();

    // Parent-based: the caller's decision holds, and the backend was told it.
    let trace = jaeger.trace(sampled, 3);
    assert!(spans(&trace).iter().any(|s| service(&trace, s) == "backend"));
    // Kept at the end: the failure (its server span an error) and the slow one.
    let failed = jaeger.trace(&id(3), 2);
    let server = rampart_server(&failed);
    assert_eq!(tag(server, "otel.status_code").unwrap(), "ERROR");
    assert_eq!(tag(server, "http.response.status_code").unwrap(), 500);
    let slow = jaeger.trace(&id(4), 2);
    let server = rampart_server(&slow);
    assert!(server["duration"].as_u64().unwrap() >= 300_000, "{server}");
    // The spans of the first two were never sent: they ended before the ones Jaeger has, on the
    // same worker, whose exports go in order.
    for never in [id(0), unsampled.to_string()] {
        let (status, _) = jaeger.get(&format!("/api/traces/{never}"));
        assert_eq!(status, 404, "trace {never} should not have been exported");
    }
    assert_eq!(id(1), unsampled);
}

#[test]
fn a_dead_collector_loses_spans_counted_and_no_request() {
    let backend = HttpBackend::start(Reply::Echo);
    // Nothing listens there.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let gw = Gateway::start(
        &tracing_table(&dead, "http", "batch = 4"),
        "",
        &[backend.target()],
        "",
        "",
    );
    for _ in 0..40 {
        assert_eq!(gw.get("/", &[]), 200);
    }
    let deadline = std::time::Instant::now() + WAIT;
    let lost = loop {
        let lost = gw.metric("rampart_telemetry_dropped_total", &[("signal", "spans")]);
        if lost >= 80.0 || std::time::Instant::now() > deadline {
            break lost;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Two spans a request (server and client), each lost and counted.
    assert_eq!(lost, 80.0);
    assert_eq!(
        gw.metric("rampart_telemetry_exported_total", &[("signal", "spans")]),
        0.0
    );
    assert!(gw.metric("rampart_telemetry_dropped_total", &[("reason", "export_failed")]) > 0.0);
}

#[test]
fn refused_requests_and_tcp_sessions_get_spans_and_an_untraced_route_passes_the_context_on() {
    let jaeger = Jaeger::start();
    let backend = HttpBackend::start(Reply::Echo);
    let tcp_port = free_port();
    let more = format!(
        "[[listeners.web.routes]]\nmatch.path_prefix = \"/quiet\"\nupstream = \"app\"\ntracing = false\n\n\
         [listeners.l4]\nbind = \"127.0.0.1:{tcp_port}\"\nupstream = \"app\"\n"
    );
    let gw = Gateway::start(
        &tracing_table(&jaeger.otlp_http_url(), "http", ""),
        "",
        &[backend.target()],
        "",
        &more,
    );

    // Not traced: the caller's context goes on untouched, and nothing reaches Jaeger.
    let quiet = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";
    assert_eq!(gw.get("/quiet", &[("traceparent", &caller(quiet, "01"))]), 200);
    let head = backend.next_head().to_ascii_lowercase();
    assert!(
        head.contains(&format!("traceparent: {}", caller(quiet, "01"))),
        "{head}"
    );

    // Refused before routing: a request line that is not HTTP.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    std::io::Write::write_all(&mut conn, b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut conn, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A TCP session through the L4 listener.
    let status = request(tcp_port, "/through-l4", &[]);
    assert_eq!(status, 200);

    let traces = jaeger.traces_of_at_least("rampart-test", 2);
    let all: Vec<&Value> = traces.iter().flat_map(|t| spans(t)).collect();
    let refused = all
        .iter()
        .find(|s| tag(s, "http.response.status_code") == Some(&Value::from(400)))
        .unwrap_or_else(|| panic!("no span of the refused request: {traces:?}"));
    assert_eq!(tag(refused, "rampart.listener").unwrap(), "web");
    assert!(tag(refused, "error.type").is_some(), "{refused}");
    // Its access log line names its trace.
    let lines = access_lines(&gw.access_log(), 2);
    let line = lines.iter().find(|l| l["status"] == 400).expect("the 400's line");
    let logged = u128::from_str_radix(line["trace_id"].as_str().unwrap(), 16).unwrap();
    assert_eq!(
        Some(logged),
        u128::from_str_radix(refused["traceID"].as_str().unwrap(), 16).ok()
    );
    let tcp = all
        .iter()
        .find(|s| s["operationName"] == "TCP l4")
        .unwrap_or_else(|| panic!("no span of the TCP session: {traces:?}"));
    assert_eq!(tag(tcp, "rampart.close").unwrap(), "completed");
    assert!(tag(tcp, "rampart.bytes_up").and_then(Value::as_i64).unwrap() > 0);
    assert_eq!(tag(tcp, "server.port").unwrap(), backend.addr.port());
    assert_eq!(jaeger.get(&format!("/api/traces/{quiet}")).0, 404);
}

#[test]
fn the_last_spans_reach_the_collector_when_rampart_stops() {
    let jaeger = Jaeger::start();
    let backend = HttpBackend::start(Reply::Echo);
    // Exports would wait a minute: only the exit sends these.
    let tracing =
        tracing_table(&jaeger.otlp_http_url(), "http", "").replace("interval = \"50ms\"", "interval = \"60s\"");
    let mut gw = Gateway::start(&tracing, "", &[backend.target()], "", "");
    let last = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0";
    assert_eq!(gw.get("/last", &[("traceparent", &caller(last, "01"))]), 200);
    assert_eq!(gw.rampart.stop(), 0);
    let trace = jaeger.trace(last, 2);
    rampart_server(&trace);
}

#[test]
fn a_tls_listener_s_server_span_says_what_the_handshake_agreed() {
    let jaeger = Jaeger::start();
    let backend = HttpBackend::start(Reply::Echo);
    let ca = crate::common::tls::Ca::new("otel test CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca
        .issue(&crate::common::tls::CertSpec::new(&["gw.test"]))
        .write(dir.path(), "gw");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let more = format!(
        "[listeners.web.tls]\n{}\n",
        crate::common::tls::certificates(&[(cert, key)])
    );
    let gw = Gateway::start(
        &tracing_table(&jaeger.otlp_http_url(), "http", ""),
        "",
        &[backend.target()],
        "",
        &more,
    );
    let trace_id = "7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e";
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--http1.1",
            "--tlsv1.3",
            "--cacert",
            &ca_file,
        ])
        .args(["--resolve", &format!("gw.test:{}:127.0.0.1", gw.port)])
        .args(["-H", &format!("traceparent: {}", caller(trace_id, "01"))])
        .arg(format!("https://gw.test:{}/secure", gw.port))
        .output_within(TOOL_WAIT)
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let trace = jaeger.trace(trace_id, 2);
    let server = rampart_server(&trace);
    assert_eq!(tag(server, "url.scheme").unwrap(), "https");
    assert_eq!(tag(server, "tls.protocol.name").unwrap(), "tls");
    assert_eq!(tag(server, "tls.protocol.version").unwrap(), "1.3");
    assert!(
        tag(server, "tls.cipher")
            .and_then(Value::as_str)
            .is_some_and(|c| c.starts_with("TLS13_")),
        "{server}"
    );
    assert_eq!(tag(server, "tls.client.server_name").unwrap(), "gw.test");
    assert_eq!(tag(server, "tls.next_protocol").unwrap(), "http/1.1");
}

#[test]
fn a_filter_s_refusal_and_a_wait_in_the_queue_are_span_events() {
    let jaeger = Jaeger::start();
    let backend = TracedBackend::start(&jaeger.otlp_http_url());
    let more = "[[listeners.web.routes]]\nmatch.path_prefix = \"/limited\"\nupstream = \"app\"\n\
                filters = [{ type = \"rate_limit\", rate = \"1/m\", burst = 1 }]\n";
    let gw = Gateway::start(
        &tracing_table(&jaeger.otlp_http_url(), "http", ""),
        "",
        &[backend.target()],
        "max_requests_per_target = 1",
        more,
    );
    // The second request to the limited route is refused by the filter.
    assert_eq!(gw.get("/limited", &[]), 200);
    let refused = "abababababababababababababababab";
    assert_eq!(gw.get("/limited", &[("traceparent", &caller(refused, "01"))]), 429);
    let trace = jaeger.trace(refused, 1);
    let server = rampart_server(&trace);
    let event = server["logs"]
        .as_array()
        .and_then(|logs| {
            logs.iter()
                .find(|l| l["fields"].to_string().contains("rampart.filter.refused"))
        })
        .unwrap_or_else(|| panic!("no refusal event: {server}"));
    assert!(event["fields"].to_string().contains("rate_limited"), "{event}");

    // Two slow requests at once to a target that takes one: the second waits in the queue.
    let (slow, queued) = ("cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", "efefefefefefefefefefefefefefefef");
    let port = gw.port;
    let first = std::thread::spawn(move || request(port, "/slow", &[("traceparent", &caller(slow, "01"))]));
    wait_until_busy(&backend);
    assert_eq!(gw.get("/slow", &[("traceparent", &caller(queued, "01"))]), 200);
    assert_eq!(first.join().unwrap(), 200);
    let waited: Vec<Value> = [slow, queued]
        .iter()
        .map(|id| jaeger.trace(id, 3))
        .filter_map(|t| {
            let server = rampart_server(&t).clone();
            server["logs"]
                .as_array()?
                .iter()
                .find(|l| l["fields"].to_string().contains("rampart.queue.wait"))
                .cloned()
        })
        .collect();
    assert_eq!(waited.len(), 1, "one of the two waited its turn: {waited:?}");
    assert!(
        waited[0]["fields"].to_string().contains("rampart.queue.waited_us"),
        "{waited:?}"
    );
}

/// Waits until the traced backend is serving a request (the first slow one took the target's
/// one slot).
fn wait_until_busy(backend: &TracedBackend) {
    crate::common::tls::eventually("the backend serves the first request", || backend.busy() > 0);
}

#[test]
fn an_http3_request_continues_its_trace_and_says_its_protocol() {
    let jaeger = Jaeger::start();
    let backend = TracedBackend::start(&jaeger.otlp_http_url());
    let dir = tempfile::tempdir().unwrap();
    let tls = crate::http3::tls(dir.path());
    let gw = Gateway::start(
        &tracing_table(&jaeger.otlp_http_url(), "http", ""),
        "http3 = true",
        &[backend.target()],
        "",
        &tls.table,
    );
    let trace_id = "3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a";
    let traceparent = format!("traceparent: {}", caller(trace_id, "01"));
    let (url, connect) = (
        format!("https://localhost:{}/over-h3", gw.port),
        format!("127.0.0.1:{}", gw.port),
    );
    let got = crate::common::h3::aioquic(&[
        &url,
        "--ca",
        &tls.ca_file,
        "--connect",
        &connect,
        "--header",
        &traceparent,
    ])
    .unwrap_or_else(|e| panic!("aioquic: {e}"));
    assert_eq!(got[0].status, 200);
    let trace = jaeger.trace(trace_id, 3);
    let server = rampart_server(&trace);
    assert_eq!(tag(server, "network.protocol.version").unwrap(), "3");
    assert!(same_id(parent(server).unwrap(), CALLER_SPAN), "{server}");
    let client = spans(&trace).into_iter().find(|s| kind(s) == "client").unwrap();
    let theirs = spans(&trace)
        .into_iter()
        .find(|s| service(&trace, s) == "backend")
        .unwrap();
    assert_eq!(parent(client), server["spanID"].as_str());
    assert_eq!(parent(theirs), client["spanID"].as_str());
}
