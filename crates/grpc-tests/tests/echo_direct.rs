//! The echo service and harness on their own, client straight to backend (no rampart): what the
//! through-rampart tests expect of the backend holds here first.

use crate::common;

use common::backend::{connect, connect_bare, connect_tls, EchoBackend};
use common::echo::{collect, EchoRequest};
use common::tls::TestCa;
use tonic::Code;

#[tokio::test]
async fn four_call_kinds_direct() {
    let backend = EchoBackend::start();
    let mut client = connect(backend.addr).await;

    let reply = client
        .unary_echo(EchoRequest::text("hello"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.message, "hello");

    let req = EchoRequest {
        message: "tick".into(),
        count: 3,
        ..Default::default()
    };
    let replies = collect(client.server_streaming_echo(req).await.unwrap().into_inner())
        .await
        .unwrap();
    let texts: Vec<_> = replies.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(texts, ["tick 0", "tick 1", "tick 2"]);

    let parts = ["a", "b", "c"].map(EchoRequest::text);
    let reply = client
        .client_streaming_echo(tokio_stream_iter(parts.to_vec()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.message, "abc");

    let replies = client
        .bidi_streaming_echo(tokio_stream_iter(["x", "y"].map(EchoRequest::text).to_vec()))
        .await
        .unwrap()
        .into_inner();
    let texts: Vec<_> = collect(replies).await.unwrap().into_iter().map(|r| r.message).collect();
    assert_eq!(texts, ["x", "y"]);
    assert_eq!(backend.calls(), 4);
}

#[tokio::test]
async fn failure_and_unknown_method_direct() {
    let backend = EchoBackend::start();
    let mut client = connect(backend.addr).await;
    let req = EchoRequest {
        message: "nope".into(),
        fail_with: Code::NotFound as i32,
        ..Default::default()
    };
    let status = client.unary_echo(req).await.unwrap_err();
    assert_eq!((status.code(), status.message()), (Code::NotFound, "nope"));
    let status = client
        .unary_at("/echo.Echo/Missing", EchoRequest::text("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
}

#[tokio::test]
async fn tls_backend_direct() {
    let ca = TestCa::new();
    let backend = EchoBackend::start_tls(&ca.leaf());
    let mut client = connect_tls(backend.addr, &ca.cert_pem, "localhost").await;
    let reply = client
        .unary_echo(EchoRequest::text("secure"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.message, "secure");
}

fn tokio_stream_iter(items: Vec<EchoRequest>) -> impl tonic::codegen::tokio_stream::Stream<Item = EchoRequest> {
    tonic::codegen::tokio_stream::iter(items)
}

/// Neither the bare backend nor the bare client acts on `grpc-timeout`: the call outlives its
/// deadline and succeeds. So through a proxy, DEADLINE_EXCEEDED for such a call can only come
/// from the proxy.
#[tokio::test]
async fn bare_backend_and_client_ignore_grpc_timeout() {
    let backend = EchoBackend::start_ignoring_deadlines();
    let mut client = connect_bare(backend.addr).await;
    let mut req = tonic::Request::new(EchoRequest {
        message: "late".into(),
        sleep_ms: 300,
        ..Default::default()
    });
    req.set_timeout(std::time::Duration::from_millis(50));
    let reply = client.unary_echo(req).await.expect("no deadline enforced").into_inner();
    assert_eq!(reply.message, "late");
}

/// Whereas tonic's own server (and tonic's channel) end a call at its `grpc-timeout` with
/// CANCELLED.
#[tokio::test]
async fn tonic_cancels_on_grpc_timeout() {
    let backend = EchoBackend::start();
    let mut client = connect_bare(backend.addr).await;
    let mut req = tonic::Request::new(EchoRequest {
        message: "late".into(),
        sleep_ms: 5_000,
        ..Default::default()
    });
    req.set_timeout(std::time::Duration::from_millis(50));
    let status = client.unary_echo(req).await.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
}

/// `raw_call` against the backend itself: tonic's own UNIMPLEMENTED is trailers-only, HTTP 200.
#[tokio::test]
async fn raw_call_sees_a_trailers_only_answer() {
    let backend = EchoBackend::start();
    let raw = common::raw::raw_call(backend.addr, "/echo.Echo/Missing", &EchoRequest::text("x"), &[]).await;
    raw.assert_trailers_only(Code::Unimplemented);
    let ok = common::raw::raw_call(backend.addr, "/echo.Echo/UnaryEcho", &EchoRequest::text("x"), &[]).await;
    assert_eq!((ok.status, ok.trailers_only), (200, false));
}
