//! One attempt of a request over HTTP/2 (`protocol = "h2c"`, `"h2"`, or `"auto"` when ALPN chose
//! h2): a stream on a connection the worker's requests share ([`super::session`] finds or opens
//! it). The request head, laid out as fields (forwarded headers and edits included), becomes the
//! stream's HEADERS field by field, HPACK-encoded as they are read; the body's frames become DATA
//! and trailers. The response crosses the seam as the neutral message: its head is the field
//! section Rampart's own HTTP/2 decoded, moved into the owned head as it is; DATA as shared
//! bytes, trailers as fields. No HTTP/1 text either way.

use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h2conn::HeadWriter;
use rampart_proto::h2map::crosses_into_h2;
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead};

use super::choice::StatusRetry;
use super::kept_body::KeptBody;
use super::response::record_response_head;
use super::{Exchange, ProxyRequest};
use crate::http::context::RequestContext;
use crate::http::downstream::{BodyFrame, BodySink, BodySource, Downstream};
use crate::http::error::{ErrorSource, HttpError};
use crate::http::h2::upstream::{ResponseIn, UpStream};
use crate::http::h2::{within, Incoming};
use crate::http::h2pool::H2Conn;
use crate::http::head_out::{sent_fields_but_trace, sent_trace_fields, RequestParts, ResponseParts};
use crate::worker::WorkerContext;

impl<D: Downstream> Exchange<'_, '_, D> {
    /// Exchanges the request on a stream of `conn`. An error means nothing of the response
    /// reached the client; one that may have broken the connection (GOAWAY, a reset) retires it
    /// from the pool, so new streams go elsewhere.
    pub(super) async fn over_http2(&mut self, head: &RequestParts<'_>, conn: &H2Conn) -> Result<(), HttpError> {
        let _stream = conn.open_stream();
        let retry = self.status_retry();
        let result = self.exchange_on(head, conn, retry).await;
        if matches!(result, Err(HttpError::UpstreamRefused | HttpError::UpstreamReset)) {
            conn.retire();
        }
        result
    }

    /// The request on a new stream of `conn`, and its response back.
    async fn exchange_on(
        &mut self,
        head: &RequestParts<'_>,
        conn: &H2Conn,
        retry: Option<StatusRetry<'_>>,
    ) -> Result<(), HttpError> {
        let (ctx, req) = (self.ctx, self.req);
        let (down, rctx, kept) = (&mut *self.down, &mut *self.rctx, &mut self.kept);
        let settings = req.upstream().http;
        let target = rctx.target.unwrap_or_default();
        let end = req.body == BodyLength::None;
        let tls = req.upstream().tls.is_some();
        let stream = conn
            .handle
            .open(end, req.head_method, |w| write_request_head(req, target, head, tls, w))?;
        if req.body == BodyLength::Unknown {
            if let Some(source) = down.take_body_source() {
                // Full duplex: the body flows up while the response flows back (a gRPC stream may
                // answer before the client is done, and the client may wait for that answer). It
                // is not kept for a retry.
                kept.lose();
                let mut sink = UpSink(&stream);
                let pump = source.pump(&mut sink, settings.write_timeout);
                let respond = receive(ctx, req, down, rctx, &stream, None);
                tokio::pin!(pump);
                tokio::pin!(respond);
                let mut pumped = None;
                loop {
                    tokio::select! {
                        done = &mut pump, if pumped.is_none() => pumped = Some(done),
                        responded = &mut respond => {
                            // The response is over: nothing more of the body is needed.
                            return match (responded, pumped) {
                                // No answer because the client went away first: say so.
                                (Err(_), Some(Err(client))) if client.source() == ErrorSource::Downstream => Err(client),
                                (result, _) => result,
                            };
                        }
                    }
                }
            }
        }
        if !end {
            send_body(req, down, kept, &stream, settings.write_timeout).await?;
        }
        // A body lost past its limit as it went: no response is dropped for a retry then.
        let retry = retry.filter(|_| kept.replayable(req));
        receive(ctx, req, down, rctx, &stream, retry).await
    }
}

