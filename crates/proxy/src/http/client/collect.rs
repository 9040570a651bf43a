//! The internal client's downstream side: it gives the exchange the request's owned body (one
//! shared data frame, then the end) and collects what the exchange says to a client: the response
//! head, its body up to a bound, its end. An answer of Rampart's own (the exchange's error) is
//! not a response: the request's error says what went wrong.

use std::time::Duration;

use bytes::Bytes;
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead};

use super::{Collected, InternalError};
use crate::http::downstream::{BodyFrame, Downstream, LocalAnswer, NoBodySource};
use crate::http::error::HttpError;
use crate::http::head_out::ResponseParts;

/// The downstream side of an internal request.
pub(super) struct Collecting {
    body: Option<Bytes>,
    /// The body went out (as one frame) and the end follows.
    given: bool,
    max: usize,
    keep: bool,
    response: Collected,
    /// A response head came.
    headed: bool,
    /// Its body ended.
    ended: bool,
    /// Its body went past `max`.
    over: bool,
}

impl Collecting {
    pub(super) fn new(body: Option<Bytes>, max: usize, keep: bool) -> Self {
        Collecting {
            body,
            given: false,
            max,
            keep,
            response: Collected::default(),
            headed: false,
            ended: false,
            over: false,
        }
    }

    /// Body bytes of the response: kept (or counted) up to the bound, an error past it (the
    /// exchange stops reading and closes the connection).
    fn take(&mut self, data: &[u8]) -> Result<(), HttpError> {
        let len = self.response.body_len + data.len() as u64;
        if len > self.max as u64 {
            self.over = true;
            return Err(HttpError::ClientGone);
        }
        self.response.body_len = len;
        if self.keep {
            self.response.body.extend_from_slice(data);
        }
        Ok(())
    }

    /// The outcome, once the exchange is over with `error` in the request's context.
    pub(super) fn finish(self, error: Option<HttpError>) -> Result<Collected, InternalError> {
        let status = self.response.head.status;
        match (self.headed, error) {
            (false, error) => Err(InternalError::NoResponse(
                error.unwrap_or(HttpError::UpstreamUnavailable),
            )),
            (true, _) if self.over => Err(InternalError::TooLarge { status, max: self.max }),
            (true, Some(error)) => Err(InternalError::Cut { status, error }),
            (true, None) if !self.ended => Err(InternalError::Cut {
                status,
                error: HttpError::UpstreamClosedEarly,
            }),
            (true, None) => Ok(self.response),
        }
    }
}

impl Downstream for Collecting {
    type BodySource = NoBodySource;

    fn take_body_source(&mut self) -> Option<NoBodySource> {
        None
    }

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        if !std::mem::replace(&mut self.given, true) {
            if let Some(body) = self.body.as_ref().filter(|b| !b.is_empty()) {
                return Ok(BodyFrame::Shared(body));
            }
        }
        Ok(BodyFrame::End(FieldsRef::EMPTY))
    }

    fn body_waiting(&self) -> bool {
        false
    }

    fn release_read_buffer(&mut self) {}

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        Ok(())
    }

    async fn send_informational(&mut self, _: &ResponseParts<'_>) -> Result<(), HttpError> {
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        _: Duration,
    ) -> Result<(), HttpError> {
        self.headed = true;
        // The head is kept: its fields laid out in a buffer of its own.
        let mut kept = ResponseHead::with_storage(Vec::with_capacity(512), Vec::new());
        kept.status = head.status;
        kept.length = head.length;
        for (name, value) in head.fields().iter() {
            kept.push_field(name, value);
        }
        self.response.head = kept;
        self.ended = head.length == BodyLength::None;
        self.take(body)
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.take(data)
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        self.response.trailers = trailers
            .iter()
            .map(|(name, value)| (Box::from(name), Box::from(value)))
            .collect();
        self.ended = true;
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        self.ended = true;
        Ok(())
    }

    async fn send_local(&mut self, _: &LocalAnswer<'_>) -> Result<(), HttpError> {
        Ok(())
    }

    fn bytes_sent(&self) -> u64 {
        self.response.body_len
    }

    fn keeps_alive(&self) -> bool {
        true
    }
}
