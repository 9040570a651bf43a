//! What one HTTP/2 stream from a client holds while its request is answered: its way to the
//! connection and where the request body and the response stand.

use std::time::Duration;

use bytes::Bytes;

use super::mux::{StreamIo, Trailers};
use super::ConnInfo;

/// The client side of one stream.
pub(crate) struct H2Stream<'c> {
    pub(super) info: &'c ConnInfo,
    pub(super) io: StreamIo,
    /// The request body was taken by an exchange that streams it on its own
    /// ([`super::downstream::H2BodySource`]).
    pub(super) body_taken: bool,
    /// The response head has gone.
    pub(super) head_sent: bool,
    pub(super) request_ended: bool,
    /// The request body's last DATA, as the last body frame gave it; its credit goes back to the
    /// client when the next is asked for (it has been passed on by then).
    pub(super) request_data: Bytes,
    /// The request's trailers, once its body has ended with them.
    pub(super) request_trailers: Option<Trailers>,
    /// A gRPC request: answers of Rampart's own are gRPC-shaped.
    pub(super) grpc: bool,
    /// The response body as the upstream frames it, and how far it has got.
    pub(super) response: ResponseBody,
    pub(super) sent: u64,
    /// Longest wait for the client's window to open.
    pub(super) send_timeout: Duration,
}

impl H2Stream<'_> {
    /// Gives back the credit of the DATA last handed out (it has been passed on).
    pub(super) fn release_last(&mut self) {
        let n = std::mem::take(&mut self.request_data).len();
        if n > 0 {
            self.io.release(n);
        }
    }
}

/// Where the response body stands.
#[derive(Default)]
pub(super) struct ResponseBody {
    /// Data bytes the head's length still allows (`None`: unknown, the upstream ends it).
    pub left: Option<u64>,
    /// END_STREAM has gone (or the stream was reset).
    pub ended: bool,
}
