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
use rampart_proto::h1::Framing;
use rampart_proto::message::FieldsRef;

use super::context::RequestContext;
use super::error::{ErrorSource, HttpError};
use super::head_out::ResponseParts;
use super::local::error_body;
pub use super::message::{BodyFrame, BodyWatcher};

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

/// A request body taken out of its downstream side, to flow to an upstream on its own while
/// the response flows back (full duplex: gRPC bidirectional streams). Neither side names the
/// other's protocol: the source pushes into a [`BodySink`].
#[allow(async_fn_in_trait)]
pub trait BodySource: Sized {
    /// Moves the rest of the body (and its trailers) to `to`, each write waiting at most
    /// `write_timeout`.
    async fn forward(&mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError>;

    /// [`BodySource::forward`], `to` cancelled if it fails.
    async fn pump(mut self, to: &mut impl BodySink, write_timeout: Duration) -> Result<(), HttpError> {
        let result = self.forward(to, write_timeout).await;
        if result.is_err() {
            to.cancel();
        }
        result
    }
}

/// Where a body taken out of its downstream side goes: an upstream session's request stream (an
/// HTTP/2 stream today, an HTTP/3 one later).
#[allow(async_fn_in_trait)]
pub trait BodySink {
    /// Body data, sent as the upstream's flow control lets it (each wait at most `limit`), shared
    /// bytes kept shared.
    async fn send_bytes(&mut self, data: Bytes, limit: Duration) -> Result<(), HttpError>;
    /// The body's end, with its trailers (empty when none came).
    fn end(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError>;
    /// The body cannot be carried to its end: the upstream's stream is cancelled.
    fn cancel(&mut self);
}

/// The body source of a side whose body cannot be taken apart (HTTP/1).
pub enum NoBodySource {}

impl BodySource for NoBodySource {
    async fn forward(&mut self, _: &mut impl BodySink, _: Duration) -> Result<(), HttpError> {
        match *self {}
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
    /// A buffer this side lends while the request goes upstream (HTTP/1's response buffer,
    /// idle until the response comes): the attempt writes the upstream's head in it and gives
    /// it back ([`Downstream::return_buffer`]). `None`: the attempt takes one from the pool.
    fn lend_buffer(&mut self) -> Option<Vec<u8>> {
        None
    }
    /// Gives back a buffer [`Downstream::lend_buffer`] lent; one this side did not lend comes
    /// back out (for the pool).
    fn return_buffer(&mut self, buf: Vec<u8>) -> Option<Vec<u8>> {
        Some(buf)
    }
    /// The request head about to go to target `target` of `upstream` (the filters' upstream-request
    /// phase, once per attempt): the attempt's view of `parts` when a filter edited it for this
    /// attempt; `None`: `parts` goes as it is.
    fn upstream_request<'v>(
        &mut self,
        upstream: &'v rampart_model::Upstream,
        target: usize,
        parts: &'v super::head_out::RequestParts<'_>,
    ) -> Option<super::head_out::RequestParts<'v>> {
        let _ = (upstream, target, parts);
        None
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
    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError>;
    /// The response head, with the first body data when it came with it; once the client stops
    /// taking bytes, the rest must go within `limit`. A head whose length is not
    /// [`BodyLength::None`] is followed by its data and then [`Downstream::end_body`] or
    /// [`Downstream::send_trailers`].
    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
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
