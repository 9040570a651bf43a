//! An HTTP/3 client of our own for the tests that need more than a command-line client gives:
//! quinn + h3 (independent of Rampart's server side, which uses them too but not this code),
//! on a current-thread runtime per call.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes};

use crate::common::tls::{Ca, ClientOpts};

/// One response, whole.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What a request sends.
#[derive(Default, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(&'a str, &'a str)>,
}

impl<'a> Request<'a> {
    pub fn get(path: &'a str) -> Self {
        Request {
            method: "GET",
            path,
            ..Default::default()
        }
    }

    pub fn post(path: &'a str, body: Vec<u8>) -> Self {
        Request {
            method: "POST",
            path,
            body,
            ..Default::default()
        }
    }
}

thread_local! {
    /// The test thread's runtime: endpoints made on it keep working from one call to the next.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
}

/// Runs `f` to its end on the test thread's runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    RUNTIME.with(|rt| rt.block_on(f))
}

/// The client's TLS: TLS 1.3, ALPN h3, the server verified against `ca` for `localhost`,
/// sessions kept (for 0-RTT when `early` is set).
pub fn client_config(ca: &Ca, early: bool) -> quinn::ClientConfig {
    let mut tls = (*ClientOpts::new(ca).tls13_only().alpn(&["h3"]).resume().build()).clone();
    tls.enable_early_data = early;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    // A server that is not there is given up on within seconds (quinn's default is 30).
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(std::time::Duration::from_secs(3).try_into().unwrap()));
    config.transport_config(Arc::new(transport));
    config
}

/// A client endpoint on 127.0.0.1 with `config`.
pub fn endpoint(config: quinn::ClientConfig) -> quinn::Endpoint {
    let mut ep = RUNTIME.with(|rt| {
        let _entered = rt.enter();
        quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
    });
    ep.set_default_client_config(config);
    ep
}

/// An HTTP/3 connection to `port` (its driver runs on the current runtime).
pub async fn connect(
    ep: &quinn::Endpoint,
    port: u16,
) -> Result<(quinn::Connection, h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>), String> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let conn = ep
        .connect(addr, "localhost")
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    h3_over(conn).await
}

/// HTTP/3 over an established QUIC connection.
pub async fn h3_over(
    conn: quinn::Connection,
) -> Result<(quinn::Connection, h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>), String> {
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    Ok((conn, send))
}

/// Sends `req` on `send` and reads the whole response.
pub async fn request(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    req: &Request<'_>,
) -> Result<Response, String> {
    let mut builder = http::Request::builder()
        .method(req.method)
        .uri(format!("https://localhost{}", req.path));
    for (n, v) in &req.headers {
        builder = builder.header(*n, *v);
    }
    let head = builder.body(()).map_err(|e| e.to_string())?;
    let mut stream = send.send_request(head).await.map_err(|e| e.to_string())?;
    if !req.body.is_empty() {
        for piece in req.body.chunks(16 << 10) {
            stream
                .send_data(Bytes::copy_from_slice(piece))
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    if !req.trailers.is_empty() {
        let mut map = http::HeaderMap::new();
        for (n, v) in &req.trailers {
            map.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        stream.send_trailers(map).await.map_err(|e| e.to_string())?;
    }
    stream.finish().await.map_err(|e| e.to_string())?;
    let response = stream.recv_response().await.map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    while let Some(mut data) = stream.recv_data().await.map_err(|e| e.to_string())? {
        while data.has_remaining() {
            let chunk = data.chunk();
            body.extend_from_slice(chunk);
            let n = chunk.len();
            data.advance(n);
        }
    }
    let trailers = stream.recv_trailers().await.map_err(|e| e.to_string())?;
    Ok(Response {
        status: response.status().as_u16(),
        headers: pairs(response.headers()),
        body,
        trailers: trailers.as_ref().map(pairs).unwrap_or_default(),
    })
}

fn pairs(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// One request on a new connection to `port`, verified against `ca`.
pub fn fetch(ca: &Ca, port: u16, req: &Request<'_>) -> Result<Response, String> {
    let ep = endpoint(client_config(ca, false));
    block_on(async {
        let (_conn, mut send) = connect(&ep, port).await?;
        request(&mut send, req).await
    })
}
