//! HTTP/2 clients (the `h2` crate) through Rampart to HTTP/1 backends: many streams on one
//! connection, bodies without length, WebSockets by extended CONNECT, GOAWAY on drain.

use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use http::{Method, Request};
use tokio::net::TcpStream;

use super::common::http::{HttpBackend, Reply};
use super::gateway;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 connection in clear (prior knowledge) to `port`, driven in a task.
pub async fn connect(port: u16) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    send
}

/// Sends `request` with `body` (none when empty): status, body, trailers.
pub async fn exchange(
    send: &SendRequest<Bytes>,
    request: Request<()>,
    body: &[u8],
) -> (u16, Vec<u8>, Option<http::HeaderMap>) {
    let mut send = send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request, body.is_empty()).unwrap();
    if !body.is_empty() {
        stream.send_data(Bytes::copy_from_slice(body), true).unwrap();
    }
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let mut recv = response.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.unwrap();
    (status, out, trailers)
}

pub fn get(port: u16, path: &str) -> Request<()> {
    Request::get(format!("http://127.0.0.1:{port}{path}")).body(()).unwrap()
}

#[test]
fn many_streams_on_one_connection_spread_over_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (HttpBackend::start(Reply::Echo), HttpBackend::start(Reply::Echo));
    let (_proxy, port) = gateway(dir.path(), &[a.target(), b.target()], "", "");
    runtime().block_on(async {
        let send = connect(port).await;
        let calls = (0..100).map(|i| {
            let send = send.clone();
            async move { exchange(&send, get(port, &format!("/s/{i}")), b"").await }
        });
        let results = futures_join_all(calls).await;
        for (i, (status, body, _)) in results.iter().enumerate() {
            assert_eq!(*status, 200);
            assert!(String::from_utf8_lossy(body).starts_with(&format!("GET /s/{i} HTTP/1.1\r\n")));
        }
    });
    let (to_a, to_b) = (a.heads.try_iter().count(), b.heads.try_iter().count());
    assert_eq!(to_a + to_b, 100);
    assert!(to_a >= 30 && to_b >= 30, "round robin over both: {to_a} and {to_b}");
}

/// Runs the futures concurrently in this task.
async fn futures_join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(|f| Box::pin(f)).collect();
    let mut out = Vec::with_capacity(handles.len());
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().map(|r| r.unwrap()));
    out
}

#[test]
fn a_body_without_length_reaches_an_http1_backend_chunked() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    runtime().block_on(async {
        let send = connect(port).await;
        let post = Request::post(format!("http://127.0.0.1:{port}/up")).body(()).unwrap();
        let (status, body, _) = exchange(&send, post, &[7u8; 70_000]).await;
        assert_eq!(status, 200);
        let body = String::from_utf8_lossy(&body).into_owned();
        assert!(
            body.contains("transfer-encoding: chunked") && body.ends_with("body-length: 70000\n"),
            "{body}"
        );
    });
}

/// A request body crosses as frames: DATA and the request's trailers from an HTTP/2 client
/// become a chunked body with a trailer section for an HTTP/1 backend.
#[test]
fn request_trailers_from_an_http2_client_reach_an_http1_backend() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Echo);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    runtime().block_on(async {
        let mut send = connect(port).await.ready().await.unwrap();
        let post = Request::post(format!("http://127.0.0.1:{port}/up")).body(()).unwrap();
        let (response, mut up) = send.send_request(post, false).unwrap();
        up.send_data(Bytes::from_static(b"first "), false).unwrap();
        up.send_data(Bytes::from_static(b"second"), false).unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
        up.send_trailers(trailers).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        let mut recv = response.into_body();
        let mut body = Vec::new();
        while let Some(chunk) = recv.data().await {
            body.extend_from_slice(&chunk.unwrap());
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        assert!(body.contains("transfer-encoding: chunked\r\n"), "{body}");
        assert!(body.ends_with("\r\n\r\nx-checksum: 42\r\nbody-length: 12\n"), "{body}");
    });
}

