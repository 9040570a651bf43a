//! One gRPC call made by hand over a bare HTTP/2 connection, to see what tonic's client hides:
//! the HTTP status, the head's headers, and whether the answer was trailers-only (a HEADERS
//! frame that ends the stream, with grpc-status in it).

use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::Body as _;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::codegen::http::{HeaderMap, Request};
use tonic::codegen::Bytes;

use super::echo::EchoRequest;

/// What came back for a call made by [`raw_call`].
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: HeaderMap,
    /// The response head ended the stream (no body, no separate trailers).
    pub trailers_only: bool,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a gRPC-shaped answer: HTTP 200, `application/grpc`, trailers-only, `grpc-status`
    /// `code` (as gRPC over HTTP/2 wants it, and as rampart should answer for itself).
    pub fn assert_trailers_only(&self, code: tonic::Code) {
        assert_eq!(self.status, 200, "HTTP status of {self:?}");
        let content_type = self.header("content-type").unwrap_or("");
        assert!(content_type.starts_with("application/grpc"), "content-type of {self:?}");
        assert!(self.trailers_only, "not trailers-only: {self:?}");
        assert_eq!(
            self.header("grpc-status"),
            Some((code as i32).to_string().as_str()),
            "{self:?}"
        );
    }
}

/// Calls `path` on `addr` with `req` (one message) and the `extra` headers, over a new h2c
/// connection, and returns the response head.
pub async fn raw_call(addr: SocketAddr, path: &str, req: &EchoRequest, extra: &[(&str, &str)]) -> RawAnswer {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let message = prost::Message::encode_to_vec(req);
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let mut request = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(frame))).unwrap();
    let response = sender.send_request(request).await.expect("a response head");
    RawAnswer {
        status: response.status().as_u16(),
        trailers_only: response.body().is_end_stream(),
        headers: response.headers().clone(),
    }
}
