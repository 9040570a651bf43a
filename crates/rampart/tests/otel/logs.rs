//! Access logs and session records shipped: to rsyslogd as RFC 5424 messages over UDP and TCP,
//! and to an OTLP collector as log records tied to their request's span. A syslog server that is
//! away loses lines, counted, never requests.

use super::{request, tracing_table, Gateway};
use crate::common::http::{HttpBackend, Reply};
use crate::common::telemetry::{Jaeger, Rsyslog};
use crate::common::{free_port, WAIT};

#[test]
fn access_logs_and_session_records_go_to_syslog_over_udp_tcp_and_a_unix_socket() {
    let syslog = Rsyslog::start();
    let backend = HttpBackend::start(Reply::Echo);
    let (tcp_port, unix_port) = (free_port(), free_port());
    let more = format!(
        "[listeners.l4]\nbind = \"127.0.0.1:{tcp_port}\"\nupstream = \"app\"\n\n\
         [listeners.local]\nbind = \"127.0.0.1:{unix_port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"syslog+unix://{}\", format = \"json\" }}\n",
        syslog.unix_path().display()
    );
    let gw = Gateway::start(
        &format!("[global]\nsession_log = \"syslog+tcp://{}\"\n", syslog.tcp_addr()),
        &format!(
            "access_log = {{ path = \"syslog+udp://{}\", format = \"json\" }}",
            syslog.udp_addr()
        ),
        &[backend.target()],
        "",
        &more,
    );
    assert_eq!(gw.get("/over-udp", &[]), 200);
    assert_eq!(request(tcp_port, "/over-tcp", &[]), 200);
    assert_eq!(request(unix_port, "/over-unix", &[]), 200);
    let parsed = syslog.parsed(3);
    let pid = gw.rampart.pid().to_string();
    for m in &parsed {
        // RFC 5424, parsed as such: version 1, facility local0 (16), severity info (6).
        assert_eq!(m["protocol-version"], "1", "{m}");
        assert_eq!(m["app-name"], "rampart", "{m}");
        assert_eq!(m["procid"], pid.as_str(), "{m}");
        assert_eq!(
            (m["syslogfacility"].as_str(), m["syslogseverity"].as_str()),
            (Some("16"), Some("6")),
            "{m}"
        );
    }
    let body = |input: &str| -> serde_json::Value {
        let m = parsed
            .iter()
            .find(|m| m["inputname"] == input)
            .unwrap_or_else(|| panic!("nothing came over {input}: {parsed:?}"));
        serde_json::from_str(m["msg"].as_str().unwrap().trim()).unwrap()
    };
    let access = body("imudp");
    assert_eq!(access["status"], 200);
    assert_eq!(access["path"], "/over-udp");
    let session = body("imtcp");
    assert_eq!(session["listener"], "l4");
    assert_eq!(session["close"], "completed");
    let local = body("imuxsock");
    assert_eq!(local["path"], "/over-unix");
}

#[test]
fn a_syslog_server_that_is_away_loses_lines_counted_and_no_request() {
    let mut syslog = Rsyslog::start();
    let backend = HttpBackend::start(Reply::Echo);
    let gw = Gateway::start(
        "",
        &format!(
            "access_log = {{ path = \"syslog+tcp://{}\", format = \"json\" }}",
            syslog.tcp_addr()
        ),
        &[backend.target()],
        "",
        "",
    );
    assert_eq!(gw.get("/before", &[]), 200);
    syslog.lines(1);
    syslog.stop();
    for _ in 0..10 {
        assert_eq!(gw.get("/while-away", &[]), 200);
    }
    // Handed to the writer within a second (a worker's housekeeping), then lost and counted.
    let deadline = std::time::Instant::now() + WAIT;
    let lost = loop {
        let lost = gw.metric("rampart_log_lines_dropped_total", &[("reason", "syslog_unreachable")]);
        if lost >= 10.0 || std::time::Instant::now() > deadline {
            break lost;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(lost, 10.0);
    // Back: lines flow again (the writer dials again after its quiet second).
    syslog.start_again();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        assert_eq!(gw.get("/after", &[]), 200);
        let text = std::fs::read_to_string(syslog_raw(&syslog)).unwrap_or_default();
        if text.contains("/after") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no line after rsyslogd came back:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Where rsyslogd writes the messages as received.
fn syslog_raw(syslog: &Rsyslog) -> std::path::PathBuf {
    syslog.raw_log_path()
}

#[test]
fn access_logs_and_session_records_go_to_otlp_logs_with_their_span() {
    let jaeger = Jaeger::start();
    let backend = HttpBackend::start(Reply::Echo);
    let tcp_port = free_port();
    let tracing = tracing_table(&jaeger.otlp_grpc_url(), "grpc", "");
    let gw = Gateway::start(
        &format!("[global]\nsession_log = \"otlp\"\n\n{tracing}"),
        "access_log = { path = \"otlp\", format = \"json\" }",
        &[backend.target()],
        "",
        &format!("[listeners.l4]\nbind = \"127.0.0.1:{tcp_port}\"\nupstream = \"app\"\n"),
    );
    let trace = "9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    assert_eq!(gw.get("/shipped", &[("traceparent", &parent)]), 200);
    assert_eq!(request(tcp_port, "/l4", &[]), 200);
    // The collector's debug exporter writes each record it received.
    let log = jaeger.log_once_it_holds("rampart.log: Str(session)");
    let access = log
        .split("LogRecord #")
        .find(|r| r.contains("/shipped"))
        .unwrap_or_else(|| panic!("no access log record:\n{log}"));
    assert!(access.contains("rampart.log: Str(access)"), "{access}");
    assert!(access.contains(&format!("Trace ID: {trace}")), "{access}");
    assert!(access.contains("SeverityText: INFO"), "{access}");
    assert!(access.contains("\"status\":200"), "{access}");
    assert!(log.contains("service.name: Str(rampart-test)"), "{log}");
}
