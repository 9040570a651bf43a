//! A traced backend: an HTTP/1.1 server that, for each request, reads the `traceparent` Rampart
//! sent, answers, and reports a span of its own (service `backend`, a child of that parent) to
//! the collector over OTLP/HTTP JSON when the caller sampled it, as an instrumented service
//! does. Paths: `/fail` answers
//! 500, `/slow` answers after 400 ms, anything else 200.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long `/slow` takes.
pub const SLOW: Duration = Duration::from_millis(400);

pub struct TracedBackend {
    pub addr: SocketAddr,
    /// Requests it is answering now.
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl TracedBackend {
    /// Serves on a port of its own; spans go to `otlp_http` (`http://127.0.0.1:PORT`).
    pub fn start(otlp_http: &str) -> TracedBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let collector: SocketAddr = otlp_http.trim_start_matches("http://").parse().unwrap();
        let in_flight = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let busy = in_flight.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let busy = busy.clone();
                std::thread::spawn(move || serve(conn, collector, &busy));
            }
        });
        TracedBackend { addr, in_flight }
    }

    /// Requests it is answering now (read, not yet answered).
    pub fn busy(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn target(&self) -> String {
        self.addr.to_string()
    }
}

fn serve(conn: TcpStream, collector: SocketAddr, busy: &std::sync::atomic::AtomicUsize) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("/").to_string();
        let mut traceparent = None;
        let mut length = 0usize;
        loop {
            let mut field = String::new();
            if reader.read_line(&mut field).unwrap_or(0) == 0 {
                return;
            }
            let field = field.trim_end();
            if field.is_empty() {
                break;
            }
            let (name, value) = field.split_once(':').unwrap_or((field, ""));
            match name.to_ascii_lowercase().as_str() {
                "traceparent" => traceparent = Some(value.trim().to_string()),
                "content-length" => length = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let start = now_nanos();
        busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let status = match path.as_str() {
            "/fail" => 500,
            "/slow" => {
                std::thread::sleep(SLOW);
                200
            }
            _ => 200,
        };
        // Parent-based sampling, as an instrumented service has it: only a sampled caller's.
        if let Some(parent) = traceparent.filter(|t| t.ends_with("-01")) {
            report(collector, &parent, &path, status, start);
        }
        busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// Posts the backend's span, a child of `traceparent`'s span, to the collector.
fn report(collector: SocketAddr, traceparent: &str, path: &str, status: u16, start: u128) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace_id, parent_id) = (parts[1], parts[2]);
    let span_id = format!("{:016x}", (now_nanos() as u64) | 1);
    let body = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "backend"}}]},
            "scopeSpans": [{
                "scope": {"name": "traced-backend"},
                "spans": [{
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": parent_id,
                    "name": format!("backend {path}"),
                    "kind": 2,
                    "startTimeUnixNano": start.to_string(),
                    "endTimeUnixNano": now_nanos().to_string(),
                    "attributes": [{"key": "http.response.status_code", "value": {"intValue": status.to_string()}}]
                }]
            }]
        }]
    })
    .to_string();
    let mut conn = TcpStream::connect(collector).unwrap();
    let request = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: collector\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the collector refused the backend's span: {answer}"
    );
}
