//! The exchange against a recording downstream side: no client socket, only what the exchange
//! says to the client through the seam. The upstream is a real server on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpListener;

use super::*;
use crate::http::iobuf::IoBuf;
use crate::http::testing::{worker_for, Recording, Said};
use rampart_proto::h1::parse_request_owned;
use std::borrow::Cow;

/// An upstream that answers each request on a connection with the next of `replies`, then
/// closes.
fn upstream(replies: &'static [&'static [u8]]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else { return };
        let mut buf = [0u8; 4096];
        for reply in replies {
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            if conn.write_all(reply).is_err() {
                return;
            }
        }
    });
    addr.to_string()
}

/// A request from 192.0.2.1 on listener `web` to the snapshot's first upstream, idempotent,
/// with a body of `body`.
fn proxy_request<'a>(snapshot: &'a Snapshot, ops: &'a ResponseEdits, body: BodyLength) -> ProxyRequest<'a> {
    ProxyRequest {
        snapshot,
        listener_name: "web",
        upstream: 0,
        up: &snapshot.upstreams[0],
        client: "192.0.2.1:1000".parse().unwrap(),
        local: None,
        hash_key: 0,
        idempotent: true,
        head_method: false,
        body,
        expect_continue: false,
        upgrade: false,
        response_ops: ops,
        sticky_target: None,
        retries: snapshot.upstreams[0].http.retries,
        retry_on: snapshot.upstreams[0].http.retry_on,
        mirror: None,
        pinned: None,
    }
}

/// Runs one GET through the exchange to upstream `target` (with `retries`), returning what the
/// downstream side saw and the request's context.
fn exchange_once(target: &str, upstream_extra: &str) -> (Vec<String>, RequestContext) {
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{target}\"]\n{upstream_extra}\n"
    );
    let (runtime, ctx) = worker_for(&text);
    runtime.block_on(async {
        let snapshot = ctx.snapshot();
        let ops = ResponseEdits::default();
        let req = proxy_request(&snapshot, &ops, BodyLength::None);
        let said = Said::default();
        let mut down = Recording::new(IoBuf::default(), said.clone());
        let mut rctx = RequestContext::new(true);
        let (_, head) = parse_request_owned(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n", &Default::default())
            .unwrap()
            .unwrap();
        let parts = RequestParts::of(&head, Cow::Owned(Default::default()), Some(0));
        let tunnel = proxy(&ctx, &req, &mut down, &parts, &mut rctx).await;
        assert!(tunnel.is_none());
        drop(down);
        (said.take(), rctx)
    })
}

#[test]
fn a_response_goes_through_the_downstream_side_head_then_body() {
    let target = upstream(&[b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"]);
    let (sent, rctx) = exchange_once(&target, "");
    assert_eq!(sent, ["interim 103", "head 200 Exact(5) hello", "end"]);
    assert_eq!((rctx.status, rctx.target, rctx.error), (200, Some(0), None));
    assert!(rctx.upstream_time.is_some());
}

#[test]
fn an_upstream_that_closes_before_answering_is_a_502_answered_locally() {
    let target = upstream(&[]);
    let (sent, rctx) = exchange_once(&target, "retries = 0");
    assert_eq!(sent, ["local 502 [] 502 Bad Gateway"]);
    assert_eq!(rctx.status, 502);
    assert_eq!(rctx.error, Some(HttpError::UpstreamReset));
    assert!(!rctx.keep_client);
}

#[test]
fn a_refused_connect_is_answered_502_and_a_body_error_after_the_head_is_only_recorded() {
    // Nothing listens on this port once the listener is dropped.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let (sent, rctx) = exchange_once(&closed, "connect_attempts = 1");
    assert_eq!(sent, ["local 502 [] 502 Bad Gateway"]);
    assert_eq!(rctx.error, Some(HttpError::ConnectFailed));

    let target = upstream(&[b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"]);
    let (sent, rctx) = exchange_once(&target, "");
    assert_eq!(sent, ["head 200 Exact(10) short"]);
    assert_eq!((rctx.status, rctx.error), (200, Some(HttpError::UpstreamClosedEarly)));
    assert!(!rctx.keep_client);
}

/// A chunked upstream body crosses the seam as data frames and trailers: no chunk framing
/// reaches the downstream side, whatever protocol it speaks.
#[test]
fn a_chunked_body_crosses_as_data_then_trailers() {
    let target = upstream(&[
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n1\r\n!\r\n0\r\nGrpc-Status: 0\r\n\r\n",
    ]);
    let (sent, rctx) = exchange_once(&target, "");
    // The data may come with the head or after it, in one piece or two.
    let all = sent.join("|").replace("|data ", "");
    assert_eq!(all, "head 200 Unknown hello!|trailers Grpc-Status=0", "{sent:?}");
    assert_eq!((rctx.status, rctx.error), (200, None));
}

/// A request body that ends short of the length its head declared (a client side that lied
/// about it) fails the request as the client's fault (400), and the upstream connection is not
/// kept: the upstream still waits for the rest.
#[test]
fn a_body_shorter_than_its_length_is_the_clients_fault() {
    let target = upstream(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]);
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [\"{target}\"]\nretries = 0\n"
    );
    let (runtime, ctx) = worker_for(&text);
    let (sent, rctx) = runtime.block_on(async {
        let snapshot = ctx.snapshot();
        let ops = ResponseEdits::default();
        let req = ProxyRequest {
            idempotent: false,
            ..proxy_request(&snapshot, &ops, BodyLength::Exact(10))
        };
        let said = Said::default();
        let mut body = IoBuf::default();
        body.extend_from(&ctx.http, b"short");
        let mut down = Recording::new(body, said.clone());
        let mut rctx = RequestContext::new(true);
        let raw = b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\n";
        let (_, head) = parse_request_owned(raw, &Default::default()).unwrap().unwrap();
        let parts = RequestParts::of(&head, Cow::Owned(Default::default()), Some(0));
        proxy(&ctx, &req, &mut down, &parts, &mut rctx).await;
        drop(down);
        (said.take(), rctx)
    });
    assert_eq!(sent, ["local 400 [] 400 Bad Request"]);
    assert_eq!(rctx.error, Some(HttpError::BadRequestBody));
}
