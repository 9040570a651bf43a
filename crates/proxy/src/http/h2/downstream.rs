//! [`Downstream`] for one HTTP/2 stream. Responses arrive as the neutral message (see
//! [`crate::http::downstream`]): the head's fields are HPACK-encoded as they are read (no map in
//! between), data becomes DATA, trailers become HTTP/2 trailers. Request bodies cross as body
//! frames: each DATA as it came (a slice of the connection's read buffer), then the end with the
//! request's trailers. Response DATA waits for the client's window, at most the send timeout.

use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h2conn::HeadWriter;
use rampart_proto::h2map::crosses_into_h2;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::client_stream::H2Stream;
use super::core::DataOut;
use super::mux::{Incoming, StreamIo};
use super::within;
use crate::http::downstream::{BodyFrame, BodySink, BodySource, Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::head_out::{response_fields, ResponseParts};
use crate::http::iobuf::IoBuf;
use crate::http::local::reason;
use crate::http::state::HttpWorkerState;

/// The downstream side of one request on an HTTP/2 stream.
pub(crate) struct H2Downstream<'b, 'c> {
    pub(super) s: &'b mut H2Stream<'c>,
    pub(super) inbuf: &'b mut IoBuf,
    pub(super) state: &'b HttpWorkerState,
    pub(super) body_timeout: Duration,
    pub(super) head_only: bool,
}

/// The rest of a stream's request body, taken out of its downstream side so that it can flow
/// to an HTTP/2 upstream while the response flows back (gRPC bidirectional streams).
pub(crate) struct H2BodySource {
    io: StreamIo,
    timeout: Duration,
}

impl BodySource for H2BodySource {
    /// Moves DATA and trailers to `to` until the client's side ends.
    async fn forward(&mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError> {
        loop {
            match within(self.timeout, self.io.data()).await {
                None => return Err(HttpError::ClientBodyTimeout),
                Some(Incoming::Data(bytes)) => {
                    let len = bytes.len();
                    to.send_bytes(bytes, write_timeout).await?;
                    // Passed on: the client may send as much again.
                    self.io.release(len);
                }
                Some(Incoming::Reset) => return Err(HttpError::ClientGone),
                Some(Incoming::End) => break,
            }
        }
        match self.io.take_trailers() {
            Some((buf, list)) => to.end(FieldsRef::Packed { buf: &buf, list: &list }),
            None => to.end(FieldsRef::EMPTY),
        }
    }
}

/// The gRPC status for an answer of Rampart's own with HTTP status `status` (as Envoy maps them,
/// with timeouts as DEADLINE_EXCEEDED and limits as RESOURCE_EXHAUSTED).
pub(super) fn grpc_status(status: u16) -> u8 {
    match status {
        400 => 13,            // INTERNAL
        401 => 16,            // UNAUTHENTICATED
        403 => 7,             // PERMISSION_DENIED
        404 => 12,            // UNIMPLEMENTED
        408 | 504 => 4,       // DEADLINE_EXCEEDED
        413 | 429 | 431 => 8, // RESOURCE_EXHAUSTED
        502 | 503 => 14,      // UNAVAILABLE
        _ => 2,               // UNKNOWN
    }
}

/// The fields of a head or trailers that may cross into HTTP/2 (see [`crosses_into_h2`]).
fn crosses(name: &[u8], value: &[u8]) -> bool {
    crosses_into_h2(name, value)
}

impl H2Downstream<'_, '_> {
    /// The response head's fields as HTTP/2 fields: hop-by-hop ones dropped, edits applied.
    fn response_headers(head: &ResponseParts<'_>, w: &mut HeadWriter<'_>) {
        response_fields(head.fields(), false, &head.edits, |name, value| {
            let websocket_accept = head.upgrade() && name.eq_ignore_ascii_case(b"sec-websocket-accept");
            if !websocket_accept && crosses(name, value) {
                w.field(name, value);
            }
        });
    }

    async fn data(&mut self, bytes: impl DataOut, end: bool) -> Result<(), HttpError> {
        let limit = self.s.send_timeout;
        let result = self.s.io.send_data(bytes, end, limit, &mut self.s.sent).await;
        if end && result.is_ok() {
            self.s.response.ended = true;
        }
        result
    }

    /// Takes `bytes` of the body out of what its length leaves (all of them when it has none):
    /// how many may go, and whether they end the body.
    fn take_body(&mut self, len: usize) -> (usize, bool) {
        match &mut self.s.response.left {
            None => (len, false),
            Some(left) => {
                let take = (len as u64).min(*left);
                *left -= take;
                (take as usize, *left == 0)
            }
        }
    }

    /// Sends a response head; `end` when nothing follows it.
    fn send_head(&mut self, status: u16, end: bool, fill: impl FnOnce(&mut HeadWriter<'_>)) -> Result<(), HttpError> {
        self.s.io.send_head(Some(status), end, fill)?;
        self.s.head_sent = true;
        self.s.response.ended = end;
        Ok(())
    }

    /// A gRPC-shaped answer: HTTP 200, the status in a trailers-only response.
    fn send_grpc_answer(&mut self, status: u16, message: &[u8]) -> Result<(), HttpError> {
        // grpc-message is percent-encoded; ours are plain ASCII words.
        let message: Vec<u8> = message
            .iter()
            .copied()
            .filter(|b| b.is_ascii_graphic() || *b == b' ')
            .flat_map(|b| match b {
                b' ' => *b"%20",
                b'%' => *b"%25",
                b => [b, 0, 0],
            })
            .filter(|b| *b != 0)
            .collect();
        let code = grpc_status(status).to_string();
        self.send_head(200, true, |w| {
            w.field(b"content-type", b"application/grpc");
            w.field(b"grpc-status", code.as_bytes());
            w.field(b"grpc-message", &message);
        })
    }
}

impl Downstream for H2Downstream<'_, '_> {
    type BodySource = H2BodySource;

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        if !self.s.request_ended {
            if self.s.body_taken {
                return Err(HttpError::ClientGone);
            }
            self.s.release_last();
            match within(self.body_timeout, self.s.io.data()).await {
                None => return Err(HttpError::ClientBodyTimeout),
                Some(Incoming::Data(bytes)) => {
                    self.s.request_data = bytes;
                    return Ok(BodyFrame::Shared(&self.s.request_data));
                }
                Some(Incoming::Reset) => return Err(HttpError::ClientGone),
                Some(Incoming::End) => {
                    self.s.request_ended = true;
                    self.s.request_trailers = self.s.io.take_trailers();
                }
            }
        }
        Ok(BodyFrame::End(match &self.s.request_trailers {
            Some((buf, list)) => FieldsRef::Packed { buf, list },
            None => FieldsRef::EMPTY,
        }))
    }

    fn body_waiting(&self) -> bool {
        false
    }

    fn release_read_buffer(&mut self) {
        self.inbuf.release_if_empty(self.state);
    }

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.s.io.send_head(Some(100), false, |_| {})
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        // An interim answer the client cannot take is no reason to fail the request.
        let _ = self
            .s
            .io
            .send_head(Some(head.status), false, |w| Self::response_headers(head, w));
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        // A WebSocket accepted by the upstream's 101 is a 200 on an extended CONNECT stream.
        let status = if head.upgrade() { 200 } else { head.status };
        if !(200..=999).contains(&status) {
            return Err(HttpError::UpstreamBadResponse);
        }
        self.s.send_timeout = limit;
        let length = if head.upgrade() {
            BodyLength::Unknown
        } else {
            head.length
        };
        self.s.response.left = match length {
            BodyLength::None => Some(0),
            BodyLength::Exact(n) => Some(n),
            BodyLength::Unknown => None,
        };
        let end = self.s.response.left == Some(0);
        self.send_head(status, end, |w| Self::response_headers(head, w))?;
        if !body.is_empty() {
            self.send_data(body).await?;
        }
        Ok(())
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        if self.s.response.ended {
            return Ok(());
        }
        let (take, end) = self.take_body(data.len());
        self.data(&data[..take], end).await
    }

    async fn send_bytes(&mut self, mut data: Bytes) -> Result<(), HttpError> {
        if self.s.response.ended {
            return Ok(());
        }
        let (take, end) = self.take_body(data.len());
        data.truncate(take);
        self.data(data, end).await
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        if self.s.response.ended {
            // The body's length ended the stream already: no room for trailers.
            return Ok(());
        }
        if !trailers.iter().any(|(n, v)| crosses(n, v)) {
            return self.end_body().await;
        }
        self.s.io.send_head(None, true, |w| {
            for (name, value) in trailers.iter().filter(|(n, v)| crosses(n, v)) {
                w.field(name, value);
            }
        })?;
        self.s.response.ended = true;
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        if self.s.response.ended {
            return Ok(());
        }
        self.data(&[][..], true).await
    }

    fn needs_end(&self) -> bool {
        !self.s.response.ended
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        if self.s.head_sent {
            // A head has gone already: nothing else can be said on this stream.
            return Err(HttpError::ClientGone);
        }
        if self.s.grpc && answer.status >= 400 {
            let message = format!("{} {}", answer.status, reason(answer.status));
            return self.send_grpc_answer(answer.status, message.as_bytes());
        }
        let bodiless = answer.body.is_empty() || self.head_only;
        let length = answer.body.len().to_string();
        self.send_head(answer.status, bodiless, |w| {
            w.field(b"date", &crate::http::date::now());
            let mut has_type = false;
            for (name, value) in answer.headers {
                has_type |= name.eq_ignore_ascii_case("content-type");
                if crosses(name.as_bytes(), value.as_bytes()) {
                    w.field(name.as_bytes(), value.as_bytes());
                }
            }
            if !has_type && !answer.body.is_empty() {
                w.field(b"content-type", b"text/plain; charset=utf-8");
            }
            w.field(b"content-length", length.as_bytes());
        })?;
        if !bodiless {
            self.data(answer.body, true).await?;
        }
        Ok(())
    }

    fn take_body_source(&mut self) -> Option<H2BodySource> {
        if self.s.request_ended || self.s.body_taken {
            return None;
        }
        self.s.release_last();
        self.s.body_taken = true;
        Some(H2BodySource {
            io: self.s.io.clone(),
            timeout: self.body_timeout,
        })
    }

    fn bytes_sent(&self) -> u64 {
        self.s.sent
    }

    fn keeps_alive(&self) -> bool {
        true
    }
}
