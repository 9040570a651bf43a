//! The downstream side of an exchange: everything the exchange says to the client goes through
//! [`Downstream`] (interim responses, the response head, body bytes or a file's, answers of
//! Rampart's own), and request body bytes come from it. HTTP/1 implements it here
//! ([`H1Downstream`]); HTTP/2 implements it for one stream of a multiplexed connection
//! (`crate::http::h2`).
//!
//! Both ways, messages cross the seam as the protocol-neutral message ([`rampart_proto::message`]):
//! a head (status, fields wherever they already are, the body's length if known) and body frames
//! (data, then trailers or an end; a request's as [`BodyFrame`]s). Chunked encoding exists only
//! inside the HTTP/1 side: an HTTP/1 body's chunks are decoded where it is read
//! ([`crate::http::body_framing`]), and [`H1Downstream`] chunks a response body of unknown length
//! for an HTTP/1.1 client.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h1::{write_chunk, Framing};
use rampart_proto::message::{BodyLength, FieldsRef};

use super::context::RequestContext;
use super::error::{ErrorSource, HttpError};
use super::h1_request_body::H1RequestBody;
use super::head_out::{write_chunked_end, write_response_head, ResponseOut};
use super::iobuf::IoBuf;
use super::local::{error_body, write_response};
use super::message::ResponseHeader;
pub use super::message::{BodyFrame, BodyWatcher};
use super::state::HttpWorkerState;
use super::static_files::send::sendfile_all;
use crate::stream::Stream;

/// An answer of Rampart's own: an error, a `respond` route, a redirect, a 404.
#[derive(Clone, Copy)]
pub struct LocalAnswer<'a> {
    pub status: u16,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    /// The client connection closes after it.
    pub close: bool,
    /// An error (404 for no route, 502, a filter's 429, ...) whose body a configured error page
    /// replaces; `false` for what a route says itself (`respond`, `redirect`).
    pub error_page: bool,
}

/// A request body taken out of its downstream side, to flow to an HTTP/2 upstream on its own
/// while the response flows back (full duplex: gRPC bidirectional streams).
#[allow(async_fn_in_trait)]
pub trait BodySource {
    /// Moves the rest of the body (and its trailers) to `to`; an error resets `to`.
    async fn pump(self, to: &mut h2::SendStream<bytes::Bytes>, write_timeout: Duration) -> Result<(), HttpError>;
}

/// The body source of a side whose body cannot be taken apart (HTTP/1).
pub enum NoBodySource {}

impl BodySource for NoBodySource {
    async fn pump(self, _: &mut h2::SendStream<bytes::Bytes>, _: Duration) -> Result<(), HttpError> {
        match self {}
    }
}

