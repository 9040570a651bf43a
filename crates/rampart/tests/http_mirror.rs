//! A route's `mirror` through the internal client: the copy goes to the shadow as the shadow's
//! upstream settings say (TLS, HTTP/2), and a route whose upstream speaks HTTP/2 mirrors too.
//! Each shadow reports what it received (method, path, a header, the body) and answers `200`.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;

use bytes::Bytes;
use common::http::{send, HttpBackend, Reply};
use common::tls::{provider, Ca, CertSpec, Issued};
use common::{free_port, write_file, Rampart, WAIT};
use rampart_proto::h1::{parse_request, Framing, Limits};

/// What every test sends: a body and a header the copy must carry.
const POST: &[u8] =
    b"POST /orders?id=7 HTTP/1.1\r\nHost: shop.test\r\nX-Test: copied\r\ncontent-length: 5\r\n\r\nhello";
/// How a shadow reports that request.
const SEEN: &str = "POST /orders?id=7 x-test=copied hello";

/// A shadow: where it listens and what it reports (`METHOD PATH x-test=VALUE BODY` a request).
struct Shadow {
    target: String,
    seen: Receiver<String>,
}

impl Shadow {
    /// An HTTP/1.1 shadow, over TLS with `cert` when given.
    fn http1(cert: Option<&Issued>) -> Shadow {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let tls = cert.map(|cert| {
            let config = rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(cert.chain_der(), cert.key_der())
                .unwrap();
            Arc::new(config)
        });
        let (tx, seen) = channel();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (tx, tls) = (tx.clone(), tls.clone());
                thread::spawn(move || match tls {
                    None => serve_http1(conn, &tx),
                    Some(config) => {
                        let Ok(server) = rustls::ServerConnection::new(config) else {
                            return;
                        };
                        serve_http1(rustls::StreamOwned::new(server, conn), &tx);
                    }
                });
            }
        });
        Shadow { target, seen }
    }

    /// An HTTP/2 shadow in clear text (h2c, prior knowledge).
    fn h2c() -> Shadow {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let (tx, seen) = channel();
        common::servers::serve_tokio(listener, move |tcp| serve_h2(tcp, tx.clone()));
        Shadow { target, seen }
    }

    /// The next request it received.
    fn next(&self) -> String {
        self.seen.recv_timeout(WAIT).expect("the shadow received no copy")
    }
}

/// Reads requests (a head and its `content-length` body) off `conn`, reports each and answers
/// `200 ok`, until the connection ends.
fn serve_http1(mut conn: impl Read + Write, tx: &Sender<String>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut req = rampart_proto::message::RequestHead::default();
        let head = match parse_request(&buf, &Limits::default(), &mut req) {
            Ok(Some(head)) => head,
            Ok(None) => match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
            },
            Err(_) => return,
        };
        let body_len = match head.framing {
            Framing::Length(n) => n as usize,
            _ => 0,
        };
        while buf.len() < head.len + body_len {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let slice = |r: (u32, u32)| String::from_utf8_lossy(&buf[r.0 as usize..r.1 as usize]).into_owned();
        let header = req
            .fields
            .iter()
            .find(|f| f.name(&buf).eq_ignore_ascii_case(b"x-test"))
            .map(|f| String::from_utf8_lossy(f.value(&buf)).into_owned());
        let body = String::from_utf8_lossy(&buf[head.len..head.len + body_len]).into_owned();
        let _ = tx.send(format!(
            "{} {} x-test={} {body}",
            slice(req.method),
            slice(req.target),
            header.as_deref().unwrap_or("-")
        ));
        buf.drain(..head.len + body_len);
        if conn
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .and_then(|()| conn.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Serves one HTTP/2 connection: each request reported and answered `200 ok`, on a task of its
/// own (the connection is driven by `accept` meanwhile).
async fn serve_h2(tcp: tokio::net::TcpStream, tx: Sender<String>) {
    let Ok(mut conn) = h2::server::handshake(tcp).await else {
        return;
    };
    while let Some(Ok((request, respond))) = conn.accept().await {
        tokio::spawn(answer_h2(request, respond, tx.clone()));
    }
}

async fn answer_h2(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    tx: Sender<String>,
) {
    let (parts, mut body) = request.into_parts();
    let mut data = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let header = parts.headers.get("x-test").and_then(|v| v.to_str().ok());
    let _ = tx.send(format!(
        "{} {} x-test={} {}",
        parts.method,
        parts.uri.path_and_query().map_or("", |p| p.as_str()),
        header.unwrap_or("-"),
        String::from_utf8_lossy(&data)
    ));
    let Ok(mut send) = respond.send_response(http::Response::new(()), false) else {
        return;
    };
    let _ = send.send_data(Bytes::from_static(b"ok"), true);
}

/// Starts Rampart with one route to upstream `app` (`app` lines) mirrored in full to upstream
/// `shadow` (`shadow` lines), and an admin listener; returns the proxy, its port and the admin's.
fn gateway(dir: &std::path::Path, app: &str, shadow: &str) -> (Rampart, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nupstream = \"app\"\nmirror = {{ upstream = \"shadow\", percent = 100 }}\n\n\
         [upstreams.app]\n{app}\n\n[upstreams.shadow]\n{shadow}\n"
    );
    let path = write_file(dir, "mirror.toml", &text);
    let proxy = Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]);
    (proxy, port, admin)
}

