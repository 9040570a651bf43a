//! [`Downstream`] for one HTTP/2 stream. Responses arrive as the neutral message (see
//! [`crate::http::downstream`]): the head's fields become HTTP/2 fields (an HTTP/2 upstream's map
//! is cloned, not rebuilt), data becomes DATA (shared bytes without a copy), trailers become
//! HTTP/2 trailers. Request bodies cross as body frames: each DATA as it came, then the end with
//! the request's trailers. Response DATA waits for the client's window, at most the send timeout.

use std::time::Duration;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use rampart_proto::h2map::{is_connection_specific, to_h2_fields};
use rampart_proto::message::{BodyLength, FieldsRef};

use super::client_stream::H2Stream;
use crate::http::downstream::{BodyFrame, BodySink, BodySource, Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::h2_send::write_bytes;
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
pub(crate) struct H2BodySource<'c> {
    recv: RecvStream,
    info: &'c super::ConnInfo,
    timeout: Duration,
}

impl BodySource for H2BodySource<'_> {
    /// Moves DATA and trailers to `to` until the client's side ends. Errors reset `to`.
    async fn pump(mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError> {
        let result = self.pump_inner(to, write_timeout).await;
        if result.is_err() {
            to.cancel();
        }
        result
    }
}

impl H2BodySource<'_> {
    async fn pump_inner(&mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError> {
        loop {
            match tokio::time::timeout(self.timeout, self.recv.data()).await {
                Err(_) => return Err(HttpError::ClientBodyTimeout),
                Ok(Some(Ok(bytes))) => {
                    let _ = self.recv.flow_control().release_capacity(bytes.len());
                    to.send_bytes(bytes, write_timeout).await?;
                }
                Ok(Some(Err(e))) => {
                    if e.is_reset() && e.is_remote() {
                        self.info.count_reset();
                    }
                    return Err(HttpError::ClientGone);
                }
                Ok(None) => break,
            }
        }
        match self.recv.trailers().await {
            Ok(Some(trailers)) => to.end(FieldsRef::Map(&trailers)),
            Ok(None) => to.end(FieldsRef::EMPTY),
            Err(_) => Err(HttpError::ClientGone),
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

/// Appends a field (`HeaderName::from_bytes` lowercases the name; a name or value HTTP/2 cannot
/// carry is left out).
fn header(map: &mut HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
        map.append(n, v);
    }
}

impl H2Downstream<'_, '_> {
    /// The response head's fields as HTTP/2 fields: hop-by-hop ones dropped, edits applied.
    fn response_headers(head: &ResponseParts<'_>, map: &mut HeaderMap) {
        if let (FieldsRef::Map(fields), false, true) = (head.fields(), head.upgrade(), head.edits.is_empty()) {
            // From an HTTP/2 upstream, untouched: the `h2` crate let nothing connection-specific
            // in, so the map goes on as it is (its values are shared, not copied).
            map.clone_from(fields);
            return;
        }
        response_fields(head.fields(), false, &head.edits, |name, value| {
            let websocket_accept = head.upgrade() && name.eq_ignore_ascii_case(b"sec-websocket-accept");
            if !websocket_accept && !is_connection_specific(name, value) {
                header(map, name, value);
            }
        });
    }

    fn send_stream(&mut self) -> Result<&mut SendStream<Bytes>, HttpError> {
        self.s.send.as_mut().ok_or(HttpError::ClientGone)
    }

    /// Sends the head; `end` when nothing follows it.
    fn send_head(&mut self, response: Response<()>, end: bool) -> Result<(), HttpError> {
        let send = self
            .s
            .respond
            .send_response(response, end)
            .map_err(|_| HttpError::ClientGone)?;
        self.s.send = Some(send);
        self.s.response.ended = end;
        Ok(())
    }

    async fn data(&mut self, bytes: &[u8], end: bool) -> Result<(), HttpError> {
        self.shared_data(Bytes::copy_from_slice(bytes), end).await
    }

    async fn shared_data(&mut self, bytes: Bytes, end: bool) -> Result<(), HttpError> {
        let limit = self.s.send_timeout;
        let mut sent = self.s.sent;
        let send = self.send_stream()?;
        let result = write_bytes(send, bytes, end, limit, &mut sent).await;
        self.s.sent = sent;
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

    /// A gRPC-shaped answer: HTTP 200, the status in a trailers-only response.
    fn send_grpc_answer(&mut self, status: u16, message: &[u8]) -> Result<(), HttpError> {
        let mut response = Response::new(());
        let map = response.headers_mut();
        header(map, b"content-type", b"application/grpc");
        header(map, b"grpc-status", grpc_status(status).to_string().as_bytes());
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
        header(map, b"grpc-message", &message);
        self.send_head(response, true)
    }
}

impl<'c> Downstream for H2Downstream<'_, 'c> {
    type BodySource = H2BodySource<'c>;

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        if !self.s.request_ended {
            let Some(recv) = self.s.recv.as_mut() else {
                return Err(HttpError::ClientGone);
            };
            loop {
                let data = match tokio::time::timeout(self.body_timeout, recv.data()).await {
                    Err(_) => return Err(HttpError::ClientBodyTimeout),
                    Ok(data) => data,
                };
                match data {
                    Some(Ok(bytes)) => {
                        let _ = recv.flow_control().release_capacity(bytes.len());
                        if bytes.is_empty() {
                            continue;
                        }
                        self.s.request_data = bytes;
                        return Ok(BodyFrame::Shared(&self.s.request_data));
                    }
                    Some(Err(e)) => {
                        if e.is_reset() && e.is_remote() {
                            self.s.info.count_reset();
                        }
                        return Err(HttpError::ClientGone);
                    }
                    None => {
                        self.s.request_ended = true;
                        self.s.request_trailers = match recv.trailers().await {
                            Ok(t) => t,
                            Err(_) => return Err(HttpError::ClientGone),
                        };
                        break;
                    }
                }
            }
        }
        Ok(BodyFrame::End(match &self.s.request_trailers {
            Some(map) => FieldsRef::Map(map),
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
        let mut interim = Response::new(());
        *interim.status_mut() = StatusCode::CONTINUE;
        self.s
            .respond
            .send_informational(interim)
            .map_err(|_| HttpError::ClientGone)
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        let mut interim = Response::new(());
        *interim.status_mut() = StatusCode::from_u16(head.status).map_err(|_| HttpError::UpstreamBadResponse)?;
        Self::response_headers(head, interim.headers_mut());
        // An interim answer the client cannot take is no reason to fail the request.
        let _ = self.s.respond.send_informational(interim);
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        let mut response = Response::new(());
        // A WebSocket accepted by the upstream's 101 is a 200 on an extended CONNECT stream.
        let status = if head.upgrade() { 200 } else { head.status };
        *response.status_mut() = StatusCode::from_u16(status).map_err(|_| HttpError::UpstreamBadResponse)?;
        Self::response_headers(head, response.headers_mut());
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
        self.send_head(response, self.s.response.left == Some(0))?;
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
        self.shared_data(data, end).await
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        if self.s.response.ended {
            // The body's length ended the stream already: no room for trailers.
            return Ok(());
        }
        let mut map = HeaderMap::new();
        to_h2_fields(trailers.iter(), &mut map, |_, _| true);
        if map.is_empty() {
            return self.end_body().await;
        }
        let send = self.send_stream()?;
        send.send_trailers(map).map_err(|_| HttpError::ClientGone)?;
        self.s.response.ended = true;
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        if self.s.response.ended {
            return Ok(());
        }
        self.data(&[], true).await
    }

    fn needs_end(&self) -> bool {
        !self.s.response.ended
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        if self.s.send.is_some() {
            // A head has gone already: nothing else can be said on this stream.
            return Err(HttpError::ClientGone);
        }
        if self.s.grpc && answer.status >= 400 {
            let message = format!("{} {}", answer.status, reason(answer.status));
            return self.send_grpc_answer(answer.status, message.as_bytes());
        }
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(answer.status).map_err(|_| HttpError::ClientGone)?;
        let map = response.headers_mut();
        header(map, b"date", &crate::http::date::now());
        let mut has_type = false;
        for (name, value) in answer.headers {
            has_type |= name.eq_ignore_ascii_case("content-type");
            header(map, name.as_bytes(), value.as_bytes());
        }
        if !has_type && !answer.body.is_empty() {
            header(map, b"content-type", b"text/plain; charset=utf-8");
        }
        header(map, b"content-length", answer.body.len().to_string().as_bytes());
        let bodiless = answer.body.is_empty() || self.head_only;
        self.send_head(response, bodiless)?;
        if !bodiless {
            self.data(answer.body, true).await?;
        }
        Ok(())
    }

    fn take_body_source(&mut self) -> Option<H2BodySource<'c>> {
        if self.s.request_ended {
            return None;
        }
        let recv = self.s.recv.take()?;
        Some(H2BodySource {
            recv,
            info: self.s.info,
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
