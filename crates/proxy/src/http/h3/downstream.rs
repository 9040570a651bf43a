//! [`Downstream`] for one HTTP/3 request stream. Responses arrive as the neutral message (see
//! [`crate::http::downstream`]): the head's fields become a QPACK-encoded HEADERS frame (the
//! fields HTTP/2 refuses are refused here too: HTTP/3 has the same rule, RFC 9114 §4.2), data
//! becomes DATA, trailers become a trailing HEADERS frame. Request bodies cross as body frames:
//! each DATA as it came, then the end with the request's trailers. A write waits for the
//! client's flow control at most the send timeout.

use std::time::Duration;

use bytes::{Buf, Bytes};
use rampart_proto::h2map::crosses_into_h2;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::stream::{pack, H3Stream, RecvHalf};
use crate::http::downstream::{BodyFrame, BodySink, BodySource, Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::head_out::{response_fields, ResponseParts};

/// The downstream side of one request on an HTTP/3 stream.
pub(crate) struct H3Downstream<'b, 'c> {
    pub(super) s: &'b mut H3Stream<'c>,
    pub(super) body_timeout: Duration,
    pub(super) head_only: bool,
}

/// The rest of a stream's request body, taken out so that it flows to an HTTP/2 upstream while
/// the response flows back.
pub(crate) struct H3BodySource {
    recv: RecvHalf,
    first: Option<Bytes>,
    timeout: Duration,
}

impl BodySource for H3BodySource {
    /// Moves DATA and trailers to `to` until the client's side ends.
    async fn forward(&mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError> {
        if let Some(first) = self.first.take() {
            to.send_bytes(first, write_timeout).await?;
        }
        while let Some(data) = read_data(&mut self.recv, self.timeout).await? {
            to.send_bytes(data, write_timeout).await?;
        }
        match read_trailers(&mut self.recv).await {
            Some((buf, list)) => to.end(FieldsRef::Packed { buf: &buf, list: &list }),
            None => to.end(FieldsRef::EMPTY),
        }
    }
}

/// The next request body data (`None` at the body's end), waiting at most `timeout`.
async fn read_data(recv: &mut RecvHalf, timeout: Duration) -> Result<Option<Bytes>, HttpError> {
    match tokio::time::timeout(timeout, recv.recv_data()).await {
        Err(_) => Err(HttpError::ClientBodyTimeout),
        Ok(Err(_)) => Err(HttpError::ClientGone),
        Ok(Ok(None)) => Ok(None),
        Ok(Ok(Some(mut data))) => Ok(Some(data.copy_to_bytes(data.remaining()))),
    }
}

/// The request's trailers, once its body ended.
async fn read_trailers(recv: &mut RecvHalf) -> Option<super::stream::Trailers> {
    recv.recv_trailers().await.ok().flatten().map(|t| pack(&t))
}

/// The fields of a head or trailers that may cross into HTTP/3 (the same as into HTTP/2).
fn crosses(name: &[u8], value: &[u8]) -> bool {
    crosses_into_h2(name, value)
}

/// Appends a field to a header map, skipping what `http` cannot hold (checked already by the
/// codec that read it; an upstream's odd byte is no reason to fail the response).
fn put(map: &mut http::HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
        map.append(name, value);
    }
}

impl H3Downstream<'_, '_> {
    async fn send_head(&mut self, status: u16, headers: http::HeaderMap) -> Result<(), HttpError> {
        let mut response = http::Response::new(());
        *response.status_mut() = http::StatusCode::from_u16(status).map_err(|_| HttpError::UpstreamBadResponse)?;
        *response.headers_mut() = headers;
        let limit = self.s.send_timeout;
        match tokio::time::timeout(limit, self.s.send.send_response(response)).await {
            Ok(Ok(())) => {
                self.s.head_sent = true;
                Ok(())
            }
            _ => Err(HttpError::ClientGone),
        }
    }

    async fn data(&mut self, data: Bytes) -> Result<(), HttpError> {
        let len = data.len() as u64;
        let limit = self.s.send_timeout;
        match tokio::time::timeout(limit, self.s.send.send_data(data)).await {
            Ok(Ok(())) => {
                self.s.sent += len;
                Ok(())
            }
            _ => Err(HttpError::ClientGone),
        }
    }

    /// Takes `len` bytes of the body out of what its length leaves: how many may go.
    fn take_body(&mut self, len: usize) -> usize {
        match &mut self.s.left {
            None => len,
            Some(left) => {
                let take = (len as u64).min(*left);
                *left -= take;
                take as usize
            }
        }
    }
}

impl Downstream for H3Downstream<'_, '_> {
    type BodySource = H3BodySource;

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        if !self.s.request_ended {
            let next = match self.s.first.take() {
                Some(first) => Some(first),
                None => {
                    let recv = self.s.recv.as_mut().ok_or(HttpError::ClientGone)?;
                    read_data(recv, self.body_timeout).await?
                }
            };
            match next {
                Some(data) => {
                    self.s.request_data = data;
                    return Ok(BodyFrame::Shared(&self.s.request_data));
                }
                None => {
                    self.s.request_ended = true;
                    if let Some(recv) = self.s.recv.as_mut() {
                        self.s.request_trailers = read_trailers(recv).await;
                    }
                }
            }
        }
        Ok(BodyFrame::End(match &self.s.request_trailers {
            Some((buf, list)) => FieldsRef::Packed { buf, list },
            None => FieldsRef::EMPTY,
        }))
    }

    fn body_waiting(&self) -> bool {
        self.s.first.is_some()
    }

    fn release_read_buffer(&mut self) {}

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.send_head(100, http::HeaderMap::new()).await?;
        self.s.head_sent = false;
        Ok(())
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        let mut headers = http::HeaderMap::new();
        response_fields(head.fields(), false, &head.edits, |n, v| {
            if crosses(n, v) {
                put(&mut headers, n, v)
            }
        });
        // An interim answer the client cannot take is no reason to fail the request.
        if self.send_head(head.status, headers).await.is_ok() {
            self.s.head_sent = false;
        }
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        if !(200..=999).contains(&head.status) || head.upgrade() {
            return Err(HttpError::UpstreamBadResponse);
        }
        self.s.send_timeout = limit;
        self.s.left = match head.length {
            BodyLength::None => Some(0),
            BodyLength::Exact(n) => Some(n),
            BodyLength::Unknown => None,
        };
        let mut headers = http::HeaderMap::new();
        response_fields(head.fields(), false, &head.edits, |n, v| {
            if crosses(n, v) {
                put(&mut headers, n, v)
            }
        });
        self.send_head(head.status, headers).await?;
        if !body.is_empty() {
            self.send_data(body).await?;
        }
        Ok(())
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        let take = self.take_body(data.len());
        if take == 0 {
            return Ok(());
        }
        self.data(Bytes::copy_from_slice(&data[..take])).await
    }

    async fn send_bytes(&mut self, mut data: Bytes) -> Result<(), HttpError> {
        let take = self.take_body(data.len());
        if take == 0 {
            return Ok(());
        }
        data.truncate(take);
        self.data(data).await
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        let mut map = http::HeaderMap::new();
        for (name, value) in trailers.iter().filter(|(n, v)| crosses(n, v)) {
            put(&mut map, name, value);
        }
        if !map.is_empty() {
            let limit = self.s.send_timeout;
            match tokio::time::timeout(limit, self.s.send.send_trailers(map)).await {
                Ok(Ok(())) => {}
                _ => return Err(HttpError::ClientGone),
            }
        }
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        // The stream is finished when the request ends (`H3Stream::end`).
        Ok(())
    }

    fn needs_end(&self) -> bool {
        false
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        if self.s.head_sent {
            return Err(HttpError::ClientGone);
        }
        let bodiless = answer.body.is_empty() || self.head_only;
        let mut headers = http::HeaderMap::new();
        put(&mut headers, b"date", &crate::http::date::now());
        let mut has_type = false;
        for (name, value) in answer.headers {
            has_type |= name.eq_ignore_ascii_case("content-type");
            if crosses(name.as_bytes(), value.as_bytes()) {
                put(&mut headers, name.as_bytes(), value.as_bytes());
            }
        }
        if !has_type && !answer.body.is_empty() {
            put(&mut headers, b"content-type", b"text/plain; charset=utf-8");
        }
        put(
            &mut headers,
            b"content-length",
            answer.body.len().to_string().as_bytes(),
        );
        self.send_head(answer.status, headers).await?;
        self.s.left = Some(0);
        if !bodiless {
            self.data(Bytes::copy_from_slice(answer.body)).await?;
        }
        Ok(())
    }

    fn take_body_source(&mut self) -> Option<H3BodySource> {
        if self.s.request_ended {
            return None;
        }
        Some(H3BodySource {
            recv: self.s.recv.take()?,
            first: self.s.first.take(),
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
