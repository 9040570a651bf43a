//! What one HTTP/2 stream from a client holds while its request is answered: the `h2` crate's
//! halves of the stream and where the response stands.

use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};

use super::ConnInfo;

/// The client side of one stream.
pub(crate) struct H2Stream<'c> {
    pub(super) info: &'c ConnInfo,
    /// The request body; taken by an exchange that streams it on its own ([`super::downstream::H2BodySource`]).
    pub(super) recv: Option<RecvStream>,
    pub(super) respond: SendResponse<Bytes>,
    /// The response body's stream, once the head has gone.
    pub(super) send: Option<SendStream<Bytes>>,
    pub(super) request_ended: bool,
    /// The request body's last DATA, as the last body frame gave it.
    pub(super) request_data: Bytes,
    /// The request's trailers, once its body has ended with them.
    pub(super) request_trailers: Option<http::HeaderMap>,
    /// A gRPC request: answers of Rampart's own are gRPC-shaped.
    pub(super) grpc: bool,
    /// The response body as the upstream frames it, and how far it has got.
    pub(super) response: ResponseBody,
    pub(super) sent: u64,
    /// Longest wait for the client's window to open.
    pub(super) send_timeout: Duration,
}

/// Where the response body stands.
#[derive(Default)]
pub(super) struct ResponseBody {
    /// Data bytes the head's length still allows (`None`: unknown, the upstream ends it).
    pub left: Option<u64>,
    /// END_STREAM has gone (or the stream was reset).
    pub ended: bool,
}
