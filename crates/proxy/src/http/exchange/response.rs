//! The response side of an exchange with an HTTP/1 upstream: the head (interim responses
//! relayed), then the body as data frames (a chunked body decoded here, its trailers passed on as
//! fields), or the hand-over to a tunnel after a 101.

use std::borrow::Cow;

use rampart_proto::h1::{parse_response, Framing, Limits};
use rampart_proto::h2map::trailer_fields;
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead};

use super::choice::StatusRetry;
use super::ProxyRequest;
use crate::http::attempts::observe;
use crate::http::body_framing::BodyFraming;
use crate::http::context::RequestContext;
use crate::http::downstream::Downstream;
use crate::http::error::HttpError;
use crate::http::head_out::ResponseParts;
use crate::http::iobuf::IoBuf;
use crate::http::state::HTTP_BUFFER_SIZE;
use crate::stream::Stream;
use crate::worker::WorkerContext;

/// How a response that reached the client ended.
pub(super) enum Responded {
    /// The whole response went through (or failed after its head; the context says so).
    Complete {
        /// The upstream connection can carry another request.
        reusable: bool,
    },
    /// A 101 for an upgrade request: both connections now carry a tunnel.
    Tunnel,
}

/// Where the request stands when its response is awaited.
pub(super) struct Sent<'a> {
    /// Rampart answered `100 Continue` itself (the upstream's own 100 is not relayed then).
    pub continued: bool,
    /// The statuses a retry may follow (`retry_on`, when retries are left): such a response is
    /// dropped, not relayed, when another target and the budget allow a retry.
    pub retry: Option<StatusRetry<'a>>,
}

/// Reads the response head (relaying 1xx), sends it on with the body. An error means nothing of
/// the response reached the client; failures after the head are recorded in `rctx`.
pub(super) async fn respond<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    conn: &mut Stream,
    down: &mut D,
    sent: Sent<'_>,
    rctx: &mut RequestContext,
) -> Result<Responded, HttpError> {
    let mut upbuf = IoBuf::default();
    let result = read_response(ctx, req, conn, down, &mut upbuf, sent, rctx).await;
    upbuf.release(&ctx.http);
    result
}

async fn read_response<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    conn: &mut Stream,
    down: &mut D,
    upbuf: &mut IoBuf,
    sent: Sent<'_>,
    rctx: &mut RequestContext,
) -> Result<Responded, HttpError> {
    // A field list from the worker's pool: parsing a response head allocates nothing.
    let mut head = ResponseHead::with_storage(Vec::new(), ctx.http.take_field_list());
    let responded = relay_response(ctx, req, conn, down, upbuf, sent, rctx, &mut head).await;
    ctx.http.give_response_head(head);
    responded
}

/// The head read into `head` (which then owns a copy of its bytes), then the body: see
/// [`respond`].
#[allow(clippy::too_many_arguments)]
async fn relay_response<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    conn: &mut Stream,
    down: &mut D,
    upbuf: &mut IoBuf,
    Sent { continued, retry }: Sent<'_>,
    rctx: &mut RequestContext,
    head: &mut ResponseHead,
) -> Result<Responded, HttpError> {
    let settings = req.upstream().http;
    let limits = Limits::default();
    // The request is out: the response time, and its timeout, start now.
    let sent_at = tokio::time::Instant::now();
    let deadline = sent_at + settings.response_header_timeout;
    let mut any_byte = false;
    let parsed = loop {
        match parse_response(upbuf.filled(), &limits, req.head_method, head) {
            Ok(Some(parsed)) if (100..200).contains(&head.status) && head.status != 101 => {
                // Interim responses go through, except a 100 we already sent.
                if !(head.status == 100 && continued) {
                    keep_head(ctx, head, upbuf, parsed.len);
                    let edits = Cow::Borrowed(req.response_ops.for_status(head.status));
                    down.send_informational(&ResponseParts::of(head, parsed.reason, edits))
                        .await?;
                }
                upbuf.consume(parsed.len);
                continue;
            }
            Ok(Some(parsed)) => break parsed,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("upstream {}: bad response head: {e}", req.upstream().name);
                return Err(HttpError::UpstreamBadResponse);
            }
        }
        // `read_from` holds no buffer while it waits, and the wait is the long part.
        let read = tokio::time::timeout_at(deadline, upbuf.read_from(&ctx.http, conn, limits.max_head + 1));
        match read.await {
            Ok(Ok(0)) | Ok(Err(_)) if any_byte => return Err(HttpError::UpstreamClosedEarly),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(HttpError::UpstreamReset),
            Ok(Ok(_)) => any_byte = true,
            Err(_) => return Err(HttpError::UpstreamTimeout),
        }
    };
    // The head takes the read buffer it came in (no copy); the body's first bytes, read with
    // it, are read from behind it, and the next read of the body takes a buffer of its own.
    let (bytes, start, filled) = upbuf.take_all();
    head.attach(bytes, start, parsed.len);
    record_response_head(ctx, req, down, rctx, (head.status, head.fields_ref()), sent_at);
    let behind_len = filled.saturating_sub(start + parsed.len);
    if !(head.status == 101 && req.upgrade) && retry.is_some_and(|r| r.drops(head.status)) {
        // Dropped: the next try goes elsewhere. A response that came whole (a short error
        // page) leaves its connection fit for the pool; any other is closed with it.
        let whole = match parsed.framing {
            Framing::Length(n) => n == behind_len as u64,
            Framing::None => behind_len == 0,
            _ => false,
        };
        return Err(HttpError::UpstreamStatus {
            status: head.status,
            reusable: whole && parsed.keep_alive,
        });
    }

    let tunnel = head.status == 101 && req.upgrade;
    if tunnel {
        head.length = BodyLength::Unknown;
        head.upgrade = true;
    }
    let head: &ResponseHead = head;
    let mut body = BodyFraming::new(parsed.framing);
    let after_head = head.behind(filled);
    // The body data that came with the head leaves with it (all the bytes, into a tunnel); only
    // chunk data, which lies between chunk lines, is gathered.
    let first: Result<(Cow<'_, [u8]>, usize), _> = if tunnel {
        Ok((Cow::Borrowed(after_head), after_head.len()))
    } else if parsed.framing == Framing::Chunked {
        let mut gathered = Vec::new();
        body.advance(after_head, |data| gathered.extend_from_slice(data))
            .map(|used| (Cow::Owned(gathered), used))
    } else {
        body.advance(after_head, |_| {})
            .map(|used| (Cow::Borrowed(&after_head[..used]), used))
    };
    let Ok((first, used)) = first else {
        return Err(HttpError::UpstreamBadBody);
    };
    let status = head.status;
    let view = ResponseParts::of(head, parsed.reason, super::response_edits(req, rctx.target, status));
    rctx.status = status;
    let sent = down.send_response_head(&view, &first, settings.read_timeout).await;
    drop(first);
    // Bytes behind the body (which a connection fit for another request never has) stay for
    // the body's reader, which then finds the connection unfit.
    if let Some(rest) = after_head.get(used..).filter(|rest| !rest.is_empty()) {
        upbuf.extend_from(&ctx.http, rest);
    }
    if let Err(e) = sent {
        rctx.fail(e);
        return Ok(Responded::Complete { reusable: false });
    }
    if tunnel {
        return Ok(Responded::Tunnel);
    }
    let streamed = match stream_body(ctx, conn, down, upbuf, &mut body, settings.read_timeout).await {
        Ok(()) => finish_body(&body, down).await,
        Err(e) => Err(e),
    };
    match streamed {
        Ok(()) => Ok(Responded::Complete {
            reusable: parsed.keep_alive && parsed.framing != Framing::UntilClose && upbuf.is_empty(),
        }),
        Err(e) => {
            rctx.fail(e);
            Ok(Responded::Complete { reusable: false })
        }
    }
}