/// Writes the request head to send as an HTTP/2 request: the pseudo-header fields, `host`
/// becoming the authority (the target's name without one), then its fields one by one (see
/// [`sent_fields_but_trace`]; connection-specific fields and `te` left out, `te: trailers` put
/// back for gRPC), Rampart's trace fields last ([`sent_trace_fields`]).
fn write_request_head(
    req: &ProxyRequest<'_>,
    target: usize,
    head: &RequestParts<'_>,
    tls: bool,
    w: &mut HeadWriter<'_>,
) {
    let mut host = None;
    let mut grpc = false;
    sent_fields_but_trace(head, |name, value| {
        if name.eq_ignore_ascii_case(b"host") {
            host.get_or_insert_with(|| value.to_vec());
        }
        grpc |= name.eq_ignore_ascii_case(b"content-type") && value.starts_with(b"application/grpc");
    });
    let up = req.upstream();
    let fallback = up.targets.get(target).map_or(&up.name, |t| &t.name).as_bytes();
    let authority = host.as_deref().filter(|h| !h.is_empty()).unwrap_or(fallback);
    w.field(b":method", head.method);
    w.field(b":scheme", if tls { b"https" } else { b"http" });
    w.field(b":authority", authority);
    w.field(b":path", &head.target);
    sent_fields_but_trace(head, |name, value| {
        let dropped = name.eq_ignore_ascii_case(b"host") || name.eq_ignore_ascii_case(b"te");
        if !dropped && crosses_into_h2(name, value) {
            w.field(name, value);
        }
    });
    // Rampart's own `traceparent` and `tracestate`: lowercase names, values it made or checked.
    sent_trace_fields(head, |name, value| w.fresh_value_field(name, value));
    if grpc {
        // gRPC servers want to know the client takes trailers (HTTP/1 hop-by-hop rules dropped it).
        w.field(b"te", b"trailers");
    }
}

/// Waits for the response and sends it to the client: its head, its DATA, its trailers.
async fn receive<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    rctx: &mut RequestContext,
    stream: &UpStream,
    retry: Option<StatusRetry<'_>>,
) -> Result<(), HttpError> {
    let settings = req.upstream().http;
    down.release_read_buffer();
    let sent_at = tokio::time::Instant::now();
    let response = match within(settings.response_header_timeout, stream.response()).await {
        Some(r) => r?,
        None => return Err(HttpError::UpstreamTimeout),
    };
    let ResponseIn {
        status,
        bytes,
        fields,
        ended,
    } = response;
    let fields_ref = FieldsRef::Packed {
        buf: &bytes,
        list: &fields,
    };
    record_response_head(ctx, req, down, rctx, (status, fields_ref), sent_at);
    if retry.is_some_and(|r| r.drops(status)) {
        // Dropping the stream resets it: the next try goes elsewhere.
        return Err(HttpError::UpstreamStatus {
            status,
            reusable: false,
        });
    }
    let length = response_length(status, req.head_method, ended, fields_ref);
    // The owned head takes the field section the connection decoded, as it is.
    let head = ResponseHead::laid_out(status, bytes, fields, length);
    let view = ResponseParts::of(&head, (0, 0), super::response_edits(req, rctx.target, status));
    rctx.status = status;
    match down.send_response_head(&view, &[], settings.read_timeout).await {
        Err(e) => rctx.fail(e),
        Ok(()) if length == BodyLength::None => {}
        Ok(()) => {
            if let Err(e) = stream_response_body(down, stream, settings.read_timeout).await {
                rctx.fail(e);
            }
        }
    }
    Ok(())
}

/// What an HTTP/2 response head says of its body's length: none for a HEAD request, a 1xx, 204
/// or 304; nothing at all when the head ended the stream; its `content-length` (which the
/// connection holds the DATA to); otherwise unknown.
fn response_length(status: u16, head_request: bool, ended: bool, fields: FieldsRef<'_>) -> BodyLength {
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return BodyLength::None;
    }
    if ended {
        return BodyLength::Exact(0);
    }
    fields
        .get(b"content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse().ok())
        .map_or(BodyLength::Unknown, BodyLength::Exact)
}

