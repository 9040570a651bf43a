//! The response side of an exchange with an HTTP/1 upstream: the head (interim responses
//! relayed), then the body as data frames (a chunked body decoded here, its trailers passed on as
//! fields), or the hand-over to a tunnel after a 101.

use std::borrow::Cow;

use rampart_proto::h1::{parse_response, Framing, Limits};
use rampart_proto::h2map::trailer_fields;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::choice::StatusRetry;
use super::ProxyRequest;
use crate::http::attempts::observe;
use crate::http::body_framing::BodyFraming;
use crate::http::context::RequestContext;
use crate::http::downstream::Downstream;
use crate::http::error::HttpError;
use crate::http::iobuf::IoBuf;
use crate::http::message::ResponseHeader;
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
    Sent { continued, retry }: Sent<'_>,
    rctx: &mut RequestContext,
) -> Result<Responded, HttpError> {
    let settings = req.upstream().http;
    let limits = Limits::default();
    // A field list from the worker's pool: parsing a response head allocates nothing.
    let mut fields = ctx.http.take_field_list();
    // The request is out: the response time, and its timeout, start now.
    let sent_at = tokio::time::Instant::now();
    let result = async {
        let deadline = sent_at + settings.response_header_timeout;
        let mut any_byte = false;
        loop {
            match parse_response(upbuf.filled(), &limits, req.head_method, &mut fields) {
                Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                    // Interim responses go through, except a 100 we already sent.
                    if !(head.status == 100 && continued) {
                        let buf = &upbuf.filled()[..head.len];
                        let interim = ResponseHeader {
                            status: head.status,
                            reason: head.reason_in(buf),
                            fields: FieldsRef::Ranges { buf, list: &fields },
                            length: BodyLength::None,
                            edits: Cow::Borrowed(req.response_ops.for_status(head.status)),
                            upgrade: false,
                        };
                        down.send_informational(&interim).await?;
                    }
                    upbuf.consume(head.len);
                    continue;
                }
                Ok(Some(head)) => return Ok(head),
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
        }
    }
    .await;
    let head = match result {
        Ok(head) => head,
        Err(e) => {
            ctx.http.give_field_list(fields);
            return Err(e);
        }
    };
    let buf = &upbuf.filled()[..head.len];
    let fields_ref = FieldsRef::Ranges { buf, list: &fields };
    record_response_head(ctx, req, down, rctx, (head.status, fields_ref), sent_at);
    if !(head.status == 101 && req.upgrade) && retry.is_some_and(|r| r.drops(head.status)) {
        // Dropped: the next try goes elsewhere. A response that came whole (a short error
        // page) leaves its connection fit for the pool; any other is closed with it.
        ctx.http.give_field_list(fields);
        let body = upbuf.filled().len() - head.len;
        let whole = match head.framing {
            Framing::Length(n) => n == body as u64,
            Framing::None => body == 0,
            _ => false,
        };
        let reusable = whole && head.keep_alive;
        if reusable {
            upbuf.consume(head.len + body);
        }
        return Err(HttpError::UpstreamStatus {
            status: head.status,
            reusable,
        });
    }

    let tunnel = head.status == 101 && req.upgrade;
    let mut body = BodyFraming::new(head.framing);
    let after_head = &upbuf.filled()[head.len..];
    // The body data that came with the head leaves with it (all the bytes, into a tunnel); only
    // chunk data, which lies between chunk lines, is gathered.
    let first: Result<(Cow<'_, [u8]>, usize), _> = if tunnel {
        Ok((Cow::Borrowed(after_head), after_head.len()))
    } else if head.framing == Framing::Chunked {
        let mut gathered = Vec::new();
        body.advance(after_head, |data| gathered.extend_from_slice(data))
            .map(|used| (Cow::Owned(gathered), used))
    } else {
        body.advance(after_head, |_| {})
            .map(|used| (Cow::Borrowed(&after_head[..used]), used))
    };
    let Ok((first, used)) = first else {
        ctx.http.give_field_list(fields);
        return Err(HttpError::UpstreamBadBody);
    };
    let buf = &upbuf.filled()[..head.len];
    let header = ResponseHeader {
        status: head.status,
        reason: head.reason_in(buf),
        fields: FieldsRef::Ranges { buf, list: &fields },
        length: if tunnel {
            BodyLength::Unknown
        } else {
            BodyLength::of_framing(head.framing)
        },
        edits: super::response_edits(req, rctx.target, head.status),
        upgrade: tunnel,
    };
    rctx.status = head.status;
    let sent = down.send_response_head(&header, &first, settings.read_timeout).await;
    ctx.http.give_field_list(fields);
    upbuf.consume(head.len + used);
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
            reusable: head.keep_alive && head.framing != Framing::UntilClose && upbuf.is_empty(),
        }),
        Err(e) => {
            rctx.fail(e);
            Ok(Responded::Complete { reusable: false })
        }
    }
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
