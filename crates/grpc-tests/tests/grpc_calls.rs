//! gRPC through rampart: a tonic client speaking cleartext HTTP/2 with prior knowledge to an
//! HTTP listener, rampart relaying over h2c to tonic echo backends. The four call kinds, 16 MiB
//! messages both ways, and many concurrent calls on one connection balanced over two targets.

use crate::common;

use common::backend::{connect_port, EchoBackend};
use common::echo::{collect, EchoRequest};
use common::{h2c_proxy, pattern};
use tokio::task::JoinSet;
use tonic::codegen::tokio_stream;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

const MIB: usize = 1 << 20;

#[tokio::test]
async fn four_call_kinds_through_rampart() {
    let backend = EchoBackend::start();
    let (_rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_port(port).await;

    // Unary.
    let req = EchoRequest {
        message: "hello".into(),
        payload: b"\x00\xffbytes".to_vec(),
        ..Default::default()
    };
    let reply = client.unary_echo(req).await.expect("unary").into_inner();
    assert_eq!(reply.message, "hello");
    assert_eq!(reply.payload, b"\x00\xffbytes");

    // Server streaming: N replies.
    let req = EchoRequest {
        message: "tick".into(),
        count: 5,
        ..Default::default()
    };
    let stream = client.server_streaming_echo(req).await.expect("server streaming");
    let texts: Vec<String> = collect(stream.into_inner())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.message)
        .collect();
    assert_eq!(texts, ["tick 0", "tick 1", "tick 2", "tick 3", "tick 4"]);

    // Client streaming: concatenated.
    let parts: Vec<EchoRequest> = ["al", "pha", "bet"]
        .iter()
        .map(|t| EchoRequest {
            message: t.to_string(),
            payload: t.as_bytes().to_vec(),
            ..Default::default()
        })
        .collect();
    let reply = client
        .client_streaming_echo(tokio_stream::iter(parts))
        .await
        .expect("client streaming")
        .into_inner();
    assert_eq!(reply.message, "alphabet");
    assert_eq!(reply.payload, b"alphabet");

    // Bidirectional, the whole request stream at once: one reply per request, in order.
    let requests = ["one", "two", "three"].map(EchoRequest::text).to_vec();
    let replies = client
        .bidi_streaming_echo(tokio_stream::iter(requests))
        .await
        .expect("bidi")
        .into_inner();
    let texts: Vec<String> = collect(replies)
        .await
        .expect("bidi replies")
        .into_iter()
        .map(|r| r.message)
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    assert_eq!(backend.calls(), 4);
}

/// Bidirectional streaming as a conversation: each reply must come back while the request
/// stream is still open, so the proxy has to relay the response head and each message as they
/// come (full duplex), not after the request's end. tonic's client returns from the call only
/// once the response head has arrived.
#[tokio::test]
async fn bidi_replies_flow_while_the_request_stream_is_open() {
    let backend = EchoBackend::start();
    let (_rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_port(port).await;

    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut replies = client
        .bidi_streaming_echo(ReceiverStream::new(rx))
        .await
        .expect("bidi response head while the request stream is open")
        .into_inner();
    for word in ["one", "two", "three"] {
        tx.send(EchoRequest::text(word)).await.unwrap();
        let reply = replies
            .message()
            .await
            .expect("bidi reply")
            .expect("a reply, not the end");
        assert_eq!(reply.message, word);
    }
    drop(tx);
    assert!(replies.message().await.expect("clean end").is_none());
}

#[tokio::test]
async fn sixteen_mib_messages_both_ways() {
    let backend = EchoBackend::start();
    let (_rampart, port) = h2c_proxy(&[backend.target()], "");
    let mut client = connect_port(port).await;

    let big = pattern(16 * MIB, 7);
    let req = EchoRequest {
        message: "big".into(),
        payload: big.clone(),
        ..Default::default()
    };
    let reply = client.unary_echo(req).await.expect("16 MiB unary").into_inner();
    assert_eq!(reply.payload.len(), big.len());
    assert!(reply.payload == big, "unary payload changed on the way");

    let requests: Vec<EchoRequest> = (0..2u8)
        .map(|i| EchoRequest {
            message: format!("big {i}"),
            payload: pattern(16 * MIB, i),
            ..Default::default()
        })
        .collect();
    let replies = client
        .bidi_streaming_echo(tokio_stream::iter(requests))
        .await
        .expect("16 MiB bidi")
        .into_inner();
    let replies = collect(replies).await.expect("16 MiB bidi replies");
    assert_eq!(replies.len(), 2);
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply.message, format!("big {i}"));
        assert!(
            reply.payload == pattern(16 * MIB, i as u8),
            "bidi payload {i} changed on the way"
        );
    }
}

#[tokio::test]
async fn two_hundred_concurrent_calls_on_one_channel_over_two_targets() {
    let backends = [EchoBackend::start(), EchoBackend::start()];
    let targets: Vec<String> = backends.iter().map(EchoBackend::target).collect();
    let (_rampart, port) = h2c_proxy(&targets, "");
    let client = connect_port(port).await;

    let mut calls = JoinSet::new();
    for i in 0..200 {
        let mut client = client.clone();
        calls.spawn(async move {
            let reply = client.unary_echo(EchoRequest::text(&format!("call {i}"))).await;
            (i, reply)
        });
    }
    let mut answered = 0;
    while let Some(joined) = calls.join_next().await {
        let (i, reply) = joined.unwrap();
        let reply = reply.unwrap_or_else(|e| panic!("call {i}: {e:?}")).into_inner();
        assert_eq!(reply.message, format!("call {i}"));
        answered += 1;
    }
    assert_eq!(answered, 200);
    let per_backend: Vec<usize> = backends.iter().map(EchoBackend::calls).collect();
    assert_eq!(
        per_backend.iter().sum::<usize>(),
        200,
        "calls per backend: {per_backend:?}"
    );
    assert!(
        per_backend.iter().all(|&n| n > 0),
        "one backend got no call: {per_backend:?}"
    );
}