/// The client side of one request.
// Workers are single-threaded: the futures need not be `Send`, so `async fn` is fine here.
#[allow(async_fn_in_trait)]
pub trait Downstream {
    /// See [`Downstream::take_body_source`].
    type BodySource: BodySource;
    /// The rest of the request body as a source of its own, when this side can give it (an
    /// HTTP/2 stream whose body bytes are all still to come); `None` otherwise.
    fn take_body_source(&mut self) -> Option<Self::BodySource>;
    /// The next piece of the request body: data (payload only: chunked encoding was the HTTP/1
    /// codec's business) or its end, with trailers if the client sent any. Each call lets go
    /// of the data the previous one gave; after the end, the end again.
    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError>;
    /// Shows `each` the request body data that has arrived and no [`Downstream::body_frame`]
    /// gave yet, without taking it (`end`: the body ends with it), so a body refused in one
    /// piece never reaches an upstream. A side whose body comes only as it is asked for shows
    /// nothing.
    fn received_body(&mut self, each: &mut BodyWatcher<'_>) -> Result<(), HttpError> {
        let _ = each;
        Ok(())
    }
    /// Whether request body bytes have arrived that no [`Downstream::body_frame`] gave yet (a
    /// client that sent its body without waiting for `100 Continue`).
    fn body_waiting(&self) -> bool;
    /// The request needs no more buffer space for now (its head is out, its waiting body too):
    /// an empty read buffer goes back to the worker's pool while the upstream thinks.
    fn release_read_buffer(&mut self);
    /// The request head about to go to target `target` of `upstream` (the filters' upstream-request
    /// phase, once per attempt): the head to send, `head` itself or an edited copy in `scratch`.
    fn upstream_request<'h>(
        &mut self,
        upstream: &'h rampart_model::Upstream,
        target: usize,
        head: super::head_out::UpstreamHead<'h>,
        scratch: &'h mut super::filter::UpstreamHeadBuf,
    ) -> super::head_out::UpstreamHead<'h> {
        let _ = (upstream, target, scratch);
        head
    }
    /// The response head of an attempt at `upstream` came (the filters' upstream-response phase,
    /// once per attempt, before it is relayed, dropped for a retry, or turned into a tunnel).
    fn upstream_response(
        &mut self,
        upstream: &rampart_model::Upstream,
        attempt: &super::attempts::Attempt,
        fields: FieldsRef<'_>,
    ) {
        let _ = (upstream, attempt, fields);
    }
    /// An attempt at `upstream` failed before any of its response reached the client (the
    /// filters' upstream-error phase, once per failed attempt, whether a retry follows or not).
    fn upstream_error(&mut self, upstream: &rampart_model::Upstream, attempt: &super::attempts::Attempt) {
        let _ = (upstream, attempt);
    }
    /// Our own `100 Continue`.
    async fn send_continue(&mut self) -> Result<(), HttpError>;
    /// An interim (1xx) response from the upstream.
    async fn send_informational(&mut self, head: &ResponseHeader<'_>) -> Result<(), HttpError>;
    /// The response head, with the first body data when it came with it; once the client stops
    /// taking bytes, the rest must go within `limit`. A head whose length is not
    /// [`BodyLength::None`] is followed by its data and then [`Downstream::end_body`] or
    /// [`Downstream::send_trailers`].
    async fn send_response_head(
        &mut self,
        head: &ResponseHeader<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError>;
    /// More response body data (payload: no framing of any protocol).
    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError>;
    /// [`Downstream::send_data`] with data that is shared already (an HTTP/2 upstream's DATA):
    /// HTTP/2 sends it without a copy.
    async fn send_bytes(&mut self, data: Bytes) -> Result<(), HttpError> {
        self.send_data(&data).await
    }
    /// Ends the response body with trailer fields (a client that cannot take them gets the end).
    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError>;
    /// Ends the response body (nothing, where its length already said it ended).
    async fn end_body(&mut self) -> Result<(), HttpError>;
    /// Whether the response body still needs [`Downstream::end_body`] (or trailers) to end: a
    /// chunked body, an HTTP/2 stream still open, filters that run at the end. `false` where
    /// its length ended it, which spares the call.
    fn needs_end(&self) -> bool {
        true
    }
    /// Response body bytes from a file: `len` bytes of `file` from `offset` (the `static`
    /// action's body, behind a head that announced them). By default they are read into
    /// `scratch` piece by piece and sent as body data; HTTP/1 over plain TCP uses sendfile(2).
    async fn send_file(&mut self, file: &File, offset: u64, len: u64, scratch: &mut [u8]) -> Result<(), HttpError> {
        copy_file(self, file, offset, len, scratch).await
    }
    /// An answer of Rampart's own.
    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError>;
    /// Response bytes written so far: on HTTP/1.x every byte of the request's responses (interim
    /// `1xx` heads, the head, the body as framed, chunk sizes included); on HTTP/2 the DATA
    /// payload only (HPACK-compressed headers share the connection and are not counted).
    fn bytes_sent(&self) -> u64;
    /// Response body bytes written so far (nginx's `$body_bytes_sent`: on HTTP/1.x the body as
    /// framed on the wire, chunk sizes included; no head).
    fn body_bytes_sent(&self) -> u64 {
        self.bytes_sent()
    }
    /// Whether the connection can take another request after the response sent.
    fn keeps_alive(&self) -> bool;
}

/// What the client side of one request must know to carry it.
#[derive(Debug, Clone, Copy)]
pub struct ClientTerms {
    /// Idle wait for more request body bytes.
    pub body_timeout: Duration,
    /// The client lets the connection stay open after this request.
    pub keep_alive: bool,
    pub http10: bool,
    /// A HEAD request: answers of our own carry no body.
    pub head_only: bool,
    /// How the request body is delimited on an HTTP/1 connection (an HTTP/2 stream's ends with
    /// the stream).
    pub body: Framing,
}

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

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await
    }

    async fn send_informational(&mut self, head: &ResponseHeader<'_>) -> Result<(), HttpError> {
        self.out.clear();
        write_response_head(
            self.out,
            &ResponseOut {
                head,
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
        head: &ResponseHeader<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        let unknown = head.length == BodyLength::Unknown && !head.upgrade;
        // A body of unknown length goes in chunks to HTTP/1.1; HTTP/1.0 has none: the close ends it.
        self.chunked = unknown && !self.terms.http10;
        self.ended = false;
        let close = !self.terms.keep_alive || (unknown && self.terms.http10) || (head.status == 101 && !head.upgrade);
        self.keep = !close;
        self.out.clear();
        write_response_head(
            self.out,
            &ResponseOut {
                head,
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

/// Sends `len` bytes of `file` from `offset` as body bytes through `down`, reading them into
/// `scratch` piece by piece.
pub async fn copy_file<D: Downstream + ?Sized>(
    down: &mut D,
    file: &File,
    mut offset: u64,
    len: u64,
    scratch: &mut [u8],
) -> Result<(), HttpError> {
    let end = offset + len;
    while offset < end {
        let want = ((end - offset) as usize).min(scratch.len());
        let n = match file.read_at(&mut scratch[..want], offset) {
            Ok(0) => return Err(HttpError::FileRead),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HttpError::FileRead),
        };
        down.send_data(&scratch[..n]).await?;
        offset += n as u64;
    }
    Ok(())
}

/// Fails the request with `error`: answered with its status when nothing of the response has
/// left yet (and the client can still be written to), the client connection closed after.
pub async fn answer_error<D: Downstream>(down: &mut D, rctx: &mut RequestContext, error: HttpError) {
    let error = rctx.blame(error);
    rctx.fail(error);
    if rctx.responded() {
        return;
    }
    rctx.status = error.status();
    if error.answerable() {
        let body = error_body(error.status());
        // A failure of the upstream side, on a request read in full, leaves the client
        // connection as good as it was: it stays open if the client keeps it (nginx does).
        let keep = rctx.bodyless && error.source() == ErrorSource::Upstream;
        let answer = LocalAnswer {
            status: error.status(),
            headers: &[],
            body: body.as_bytes(),
            close: !keep,
            error_page: true,
        };
        if down.send_local(&answer).await.is_ok() && keep {
            rctx.keep_client = down.keeps_alive();
        }
    }
}
