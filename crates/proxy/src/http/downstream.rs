//! The downstream side of an exchange: everything the exchange says to the client goes through
//! [`Downstream`] (interim responses, the response head, body bytes or a file's, answers of
//! Rampart's own), and request body bytes come from it. HTTP/1 implements it here
//! ([`H1Downstream`]); HTTP/2 implements it for one stream of a multiplexed connection
//! (`crate::http::h2`).
//!
//! Bodies cross the seam in HTTP/1 framing, as the heads declare them (a chunked body with its
//! chunk lines): HTTP/1 on both sides forwards them verbatim; another protocol frames or unframes
//! them at its side of the seam.

use std::borrow::Cow;
use std::fs::File;
use std::time::Duration;

use rampart_model::route::HeaderOps;
use rampart_proto::h1::{ChunkedDecoder, ChunkedPart, Field, Framing, ResponseHead};

use super::error::HttpError;
use super::head_out::{write_response_head, ResponseOut};
use super::iobuf::IoBuf;
use super::local::write_response;
use super::state::{HttpWorkerState, HTTP_BUFFER_SIZE};
use super::static_files::send::{copy_file, sendfile_all};
use crate::stream::Stream;

/// A response head on its way to the client: the upstream's parsed head (HTTP/1 keeps its fields
/// as byte ranges into the bytes it was read into) and header edits (the route's, borrowed until a
/// filter changes them).
pub struct ResponseHeader<'a> {
    pub head: &'a ResponseHead,
    /// The bytes the head was parsed from (it starts at 0).
    pub buf: &'a [u8],
    pub fields: &'a [Field],
    pub edits: Cow<'a, HeaderOps>,
    /// A 101 that turns the connection into a tunnel.
    pub upgrade: bool,
}