/// Streams the request body from the client as DATA (what is kept of it first, on a retry), its
/// trailers as trailers. A body of known length ends with its last data (END_STREAM on that DATA
/// frame).
async fn send_body<D: Downstream>(
    req: &ProxyRequest<'_>,
    down: &mut D,
    kept: &mut KeptBody,
    body: &UpStream,
    write_timeout: Duration,
) -> Result<(), HttpError> {
    let failed = |e: HttpError| match e {
        HttpError::UpstreamRefused | HttpError::UpstreamReset => e,
        _ => HttpError::UpstreamWriteFailed { body_sent: true },
    };
    let mut sent = 0u64;
    let length = match req.body {
        BodyLength::Exact(n) => Some(n),
        _ => None,
    };
    let mut ended = false;
    let mut at = 0;
    loop {
        match kept.frame(down, &mut at).await? {
            frame @ (BodyFrame::Data(_) | BodyFrame::Shared(_)) => {
                let len = frame.data().map_or(0, <[u8]>::len);
                let end = length == Some(sent + len as u64);
                let sending = match frame {
                    // Shared: a slice of the client connection's read buffer, sent without a copy.
                    BodyFrame::Shared(bytes) => body.send_data(bytes.clone(), end, write_timeout).await,
                    _ => {
                        body.send_data(frame.data().unwrap_or_default(), end, write_timeout)
                            .await
                    }
                };
                sending.map_err(failed)?;
                sent += len as u64;
                ended = end;
            }
            // Trailers behind a body whose length said where it ends cannot follow it.
            BodyFrame::End(_) if ended => return Ok(()),
            // A body that ended short of the length it declared.
            BodyFrame::End(_) if length.is_some_and(|n| n > sent) => return Err(HttpError::BadRequestBody),
            BodyFrame::End(trailers) => return end_with(body, trailers, write_timeout).await,
        }
    }
}

/// Ends the request body: with trailers (those HTTP/2 may carry), or an empty DATA frame.
async fn end_with(body: &UpStream, trailers: FieldsRef<'_>, limit: Duration) -> Result<(), HttpError> {
    let crosses = crosses_into_h2;
    if !trailers.iter().any(|(n, v)| crosses(n, v)) {
        return body.send_data(&[][..], true, limit).await;
    }
    body.send_trailers(|w| {
        for (name, value) in trailers.iter().filter(|(n, v)| crosses(n, v)) {
            w.field(name, value);
        }
    })
}

/// An HTTP/2 upstream request stream as the sink of a body taken out of its downstream side.
struct UpSink<'a>(&'a UpStream);

impl BodySink for UpSink<'_> {
    async fn send_bytes(&mut self, data: Bytes, limit: Duration) -> Result<(), HttpError> {
        self.0
            .send_data(data, false, limit)
            .await
            .map_err(|_| HttpError::UpstreamWriteFailed { body_sent: true })
    }

    fn end(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        let crosses = crosses_into_h2;
        let ended = if trailers.iter().any(|(n, v)| crosses(n, v)) {
            self.0.send_trailers(|w| {
                for (name, value) in trailers.iter().filter(|(n, v)| crosses(n, v)) {
                    w.field(name, value);
                }
            })
        } else {
            self.0.end_now()
        };
        ended.map_err(|_| HttpError::UpstreamWriteFailed { body_sent: true })
    }

    fn cancel(&mut self) {
        self.0.cancel();
    }
}

/// Sends the response body to the client: DATA as shared bytes, then the trailers (or the end).
/// Each DATA's credit goes back to the upstream once the client side has taken it.
async fn stream_response_body<D: Downstream>(
    down: &mut D,
    stream: &UpStream,
    read_timeout: Duration,
) -> Result<(), HttpError> {
    loop {
        match within(read_timeout, stream.data()).await {
            None => return Err(HttpError::UpstreamReadTimeout),
            Some(Incoming::Data(bytes)) => {
                let len = bytes.len();
                down.send_bytes(bytes).await?;
                stream.release(len);
            }
            Some(Incoming::Reset) => return Err(HttpError::UpstreamClosedEarly),
            Some(Incoming::End) => break,
        }
    }
    match stream.take_trailers() {
        Some((buf, list)) => down.send_trailers(FieldsRef::Packed { buf: &buf, list: &list }).await,
        None => down.end_body().await,
    }
}
