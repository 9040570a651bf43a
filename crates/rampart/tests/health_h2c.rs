//! Active HTTP health checks speak the upstream's protocol (they go through the internal client):
//! an upstream that speaks only HTTP/2 in clear (`h2c`) is checked over HTTP/2, taken down when
//! its check path answers 503 and brought back when it answers 200 again.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use bytes::Bytes;
use common::http::{get, send};
use common::{connect, http_gateway, WAIT};

/// An `h2` crate server (HTTP/2 only, prior knowledge): `/healthz` answers 200 while `healthy`,
/// else 503, and is reported on `checks`; any other path answers 200 `app`.
struct H2cBackend {
    target: String,
    healthy: Arc<AtomicBool>,
    checks: Receiver<String>,
}

impl H2cBackend {
    fn start() -> H2cBackend {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let healthy = Arc::new(AtomicBool::new(true));
        let (tx, checks) = channel();
        let state = healthy.clone();
        common::servers::serve_tokio(listener, move |tcp| serve(tcp, state.clone(), tx.clone()));
        H2cBackend {
            target,
            healthy,
            checks,
        }
    }

    /// Waits for the next check request the backend received; returns its method, path,
    /// authority and user agent.
    fn next_check(&self) -> String {
        self.checks
            .recv_timeout(WAIT)
            .expect("no HTTP/2 health check reached the backend")
    }
}

async fn serve(tcp: tokio::net::TcpStream, healthy: Arc<AtomicBool>, checks: Sender<String>) {
    let Ok(mut conn) = h2::server::handshake(tcp).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        let (status, body) = if request.uri().path() == "/healthz" {
            let agent = request.headers().get("user-agent").and_then(|v| v.to_str().ok());
            let _ = checks.send(format!(
                "{} {} {} {}",
                request.method(),
                request.uri().path(),
                request.uri().authority().map_or("-", |a| a.as_str()),
                agent.unwrap_or("-")
            ));
            match healthy.load(Ordering::SeqCst) {
                true => (200, "fine"),
                false => (503, "sick"),
            }
        } else {
            (200, "app")
        };
        let response = http::Response::builder().status(status).body(()).unwrap();
        if let Ok(mut send) = respond.send_response(response, false) {
            let _ = send.send_data(Bytes::from_static(body.as_bytes()), true);
        }
    }
}

/// The status of `GET /` through the gateway on `port`.
fn status_through(port: u16) -> u16 {
    send(&mut connect(port), &get("/")).0
}

#[test]
fn an_http_check_of_an_h2c_upstream_speaks_http2_and_takes_the_target_down_and_back() {
    let backend = H2cBackend::start();
    let dir = tempfile::tempdir().unwrap();
    let extra = "protocol = \"h2c\"\n\n[upstreams.app.health_check]\ninterval = \"50ms\"\ntimeout = \"1s\"\n\
                 rise = 1\nfall = 1\nhttp_path = \"/healthz\"\nhttp_host = \"health.test\"\nexpect_status = \"200-299\"\n";
    let (mut proxy, port) = http_gateway(dir.path(), std::slice::from_ref(&backend.target), extra);
    // The checks reach the backend as HTTP/2 requests, with the configured host and path.
    for _ in 0..3 {
        assert_eq!(backend.next_check(), "GET /healthz health.test rampart-health-check");
    }
    assert_eq!(status_through(port), 200);
    assert!(!proxy.log.iter().any(|l| l.contains("is down")), "{:#?}", proxy.log);
    // The check path fails: the target goes down, and requests get 503.
    backend.healthy.store(false, Ordering::SeqCst);
    let line = proxy.wait_for("health check: target is down");
    assert!(
        line.contains(&backend.target) && line.contains("status 503 outside 200-299"),
        "{line}"
    );
    assert_eq!(status_through(port), 503);
    // It passes again: the target comes back.
    backend.healthy.store(true, Ordering::SeqCst);
    let line = proxy.wait_for("health check: target is up");
    assert!(line.contains(&backend.target), "{line}");
    assert_eq!(status_through(port), 200);
}