impl ResponseHeader<'_> {
    /// The header edits, to change: the route's are copied on the first change.
    pub fn edits_mut(&mut self) -> &mut HeaderOps {
        self.edits.to_mut()
    }
}

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
    /// Request body bytes received and not yet forwarded.
    fn body(&mut self) -> &mut IoBuf;
    /// Reads more request body bytes into [`Downstream::body`].
    async fn read_body(&mut self) -> Result<(), HttpError>;
    /// Whether the request body's bytes must be shown to [`Downstream::forwarding_body`] before
    /// they go upstream (a filter inspects the body).
    fn inspects_body(&self) -> bool {
        false
    }
    /// The first `len` bytes of [`Downstream::body`] (request body bytes, framed as the request
    /// head says) are about to go upstream; an error refuses them.
    fn forwarding_body(&mut self, len: usize) -> Result<(), HttpError> {
        let _ = len;
        Ok(())
    }
    /// Our own `100 Continue`.
    async fn send_continue(&mut self) -> Result<(), HttpError>;
    /// An interim (1xx) response from the upstream.
    async fn send_informational(&mut self, head: &ResponseHeader<'_>) -> Result<(), HttpError>;
    /// The response head, with the first body bytes when they came with it; once the client
    /// stops taking bytes, the rest must go within `limit`.
    async fn send_response_head(
        &mut self,
        head: &ResponseHeader<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError>;
    /// More response body bytes.
    async fn send_body(&mut self, bytes: &[u8]) -> Result<(), HttpError>;
    /// Response body bytes from a file: `len` bytes of `file` from `offset` (the `static`
    /// action's body, behind a head that announced them). By default they are read into
    /// `scratch` piece by piece and sent as body bytes; HTTP/1 over plain TCP uses sendfile(2).
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

/// The downstream side of one request on an HTTP/1 connection.
pub struct H1Downstream<'a> {
    pub stream: &'a mut Stream,
    pub inbuf: &'a mut IoBuf,
    pub out: &'a mut Vec<u8>,
    pub state: &'a HttpWorkerState,
    /// Idle wait for more request body bytes.
    pub body_timeout: Duration,
    /// The client lets the connection stay open after this request.
    pub client_keep_alive: bool,
    pub http10: bool,
    /// A HEAD request: answers of our own carry no body.
    pub head_only: bool,
    sent: u64,
    /// Of `sent`, the body bytes.
    body_sent: u64,
    keep: bool,
    /// Set when a chunked response goes to an HTTP/1.0 client: the chunks' data is sent bare
    /// and the connection's close ends the body.
    unchunk: Option<ChunkedDecoder>,
}

impl<'a> H1Downstream<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        stream: &'a mut Stream,
        inbuf: &'a mut IoBuf,
        out: &'a mut Vec<u8>,
        state: &'a HttpWorkerState,
        body_timeout: Duration,
        client_keep_alive: bool,
        http10: bool,
        head_only: bool,
    ) -> Self {
        H1Downstream {
            stream,
            inbuf,
            out,
            state,
            body_timeout,
            client_keep_alive,
            http10,
            head_only,
            sent: 0,
            body_sent: 0,
            keep: false,
            unchunk: None,
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

    fn body(&mut self) -> &mut IoBuf {
        self.inbuf
    }

    async fn read_body(&mut self) -> Result<(), HttpError> {
        let read = self.inbuf.read_from(self.state, self.stream, HTTP_BUFFER_SIZE);
        match tokio::time::timeout(self.body_timeout, read).await {
            Ok(Ok(0)) | Ok(Err(_)) => Err(HttpError::ClientGone),
            Ok(Ok(_)) => Ok(()),
            Err(_) => Err(HttpError::ClientBodyTimeout),
        }
    }

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await
    }

    async fn send_informational(&mut self, head: &ResponseHeader<'_>) -> Result<(), HttpError> {
        // Relayed as received.
        self.write(&head.buf[..head.head.len]).await
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseHeader<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        let h = head.head;
        // HTTP/1.0 has no chunked encoding: such a body goes bare, delimited by the close.
        let unchunked = self.http10 && h.framing == Framing::Chunked;
        self.unchunk = unchunked.then(ChunkedDecoder::new);
        // A body delimited by the upstream's close cannot be delimited for the client either.
        let close = !self.client_keep_alive
            || unchunked
            || h.framing == Framing::UntilClose
            || (h.status == 101 && !head.upgrade);
        self.keep = !close;
        self.out.clear();
        write_response_head(
            self.out,
            &ResponseOut {
                buf: head.buf,
                fields: head.fields,
                head: h,
                ops: &head.edits,
                close,
                upgrade: head.upgrade,
                keep_alive_10: self.http10 && self.client_keep_alive,
                unchunked,
            },
        );
        let mut bare = Vec::new();
        let body = match &mut self.unchunk {
            Some(decoder) => {
                unchunk(decoder, body, &mut bare)?;
                &bare[..]
            }
            None => body,
        };
        let behind = if body.len() <= COPY_BEHIND_HEAD {
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
        self.body_sent += body.len() as u64;
        Ok(())
    }

    async fn send_body(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        let mut bare = Vec::new();
        let bytes = match &mut self.unchunk {
            Some(decoder) => {
                unchunk(decoder, bytes, &mut bare)?;
                &bare[..]
            }
            None => bytes,
        };
        self.write(bytes).await?;
        self.body_sent += bytes.len() as u64;
        Ok(())
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
        let close = answer.close || !self.client_keep_alive;
        write_response(
            &mut out,
            answer.status,
            answer.headers,
            answer.body,
            close,
            self.head_only,
        );
        let written = self.write(&out).await;
        if written.is_ok() && !self.head_only {
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

/// Appends the data of the chunked-body bytes `framed` to `out` (sizes, extensions and trailers
/// dropped).
fn unchunk(decoder: &mut ChunkedDecoder, framed: &[u8], out: &mut Vec<u8>) -> Result<(), HttpError> {
    decoder
        .decode(framed, |part| {
            if let ChunkedPart::Data(data) = part {
                out.extend_from_slice(data);
            }
        })
        .map(|_| ())
        .map_err(|_| HttpError::UpstreamBadBody)
}
