//! HTTP/2 to upstreams: an `h2` crate server as the backend (h2c), with trailers, REFUSED_STREAM
//! and GOAWAY; HTTP/1.1 and HTTP/2 clients in front.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};

use super::clients::{connect, exchange, get, runtime};
use super::gateway;

/// How the test backend behaves.
#[derive(Clone, Copy)]
pub(crate) enum Behaviour {
    /// `200`, body `path`, trailer `grpc-status: 0`.
    Trailers,
    /// The first stream this backend sees is refused (REFUSED_STREAM).
    RefuseFirst,
    /// Each connection answers one request, then sends GOAWAY.
    GoAwayAfterOne,
    /// `200`, body `N bytes; trailers: name=value,...` of the request body it read.
    EchoBody,
    /// `200`, body `COUNT TRACEPARENT TRACESTATE`: how many `traceparent` fields the request
    /// had, the first, and its first `tracestate` (`-` for none).
    EchoTrace,
}

pub(crate) struct H2Backend {
    pub(crate) addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// Connections that ended (the proxy closed them).
    closed: Arc<AtomicUsize>,
}

impl H2Backend {
    pub(crate) fn start(behaviour: Behaviour) -> H2Backend {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (count, ended) = (connections.clone(), closed.clone());
        std::thread::spawn(move || {
            runtime().block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let first_connection = count.fetch_add(1, Ordering::SeqCst) == 0;
                    let ended = ended.clone();
                    tokio::spawn(async move {
                        serve(tcp, behaviour, first_connection).await;
                        ended.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        });
        H2Backend {
            addr,
            connections,
            closed,
        }
    }
}

async fn serve(tcp: tokio::net::TcpStream, behaviour: Behaviour, first_connection: bool) {
    let Ok(mut conn) = h2::server::handshake(tcp).await else {
        return;
    };
    let mut first = first_connection;
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        if matches!(behaviour, Behaviour::RefuseFirst) && first {
            first = false;
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            continue;
        }
        if matches!(behaviour, Behaviour::EchoBody) {
            tokio::spawn(echo_body(request, respond));
            continue;
        }
        if matches!(behaviour, Behaviour::EchoTrace) {
            let named = |name: &str| -> Vec<String> {
                let values = request.headers().get_all(name).iter();
                values.map(|v| v.to_str().unwrap_or("?").to_string()).collect()
            };
            let (parents, states) = (named("traceparent"), named("tracestate"));
            let first = |values: &[String]| values.first().cloned().unwrap_or_else(|| "-".into());
            let said = format!("{} {} {}", parents.len(), first(&parents), first(&states));
            let mut send = respond.send_response(Response::new(()), false).unwrap();
            send.send_data(Bytes::from(said), true).unwrap();
            continue;
        }
        let path = request.uri().path().to_string();
        let mut response = Response::new(());
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("text/plain"));
        let mut send = respond.send_response(response, false).unwrap();
        send.send_data(Bytes::from(path), false).unwrap();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers.insert("grpc-message", HeaderValue::from_static("fine"));
        send.send_trailers(trailers).unwrap();
        if matches!(behaviour, Behaviour::GoAwayAfterOne) {
            conn.graceful_shutdown();
        }
    }
}

/// Answers with what the request body was: its length and its trailers.
async fn echo_body(request: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    let mut body = request.into_body();
    let mut len = 0;
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        len += data.len();
    }
    let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
    let mut said = format!("{len} bytes; trailers:");
    for (name, value) in &trailers {
        said.push_str(&format!(" {name}={}", value.to_str().unwrap_or("?")));
    }
    let mut send = respond.send_response(Response::new(()), false).unwrap();
    send.send_data(Bytes::from(said), true).unwrap();
}

/// Rampart's `traceparent`, and the client's `tracestate` beside it, reach an h2c upstream on
/// each request over one upstream connection (the field goes as an HPACK literal that makes no
/// table entry; the `h2` crate's decoder reads each block after the first).
#[test]
fn trace_context_reaches_an_h2c_upstream_request_after_request() {
    let dir = tempfile::tempdir().unwrap();
    let backend = H2Backend::start(Behaviour::EchoTrace);
    let upstream = "protocol = \"h2c\"\n\n[tracing]\nsampling = 1.0";
    let (_proxy, port) = gateway(dir.path(), &[backend.addr.to_string()], "", upstream);
    let caller = "0af7651916cd43dd8448eb211c80319c";
    let mut parents = Vec::new();
    for i in 0..4 {
        let context = match i % 2 {
            0 => format!("traceparent: 00-{caller}-b7ad6b7169203331-01\r\ntracestate: congo=t61rcWkgMzE\r\n"),
            _ => String::new(),
        };
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(format!("GET /t{i} HTTP/1.1\r\nHost: x\r\n{context}Connection: close\r\n\r\n").as_bytes())
            .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "request {i}: {raw}");
        // The body in one chunk (the upstream's response has no length): size, data, end.
        let chunked = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
        let said = chunked.split("\r\n").nth(1).unwrap_or_default();
        let fields: Vec<&str> = said.split(' ').collect();
        let [count, traceparent, tracestate] = fields[..] else {
            panic!("request {i}: {said}")
        };
        assert_eq!(count, "1", "request {i}: one traceparent, Rampart's: {said}");
        let parts: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(parts.len(), 4, "request {i}: {traceparent}");
        assert_eq!((parts[0], parts[3]), ("00", "01"), "request {i}: sampled");
        assert!(
            parts[1].len() == 32 && parts[2].len() == 16,
            "request {i}: {traceparent}"
        );
        if i % 2 == 0 {
            assert_eq!(parts[1], caller, "request {i}: the caller's trace goes on");
            assert_ne!(parts[2], "b7ad6b7169203331", "request {i}: under a span of Rampart's");
            assert_eq!(tracestate, "congo=t61rcWkgMzE", "request {i}");
        } else {
            assert_ne!(parts[1], caller, "request {i}: a trace of its own");
            assert_eq!(tracestate, "-", "request {i}: no tracestate without a caller's context");
        }
        parents.push(parts[2].to_string());
    }
    parents.sort();
    parents.dedup();
    assert_eq!(parents.len(), 4, "a new span each request: {parents:?}");
    assert_eq!(backend.connections.load(Ordering::SeqCst), 1, "one upstream connection");
}

