//! Requests over HTTP/3 to HTTP/1.1 and h2c upstreams: bodies both ways, many streams at once,
//! trailers, Rampart's own answers, Alt-Svc, the access log.

use std::io::{Read, Write};

use futures_util::future::join_all;
use sha2::{Digest, Sha256};

use super::client::{block_on, client_config, connect, endpoint, fetch, request, Request};
use super::gateway;
use crate::common::http::{HttpBackend, Reply};
use crate::common::json_log_lines;
use crate::common::tls::{handshake, ClientOpts};
use crate::http2::upstream::{Behaviour, H2Backend};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn requests_and_bodies_cross_to_an_http1_upstream_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let echo = HttpBackend::start(Reply::Echo);
    let digest = HttpBackend::start(Reply::Digest);
    let download = HttpBackend::start(Reply::ChunkedDownload(3 << 20));
    let routes = "[[listeners.web.routes]]\nmatch = { path = \"/up\" }\nupstream = \"digest\"\n\
                  [[listeners.web.routes]]\nmatch = { path = \"/down\" }\nupstream = \"download\"\n";
    let upstreams = format!(
        "[upstreams.digest]\ntargets = [\"{}\"]\n[upstreams.download]\ntargets = [\"{}\"]\n",
        digest.target(),
        download.target()
    );
    let (_proxy, port, tls) = gateway(dir.path(), &[echo.target()], routes, &upstreams);

    let got = fetch(&tls.ca, port, &Request::get("/hello?x=1")).unwrap();
    assert_eq!(got.status, 200);
    let head = echo.next_head();
    assert!(head.starts_with("GET /hello?x=1 HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nhost: localhost\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("x-forwarded-proto: https"), "{head}");
    // A GET's stream ended with its head: no body goes upstream (no chunked framing).
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding"), "{head}");

    // 1 MiB up, sent in pieces without content-length: it arrives whole.
    let body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let got = fetch(&tls.ca, port, &Request::post("/up", body.clone())).unwrap();
    assert_eq!(got.status, 200);
    let want = format!("{} {}\n", body.len(), hex(&Sha256::digest(&body)));
    assert_eq!(String::from_utf8_lossy(&got.body), want);

    // 3 MiB down, chunked by the upstream: its length as it came.
    let got = fetch(&tls.ca, port, &Request::get("/down")).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), 3 << 20);
    assert!(got.body.iter().all(|b| *b == b'x'));
}

#[test]
fn a_hundred_streams_at_once_on_one_connection_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let echo = HttpBackend::start(Reply::Echo);
    let (_proxy, port, tls) = gateway(dir.path(), &[echo.target()], "", "");
    let ep = endpoint(client_config(&tls.ca, false));
    let statuses = block_on(async {
        let (_conn, send) = connect(&ep, port).await.unwrap();
        let paths: Vec<String> = (0..100).map(|i| format!("/stream/{i}")).collect();
        let requests = paths.iter().map(|path| {
            let mut send = send.clone();
            async move {
                let got = request(&mut send, &Request::get(path)).await.unwrap();
                let first = String::from_utf8_lossy(&got.body)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                (got.status, first, path.clone())
            }
        });
        join_all(requests).await
    });
    assert_eq!(statuses.len(), 100);
    for (status, first, path) in statuses {
        assert_eq!(status, 200, "{path}");
        // Each answer is its own request's.
        assert_eq!(first, format!("GET {path} HTTP/1.1"), "{path}");
    }
}

#[test]
fn trailers_cross_both_ways_with_an_h2c_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let trailers = H2Backend::start(Behaviour::Trailers);
    let echo_body = H2Backend::start(Behaviour::EchoBody);
    let routes = "[[listeners.web.routes]]\nmatch = { path = \"/echo\" }\nupstream = \"echo\"\n";
    let upstreams = format!(
        "[upstreams.echo]\ntargets = [\"{}\"]\nprotocol = \"h2c\"\n",
        echo_body.addr
    );
    let (_proxy, port, tls) = gateway(
        dir.path(),
        &[trailers.addr.to_string()],
        routes,
        &format!("protocol = \"h2c\"\n{upstreams}"),
    );
    let got = fetch(&tls.ca, port, &Request::get("/grpc.Service/Call")).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"/grpc.Service/Call");
    assert!(got.trailers.contains(&("grpc-status".into(), "0".into())), "{got:?}");
    assert!(
        got.trailers.contains(&("grpc-message".into(), "fine".into())),
        "{got:?}"
    );

    let mut req = Request::post("/echo", vec![b'a'; 70_000]);
    req.trailers = vec![("x-checksum", "abc")];
    let got = fetch(&tls.ca, port, &req).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        "70000 bytes; trailers: x-checksum=abc"
    );
}

#[test]
fn answers_of_rampart_own_and_upstream_failures_come_over_http3() {
    let dir = tempfile::tempdir().unwrap();
    let routes = "[[listeners.web.routes]]\nmatch = { path = \"/hi\" }\nrespond = { status = 201, body = \"hi\\n\" }\n";
    let (_proxy, port, tls) = gateway(dir.path(), &[crate::common::dead_target()], routes, "");
    let got = fetch(&tls.ca, port, &Request::get("/hi")).unwrap();
    assert_eq!((got.status, got.body.as_slice()), (201, &b"hi\n"[..]));
    assert_eq!(got.header("content-length"), Some("3"));
    let got = fetch(&tls.ca, port, &Request::get("/elsewhere")).unwrap();
    assert_eq!(got.status, 502);
    // A HEAD is answered without a body.
    let mut head = Request::get("/hi");
    head.method = "HEAD";
    let got = fetch(&tls.ca, port, &head).unwrap();
    assert_eq!((got.status, got.body.len()), (201, 0));
}

#[test]
fn the_tcp_side_advertises_http3_and_the_access_log_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let echo = HttpBackend::start(Reply::Echo);
    let log = dir.path().join("access.log");
    let listener = format!("access_log = {{ path = \"{}\", format = \"json\" }}", log.display());
    let (_proxy, port, tls) = gateway(dir.path(), &[echo.target()], &listener, "");
    // HTTPS over TCP: the response says where HTTP/3 is.
    let config = ClientOpts::new(&tls.ca).alpn(&["http/1.1"]).build();
    let mut conn = handshake(port, &config, "localhost").unwrap();
    conn.write_all(b"GET /a HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = conn.read_to_string(&mut text);
    let want = format!("alt-svc: h3=\":{port}\"; ma=86400\r\n");
    assert!(text.to_ascii_lowercase().contains(&want), "{text}");
    // Over HTTP/3 too, and the access log tells the two apart.
    let got = fetch(&tls.ca, port, &Request::get("/b")).unwrap();
    assert_eq!(
        got.header("alt-svc"),
        Some(format!("h3=\":{port}\"; ma=86400").as_str())
    );
    let lines = json_log_lines(&log, 2);
    let protocols: Vec<&str> = lines.iter().map(|l| l["protocol"].as_str().unwrap()).collect();
    assert_eq!(protocols, ["HTTP/1.1", "HTTP/3"]);
}
