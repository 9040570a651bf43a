//! gRPC over TLS on both sides of rampart: the client reaches a TLS listener and must be given
//! h2 by ALPN (tonic refuses a connection without it); rampart speaks `protocol = "h2"` (TLS,
//! ALPN h2) to a tonic server over TLS, verifying it against the test CA.

use crate::common;

use common::backend::{connect_tls, EchoBackend};
use common::echo::{collect, EchoRequest};
use common::tls::TestCa;
use common::{free_port, grpc_config, pattern, write_file, Rampart};
use tonic::codegen::tokio_stream;
use tonic::Code;

#[tokio::test]
async fn h2_over_tls_on_both_sides() {
    tls_on_both_sides("h2").await;
}

/// `auto` offers h2 and http/1.1 by ALPN; the tonic server picks h2, and the calls go over HTTP/2
/// with the head Rampart laid out as fields for it.
#[tokio::test]
async fn auto_picks_h2_by_alpn() {
    tls_on_both_sides("auto").await;
}

async fn tls_on_both_sides(protocol: &str) {
    let ca = TestCa::new();
    let backend = EchoBackend::start_tls(&ca.leaf());

    let dir = tempfile::tempdir().unwrap();
    let listener_cert = ca.leaf();
    write_file(dir.path(), "listener.pem", &listener_cert.cert_pem);
    write_file(dir.path(), "listener.key", &listener_cert.key_pem);
    write_file(dir.path(), "ca.pem", &ca.cert_pem);
    let port = free_port();
    let tail = "[listeners.grpc.tls]\ncertificates = [{ cert = \"listener.pem\", key = \"listener.key\" }]\n\n\
                [upstreams.echo.tls]\nca = \"ca.pem\"\n";
    let config = grpc_config(
        port,
        &[backend.target()],
        "upstream = \"echo\"",
        &format!("protocol = \"{protocol}\""),
        tail,
    );
    let _rampart = Rampart::start_in(dir, &config);

    let mut client = connect_tls(([127, 0, 0, 1], port).into(), &ca.cert_pem, "localhost").await;

    let req = EchoRequest {
        message: "secure".into(),
        payload: pattern(64 << 10, 3),
        ..Default::default()
    };
    let reply = client.unary_echo(req).await.expect("unary over TLS").into_inner();
    assert_eq!(reply.message, "secure");
    assert!(reply.payload == pattern(64 << 10, 3));

    let requests = ["a", "b", "c"].map(EchoRequest::text).to_vec();
    let replies = client
        .bidi_streaming_echo(tokio_stream::iter(requests))
        .await
        .expect("bidi over TLS")
        .into_inner();
    let texts: Vec<String> = collect(replies).await.unwrap().into_iter().map(|r| r.message).collect();
    assert_eq!(texts, ["a", "b", "c"]);

    let status = client
        .unary_echo(EchoRequest {
            message: "denied «ü»".into(),
            fail_with: Code::PermissionDenied as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::PermissionDenied, "denied «ü»")
    );
    assert_eq!(backend.calls(), 3);
}