/// A chunked request body from an HTTP/1.1 client reaches an h2c upstream as DATA, and its
/// trailer section as HTTP/2 trailers.
#[test]
fn a_chunked_request_body_reaches_an_h2c_upstream_with_its_trailers() {
    let dir = tempfile::tempdir().unwrap();
    let backend = H2Backend::start(Behaviour::EchoBody);
    let (_proxy, port) = gateway(dir.path(), &[backend.addr.to_string()], "", "protocol = \"h2c\"");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          4\r\nabcd\r\n3\r\nefg\r\n0\r\nX-Checksum: 42\r\n\r\n",
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(raw.contains("7 bytes; trailers: x-checksum=42"), "{raw}");
}

#[test]
fn trailers_from_an_h2c_upstream_reach_http2_and_http1_clients() {
    let dir = tempfile::tempdir().unwrap();
    let backend = H2Backend::start(Behaviour::Trailers);
    let (_proxy, port) = gateway(dir.path(), &[backend.addr.to_string()], "", "protocol = \"h2c\"");
    runtime().block_on(async {
        let send = connect(port).await;
        let (status, body, trailers) = exchange(&send, get(port, "/pkg.Svc/Call"), b"").await;
        assert_eq!(status, 200);
        assert_eq!(body, b"/pkg.Svc/Call");
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert_eq!(trailers.get("grpc-message").unwrap(), "fine");
    });
    // HTTP/1.1 in front: a chunked body with the trailers in its trailer section.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /h1 HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{raw}");
    assert!(
        raw.ends_with("3\r\n/h1\r\n0\r\ngrpc-status: 0\r\ngrpc-message: fine\r\n\r\n"),
        "{raw}"
    );
}

#[test]
fn refused_streams_and_goaway_from_the_upstream_fail_no_client_request() {
    for behaviour in [Behaviour::RefuseFirst, Behaviour::GoAwayAfterOne] {
        let dir = tempfile::tempdir().unwrap();
        let backend = H2Backend::start(behaviour);
        let (_proxy, port) = gateway(dir.path(), &[backend.addr.to_string()], "", "protocol = \"h2c\"");
        runtime().block_on(async {
            let send = connect(port).await;
            for i in 0..5 {
                let (status, body, _) = exchange(&send, get(port, &format!("/r{i}")), b"").await;
                assert_eq!(status, 200, "request {i}");
                assert_eq!(body, format!("/r{i}").as_bytes());
            }
        });
        // Each refusal or GOAWAY moved the requests to a new connection.
        assert!(backend.connections.load(Ordering::SeqCst) >= 2);
    }
}

/// A pooled h2c connection the pool lets go of (idle past `pool_idle_timeout`) is closed, with
/// GOAWAY, by its own task; requests are served on one connection until then.
#[test]
fn an_idle_h2c_upstream_connection_is_closed_after_the_pool_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let backend = H2Backend::start(Behaviour::Trailers);
    let (_proxy, port) = gateway(
        dir.path(),
        &[backend.addr.to_string()],
        "",
        "protocol = \"h2c\"\npool_idle_timeout = \"1s\"",
    );
    for i in 0..3 {
        let (status, body) = super::curl(&["--http1.1", &format!("http://127.0.0.1:{port}/idle{i}")]);
        assert_eq!(
            (status.as_str(), body.as_str()),
            ("1.1 200", format!("/idle{i}").as_str())
        );
    }
    assert_eq!(backend.connections.load(Ordering::SeqCst), 1);
    crate::common::tls::eventually("the idle upstream connection closes", || {
        backend.closed.load(Ordering::SeqCst) == 1
    });
}

#[test]
fn an_http1_client_reaches_an_h2c_upstream_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let backend = H2Backend::start(Behaviour::Trailers);
    let port = super::common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _proxy = super::common::Rampart::start(
        dir.path(),
        &[
            "http",
            "--listen",
            &listen,
            "--to",
            &backend.addr.to_string(),
            "--upstream-protocol",
            "h2c",
            "--workers",
            "1",
        ],
    );
    let (status, body) = super::curl(&["--http1.1", &format!("http://{listen}/cli")]);
    assert_eq!(status, "1.1 200");
    assert_eq!(body, "/cli");
}