#[test]
fn a_websocket_over_http2_is_bridged_to_an_http1_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Upgrade);
    let (_proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    runtime().block_on(async {
        let send = connect(port).await;
        // Wait for the server's SETTINGS, which allow extended CONNECT.
        let mut send = send.ready().await.unwrap();
        let since = std::time::Instant::now();
        while !send.is_extended_connect_protocol_enabled() {
            assert!(
                since.elapsed() < Duration::from_secs(5),
                "no SETTINGS_ENABLE_CONNECT_PROTOCOL"
            );
            tokio::task::yield_now().await;
            send = send.ready().await.unwrap();
        }
        let mut request = Request::builder()
            .method(Method::CONNECT)
            .uri(format!("http://127.0.0.1:{port}/chat"))
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap();
        request.extensions_mut().insert(h2::ext::Protocol::from("websocket"));
        let (response, mut up) = send.send_request(request, false).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("sec-websocket-accept").is_none());
        let mut down = response.into_body();
        for message in [&b"hello"[..], b"over h2"] {
            up.send_data(Bytes::from_static(message), false).unwrap();
            let echoed = down.data().await.unwrap().unwrap();
            let _ = down.flow_control().release_capacity(echoed.len());
            assert_eq!(&echoed[..], message);
        }
    });
    let head = backend.heads.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.starts_with("GET /chat HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("upgrade: websocket"), "{head}");
    assert!(head.to_ascii_lowercase().contains("sec-websocket-key: "), "{head}");
}

#[test]
fn a_drain_sends_goaway_and_lets_streams_in_flight_finish() {
    let dir = tempfile::tempdir().unwrap();
    let backend = HttpBackend::start(Reply::Slow(Duration::from_millis(700)));
    let (proxy, port) = gateway(dir.path(), &[backend.target()], "", "");
    runtime().block_on(async {
        let send = connect(port).await;
        let in_flight = exchange(&send, get(port, "/slow"), b"");
        let drain = async {
            // The request is at the backend before the drain begins.
            tokio::task::spawn_blocking(move || backend.heads.recv_timeout(Duration::from_secs(5)).unwrap())
                .await
                .unwrap();
            proxy.signal(libc_sigterm());
            proxy
        };
        let ((status, body, _), mut proxy) = tokio::join!(in_flight, drain);
        assert_eq!(status, 200);
        assert!(body.starts_with(b"GET /slow HTTP/1.1\r\n"));
        // After GOAWAY no new stream is taken on this connection.
        let refused = send
            .clone()
            .ready()
            .await
            .map(|mut s| s.send_request(get(port, "/late"), true));
        let new_stream_failed = match refused {
            Err(_) | Ok(Err(_)) => true,
            Ok(Ok((response, _))) => response.await.is_err(),
        };
        assert!(new_stream_failed);
        assert_eq!(tokio::task::spawn_blocking(move || proxy.wait_exit()).await.unwrap(), 0);
    });
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
fn answers_of_rampart_own_to_grpc_requests_are_grpc_shaped() {
    let dir = tempfile::tempdir().unwrap();
    let port = super::common::free_port();
    let dead = super::common::dead_target();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         routes = [{{ match = {{ path_prefix = \"/pkg.Dead/\" }}, upstream = \"dead\" }}]\n\n\
         [upstreams.dead]\ntargets = [\"{dead}\"]\nconnect_attempts = 1\n"
    );
    let path = super::common::write_file(dir.path(), "grpc.toml", &cfg);
    let _proxy = super::common::Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    runtime().block_on(async {
        let send = connect(port).await;
        for (path, grpc_status) in [("/pkg.Missing/Call", "12"), ("/pkg.Dead/Call", "14")] {
            let request = Request::post(format!("http://127.0.0.1:{port}{path}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let mut ready = send.clone().ready().await.unwrap();
            let (response, mut body) = ready.send_request(request, false).unwrap();
            body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true).unwrap();
            let response = response.await.unwrap();
            // A trailers-only response: HTTP 200, the gRPC status in its only HEADERS frame.
            assert_eq!(response.status(), 200, "{path}");
            assert_eq!(response.headers()["content-type"], "application/grpc");
            assert_eq!(response.headers()["grpc-status"], grpc_status, "{path}");
            assert!(response.into_body().is_end_stream());
        }
    });
}
