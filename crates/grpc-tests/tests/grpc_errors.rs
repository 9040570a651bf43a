//! gRPC errors through rampart: a backend's grpc-status, grpc-message and details pass through
//! untouched; and rampart's own answers are gRPC-shaped (HTTP 200, grpc-status in a
//! trailers-only response): no route 12 UNIMPLEMENTED, no live target 14 UNAVAILABLE, the
//! upstream's `request_timeout` and the client's `grpc-timeout` 4 DEADLINE_EXCEEDED. Each of
//! rampart's answers is seen both by tonic's client and by a call made by hand (`raw_call`),
//! which checks the HTTP status and the trailers-only shape that tonic's client hides.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::backend::{connect_bare, connect_port, EchoBackend};
use common::echo::{EchoRequest, EchoResponse};
use common::raw::raw_call;
use common::{assert_grpc_status, dead_target, free_port, grpc_config, h2c_proxy, Rampart};
use tonic::{Code, Request};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A call the backend answers only after 10 s (no test waits that long).
fn slow() -> EchoRequest {
    EchoRequest {
        message: "slow".into(),
        sleep_ms: 10_000,
        ..Default::default()
    }
}

/// A call that makes the backend fail with `code`, `message` and `details`.
fn failing(code: Code, message: &str, details: &[u8]) -> EchoRequest {
    EchoRequest {
        message: message.into(),
        payload: details.to_vec(),
        fail_with: code as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn backend_statuses_pass_through_untouched() {
    let backend = EchoBackend::start();
    let (_rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_port(port).await;

    let status = client
        .unary_echo(failing(Code::NotFound, "no such key: alpha", b""))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::NotFound, "no such key: alpha")
    );

    // Non-ASCII, '%' and a newline: percent-encoded in grpc-message by the backend, decoded by
    // the client; binary details in grpc-status-details-bin (base64).
    let text = "ключ «κ» nicht gefunden: 100% sicher\nzweite Zeile";
    let details = b"\x00\x01\xfe\xffdetails";
    let status = client
        .unary_echo(failing(Code::FailedPrecondition, text, details))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), text);
    assert_eq!(status.details(), details);

    // An error after data: two replies, then the status in the trailers.
    let req = EchoRequest {
        count: 2,
        ..failing(Code::ResourceExhausted, "quota gone after two", b"")
    };
    let mut stream = client
        .server_streaming_echo(req)
        .await
        .expect("stream head")
        .into_inner();
    let first: Option<EchoResponse> = stream.message().await.expect("first reply");
    let second = stream.message().await.expect("second reply");
    assert!(first.is_some() && second.is_some());
    let status = stream.message().await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::ResourceExhausted, "quota gone after two")
    );
}

#[tokio::test]
async fn no_route_is_unimplemented() {
    let backend = EchoBackend::start();
    let port = free_port();
    let routes = "[[listeners.grpc.routes]]\nmatch = { path_prefix = \"/echo.Echo/\" }\nupstream = \"echo\"\n";
    let config = grpc_config(port, &[backend.target()], "", "protocol = \"h2c\"", routes);
    let _rampart = Rampart::start(&config);
    let mut client = connect_port(port).await;

    let reply = client
        .unary_echo(EchoRequest::text("routed"))
        .await
        .expect("the routed service");
    assert_eq!(reply.into_inner().message, "routed");

    let status = client
        .unary_at("/other.Other/Method", EchoRequest::text("unrouted"))
        .await
        .unwrap_err();
    assert_grpc_status(&status, Code::Unimplemented);
    let raw = raw_call(addr(port), "/other.Other/Method", &EchoRequest::text("raw"), &[]).await;
    raw.assert_trailers_only(Code::Unimplemented);
    assert_eq!(backend.calls(), 1, "the unrouted call reached the backend");
}

#[tokio::test]
async fn dead_target_is_unavailable() {
    let (mut rampart, port) = h2c_proxy(&[dead_target()], "");
    let mut client = connect_port(port).await;
    let status = client.unary_echo(EchoRequest::text("anyone?")).await.unwrap_err();
    assert_grpc_status(&status, Code::Unavailable);
    let raw = raw_call(addr(port), "/echo.Echo/UnaryEcho", &EchoRequest::text("raw"), &[]).await;
    raw.assert_trailers_only(Code::Unavailable);
    eprintln!("client saw: {status:?}\nrampart logged:\n{}", rampart.log_so_far());
}

#[tokio::test]
async fn upstream_request_timeout_is_deadline_exceeded() {
    let backend = EchoBackend::start();
    let (mut rampart, port) = h2c_proxy(&[backend.target()], "request_timeout = \"300ms\"");
    let mut client = connect_port(port).await;
    let slow = slow();
    let status = client.unary_echo(slow.clone()).await.unwrap_err();
    assert_grpc_status(&status, Code::DeadlineExceeded);
    let raw = raw_call(addr(port), "/echo.Echo/UnaryEcho", &slow, &[]).await;
    raw.assert_trailers_only(Code::DeadlineExceeded);
    eprintln!("client saw: {status:?}\nrampart logged:\n{}", rampart.log_so_far());
}

/// The client's `grpc-timeout` is honoured by rampart itself: neither the backend nor the client
/// here acts on it (see `echo_direct::bare_backend_and_client_ignore_grpc_timeout`), so only
/// the proxy can end the call.
#[tokio::test]
async fn client_grpc_timeout_is_honoured_by_rampart() {
    let backend = EchoBackend::start_ignoring_deadlines();
    let (mut rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_bare(addr(port)).await;
    let slow = slow();
    let mut request = Request::new(slow.clone());
    request.set_timeout(Duration::from_millis(300));
    let status = client.unary_echo(request).await.unwrap_err();
    assert_grpc_status(&status, Code::DeadlineExceeded);
    let raw = raw_call(addr(port), "/echo.Echo/UnaryEcho", &slow, &[("grpc-timeout", "300m")]).await;
    raw.assert_trailers_only(Code::DeadlineExceeded);
    eprintln!("client saw: {status:?}\nrampart logged:\n{}", rampart.log_so_far());
}

/// A server that enforces deadlines resets the call with CANCEL when its copy of the deadline
/// runs out, which is often a moment before Rampart's own millisecond timer fires. Whichever side
/// notices first, the client gets DEADLINE_EXCEEDED: a reset after the deadline is the deadline,
/// not an upstream failure (which would be UNAVAILABLE).
#[tokio::test]
async fn a_deadline_is_deadline_exceeded_whichever_side_notices_first() {
    let backend = EchoBackend::start_resetting_at_deadline();
    let (mut rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_bare(addr(port)).await;
    let slow = slow();
    let mut codes = Vec::new();
    for _ in 0..100 {
        let mut request = Request::new(slow.clone());
        request.set_timeout(Duration::from_millis(20));
        codes.push(client.unary_echo(request).await.unwrap_err().code());
    }
    let wrong: Vec<_> = codes.iter().filter(|c| **c != Code::DeadlineExceeded).collect();
    assert!(
        wrong.is_empty(),
        "{} of 100 calls were not DEADLINE_EXCEEDED: {wrong:?}\nrampart logged:\n{}",
        wrong.len(),
        rampart.log_so_far()
    );
}
