//! The downstream side of one request on an HTTP/1 connection: the request body read through
//! the codec's framing, the response written as HTTP/1.x text (chunked, or delimited by the close
//! for an HTTP/1.0 client), Rampart's own answers, sendfile for static files over plain TCP.

use std::fs::File;
use std::time::Duration;

use rampart_proto::h1::{write_chunk, Framing};
use rampart_proto::message::{BodyLength, FieldsRef};

use super::request_body::H1RequestBody;
use crate::http::downstream::{copy_file, ClientTerms, Downstream, LocalAnswer, NoBodySource};
use crate::http::error::HttpError;
use crate::http::head_out::{write_chunked_end, write_response_head, ClientFate, ResponseParts};
use crate::http::iobuf::IoBuf;
use crate::http::local::write_response;
use crate::http::message::{BodyFrame, BodyWatcher};
use crate::http::state::HttpWorkerState;
use crate::http::static_files::send::sendfile_all;
use crate::stream::Stream;

/// The downstream side of one request on an HTTP/1 connection.
pub struct H1Downstream<'a> {
    pub stream: &'a mut Stream,
    pub inbuf: &'a mut IoBuf,
    pub out: &'a mut Vec<u8>,
    pub state: &'a HttpWorkerState,
    terms: ClientTerms,
    /// Where the request body stands, once it is read (boxed: most requests have none, and this
    /// side is moved about with the request).
    request: Option<Box<H1RequestBody>>,
    sent: u64,
    /// Of `sent`, the body bytes.
    body_sent: u64,
    keep: bool,
    /// The response body goes out chunked (its length is unknown and the client speaks
    /// HTTP/1.1); for an HTTP/1.0 client such a body is delimited by the close instead.
    chunked: bool,
    /// The chunked body's last chunk has gone.
    ended: bool,
}

impl<'a> H1Downstream<'a> {
    pub fn new(
        stream: &'a mut Stream,
        inbuf: &'a mut IoBuf,
        out: &'a mut Vec<u8>,
        state: &'a HttpWorkerState,
        terms: ClientTerms,
    ) -> Self {
        H1Downstream {
            stream,
            inbuf,
            out,
            state,
            terms,
            request: None,
            sent: 0,
            body_sent: 0,
            keep: false,
            chunked: false,
            ended: false,
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        self.stream.write_all(bytes).await.map_err(|_| HttpError::ClientGone)?;
        self.sent += bytes.len() as u64;
        Ok(())
    }
}

/// Response head and body bytes up to this size leave in one copy behind the head; larger bodies
/// go as a second slice of one vectored write.
const COPY_BEHIND_HEAD: usize = 2048;

impl Downstream for H1Downstream<'_> {
    type BodySource = NoBodySource;

    fn take_body_source(&mut self) -> Option<NoBodySource> {
        None
    }

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        let (timeout, framing) = (self.terms.body_timeout, self.terms.body);
        let request = self
            .request
            .get_or_insert_with(|| Box::new(H1RequestBody::new(framing)));
        request.frame(self.inbuf, self.stream, self.state, timeout).await
    }

    fn received_body(&mut self, each: &mut BodyWatcher<'_>) -> Result<(), HttpError> {
        match &self.request {
            _ if self.terms.body == Framing::None => Ok(()),
            Some(request) => request.received(self.inbuf, each),
            None => H1RequestBody::new(self.terms.body).received(self.inbuf, each),
        }
    }

    fn body_waiting(&self) -> bool {
        match &self.request {
            _ if self.terms.body == Framing::None => false,
            Some(request) => request.waiting(self.inbuf),
            None => !self.inbuf.is_empty(),
        }
    }

    fn release_read_buffer(&mut self) {
        self.inbuf.release_if_empty(self.state);
    }

    fn lend_buffer(&mut self) -> Option<Vec<u8>> {
        let mut buf = std::mem::take(self.out);
        buf.clear();
        Some(buf)
    }

    fn return_buffer(&mut self, buf: Vec<u8>) -> Option<Vec<u8>> {
        *self.out = buf;
        None
    }

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        self.out.clear();
        write_response_head(
            self.out,
            head,
            &ClientFate {
                close: false,
                keep_alive_10: false,
                chunked: false,
            },
        );
        let interim = std::mem::take(self.out);
        let written = self.write(&interim).await;
        *self.out = interim;
        written
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        let unknown = head.length == BodyLength::Unknown && !head.upgrade();
        // A body of unknown length goes in chunks to HTTP/1.1; HTTP/1.0 has none: the close ends it.
        self.chunked = unknown && !self.terms.http10;
        self.ended = false;
        let close = !self.terms.keep_alive || (unknown && self.terms.http10) || (head.status == 101 && !head.upgrade());
        self.keep = !close;
        self.out.clear();
        write_response_head(
            self.out,
            head,
            &ClientFate {
                close,
                keep_alive_10: self.terms.http10 && self.terms.keep_alive,
                chunked: self.chunked,
            },
        );
        let head_len = self.out.len();
        let behind = if self.chunked {
            write_chunk(body, self.out);
            &[][..]
        } else if body.len() <= COPY_BEHIND_HEAD {
            self.out.extend_from_slice(body);
            &[][..]
        } else {
            body
        };
        let written = if behind.is_empty() {
            self.stream.write_all(self.out).await
        } else {
            self.stream.write_all_within(self.out, behind, limit).await
        };
        written.map_err(|_| HttpError::ClientGone)?;
        self.sent += (self.out.len() + behind.len()) as u64;
        self.body_sent += (self.out.len() - head_len + behind.len()) as u64;
        Ok(())
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        if data.is_empty() {
            return Ok(());
        }
        if !self.chunked {
            self.write(data).await?;
            self.body_sent += data.len() as u64;
            return Ok(());
        }
        let mut framed = std::mem::take(self.out);
        framed.clear();
        write_chunk(data, &mut framed);
        let written = self.write(&framed).await;
        self.body_sent += framed.len() as u64;
        *self.out = framed;
        written
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        if !self.chunked || self.ended {
            // Only chunks carry trailers; a body of known length (or one the close ends) ends.
            return Ok(());
        }
        self.ended = true;
        let mut last = std::mem::take(self.out);
        last.clear();
        write_chunked_end(&mut last, trailers);
        let written = self.write(&last).await;
        self.body_sent += last.len() as u64;
        *self.out = last;
        written
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        self.send_trailers(FieldsRef::EMPTY).await
    }

    fn needs_end(&self) -> bool {
        self.chunked && !self.ended
    }

    async fn send_file(&mut self, file: &File, offset: u64, len: u64, scratch: &mut [u8]) -> Result<(), HttpError> {
        if let Stream::Tcp(tcp) = &*self.stream {
            if sendfile_all(tcp, file, offset, len, &mut self.sent).await? {
                return Ok(());
            }
        }
        copy_file(self, file, offset, len, scratch).await
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        let mut out = std::mem::take(self.out);
        out.clear();
        let close = answer.close || !self.terms.keep_alive;
        write_response(
            &mut out,
            answer.status,
            answer.headers,
            answer.body,
            close,
            self.terms.head_only,
        );
        let written = self.write(&out).await;
        if written.is_ok() && !self.terms.head_only {
            self.body_sent += answer.body.len() as u64;
        }
        *self.out = out;
        self.keep = !close && written.is_ok();
        written
    }

    fn bytes_sent(&self) -> u64 {
        self.sent
    }

    fn body_bytes_sent(&self) -> u64 {
        self.body_sent
    }

    fn keeps_alive(&self) -> bool {
        self.keep
    }
}