/// Gives `head` (just parsed from the start of `upbuf`, `len` bytes) a copy of its bytes, in a
/// write buffer from the worker's pool (its earlier bytes, an interim head's, go back first).
fn keep_head(ctx: &WorkerContext, head: &mut ResponseHead, upbuf: &IoBuf, len: usize) {
    let mut bytes = head.take_bytes();
    if bytes.capacity() == 0 {
        bytes = ctx.http.take_write_buffer();
    }
    bytes.clear();
    bytes.extend_from_slice(&upbuf.filled()[..len]);
    head.attach(bytes, 0, len);
}

/// The response head to the request sent at `sent_at` came: the attempt is recorded and
/// observed ([`observe::attempt_responded`]), then the filters' phase for it runs.
pub(super) fn record_response_head<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    rctx: &mut RequestContext,
    (status, fields): (u16, FieldsRef<'_>),
    sent_at: tokio::time::Instant,
) {
    // One clock read for the response time and the latency's time stamp.
    let now = std::time::Instant::now();
    let took = now.saturating_duration_since(sent_at.into_std());
    observe::attempt_responded(ctx, req, rctx, status, (took, now));
    if let Some(attempt) = rctx.attempts.last() {
        down.upstream_response(req.up, attempt, fields);
    }
}

/// Ends the body toward the client: with the chunked body's trailers, if it had any.
async fn finish_body<D: Downstream>(body: &BodyFraming, down: &mut D) -> Result<(), HttpError> {
    if body.trailers().is_empty() {
        return match down.needs_end() {
            true => down.end_body().await,
            false => Ok(()),
        };
    }
    let pairs: Vec<(&[u8], &[u8])> = trailer_fields(body.trailers()).collect();
    down.send_trailers(FieldsRef::Pairs(&pairs)).await
}

/// Sends the rest of the body as data, reading more from the upstream as needed.
async fn stream_body<D: Downstream>(
    ctx: &WorkerContext,
    conn: &mut Stream,
    down: &mut D,
    upbuf: &mut IoBuf,
    body: &mut BodyFraming,
    read_timeout: std::time::Duration,
) -> Result<(), HttpError> {
    let mut data = Vec::new();
    while !body.is_done() {
        let read = tokio::time::timeout(read_timeout, upbuf.read_from(&ctx.http, conn, HTTP_BUFFER_SIZE));
        match read.await {
            Ok(Ok(0)) if body.framing() == Framing::UntilClose => return Ok(()),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(HttpError::UpstreamClosedEarly),
            Ok(Ok(_)) => {}
            Err(_) => return Err(HttpError::UpstreamReadTimeout),
        }
        let take = if body.framing() == Framing::Chunked {
            // Chunk data is gathered (it may lie in pieces between chunk lines), then sent.
            data.clear();
            let take = body
                .advance(upbuf.filled(), |d| data.extend_from_slice(d))
                .map_err(|_| HttpError::UpstreamBadBody)?;
            down.send_data(&data).await?;
            take
        } else {
            let take = body
                .advance(upbuf.filled(), |_| {})
                .map_err(|_| HttpError::UpstreamBadBody)?;
            down.send_data(&upbuf.filled()[..take]).await?;
            take
        };
        upbuf.consume(take);
    }
    Ok(())
}