/// Sends [`POST`] through the gateway on `port` (answered 200 by the route's upstream), checks
/// that `shadow` got its copy, and that the copy is counted as answered, none as failed.
fn post_and_check_the_copy(port: u16, admin: u16, shadow: &Shadow) {
    let mut conn = common::connect(port);
    assert_eq!(send(&mut conn, POST).0, 200);
    assert_eq!(shadow.next(), SEEN);
    common::tls::eventually("the copy is counted as answered", || {
        let samples = common::scrape::scrape(admin);
        let count = |result| {
            common::scrape::value(
                &samples,
                "rampart_upstream_mirrored_total",
                &[("upstream", "shadow"), ("result", result)],
            )
        };
        count("answered") == 1.0 && count("failed") == 0.0
    });
}

/// A shadow behind TLS (verified against its CA) gets the copy over TLS.
#[test]
fn a_mirror_copies_to_a_tls_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Shadow CA");
    let shadow = Shadow::http1(Some(&ca.issue(&CertSpec::new(&["shadow.test"]))));
    let ca_path = ca.write(dir.path(), "ca.pem");
    let real = HttpBackend::start(Reply::Echo);
    let (_proxy, port, admin) = gateway(
        dir.path(),
        &format!("targets = [\"{}\"]", real.target()),
        &format!(
            "targets = [\"{}\"]\n[upstreams.shadow.tls]\nsni = \"shadow.test\"\nca = \"{ca_path}\"",
            shadow.target
        ),
    );
    post_and_check_the_copy(port, admin, &shadow);
    assert_eq!(real.seen(), 1);
}

/// A shadow that speaks HTTP/2 (h2c) gets the copy as an HTTP/2 stream.
#[test]
fn a_mirror_copies_to_an_http2_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let shadow = Shadow::h2c();
    let real = HttpBackend::start(Reply::Echo);
    let (_proxy, port, admin) = gateway(
        dir.path(),
        &format!("targets = [\"{}\"]", real.target()),
        &format!("targets = [\"{}\"]\nprotocol = \"h2c\"", shadow.target),
    );
    post_and_check_the_copy(port, admin, &shadow);
    assert_eq!(real.seen(), 1);
}

/// A route whose upstream speaks HTTP/2 (its head laid out as fields, no HTTP/1 text) mirrors
/// to an HTTP/1.1 shadow: the copy is written from the fields.
#[test]
fn a_route_to_an_http2_upstream_mirrors_to_an_http1_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let real = Shadow::h2c();
    let shadow = Shadow::http1(None);
    let (_proxy, port, admin) = gateway(
        dir.path(),
        &format!("targets = [\"{}\"]\nprotocol = \"h2c\"", real.target),
        &format!("targets = [\"{}\"]", shadow.target),
    );
    post_and_check_the_copy(port, admin, &shadow);
    assert_eq!(real.next(), SEEN);
    // A bodiless request is copied before the exchange, from the same fields.
    let mut conn = common::connect(port);
    let get = b"GET /status HTTP/1.1\r\nHost: shop.test\r\nX-Test: again\r\n\r\n";
    assert_eq!(send(&mut conn, get).0, 200);
    assert_eq!(shadow.next(), "GET /status x-test=again ");
}
