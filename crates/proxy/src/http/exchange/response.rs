//! The response side of an exchange: the head (interim responses relayed), then the body as
//! framed, or a WebSocket tunnel after a 101.

use std::time::{Duration, Instant};

use rampart_proto::h1::{parse_response, ChunkedDecoder, ChunkedProgress, Framing, Limits};
use tokio::net::TcpStream;

use super::{Outcome, ProxyRequest};
use crate::http::head_out::{write_response_head, ResponseOut};
use crate::http::iobuf::IoBuf;
use crate::relay::{relay, write_all, write_all_vectored_within};
use crate::worker::WorkerContext;

/// A failure while reading the response, before anything of it reached the client.
pub(super) enum ResponseFailure {
    /// The upstream closed or reset before sending any response byte.
    Reset,
    Broken,
    Malformed,
    Timeout,
}

impl ResponseFailure {
    pub(super) fn status_and_reason(&self) -> (u16, &'static str) {
        match self {
            ResponseFailure::Reset => (502, "upstream_reset"),
            ResponseFailure::Broken => (502, "upstream_closed_early"),
            ResponseFailure::Malformed => (502, "upstream_bad_response"),
            ResponseFailure::Timeout => (504, "upstream_timeout"),
        }
    }
}

/// Reads the response head (relaying 1xx), sends it on with the body. Returns the outcome and
/// whether the upstream connection may be pooled.
#[allow(clippy::too_many_arguments)]
pub(super) async fn respond(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    conn: &mut TcpStream,
    client: &mut TcpStream,
    inbuf: &mut IoBuf,
    upbuf: &mut IoBuf,
    out: &mut Vec<u8>,
    sent_continue: bool,
    started: Option<Instant>,
) -> Result<(Outcome, bool), ResponseFailure> {
    let settings = req.snapshot.upstreams[req.upstream].http;
    let limits = Limits::default();
    // The worker's field list: parsing a response head allocates nothing.
    let mut fields = ctx.response_fields.take();
    let deadline = tokio::time::Instant::now() + settings.response_header_timeout;
    let mut any_byte = false;
    let head = loop {
        match parse_response(upbuf.filled(), &limits, req.head_method, &mut fields) {
            Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => {
                // Interim responses go through as they are, except a 100 we already sent.
                if !(head.status == 100 && sent_continue)
                    && write_all(client, &upbuf.filled()[..head.len]).await.is_err()
                {
                    return Err(ResponseFailure::Broken);
                }
                upbuf.consume(head.len);
                continue;
            }
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(e) => {
                log::warn!(
                    "upstream {}: bad response head: {e}",
                    req.snapshot.upstreams[req.upstream].name
                );
                return Err(ResponseFailure::Malformed);
            }
        }
        // `read_from` holds no buffer while it waits, and the wait is the long part.
        let read = tokio::time::timeout_at(deadline, upbuf.read_from(ctx, conn, limits.max_head + 1)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Err(if any_byte {
                    ResponseFailure::Broken
                } else {
                    ResponseFailure::Reset
                })
            }
            Ok(Ok(_)) => any_byte = true,
            Err(_) => return Err(ResponseFailure::Timeout),
        }
    };
    let upstream_time = started.map(|s| s.elapsed());

    let tunnel = head.status == 101 && req.upgrade;
    let close_client = !req.client_keep_alive || head.framing == Framing::UntilClose || (head.status == 101 && !tunnel);
    out.clear();
    write_response_head(
        out,
        &ResponseOut {
            buf: upbuf.filled(),
            fields: &fields,
            head: &head,
            ops: req.response_ops,
            close: close_client,
            upgrade: tunnel,
            keep_alive_10: req.client_http10 && req.client_keep_alive,
        },
    );
    ctx.response_fields.set(fields);
    upbuf.consume(head.len);
    req.response_status.set(head.status);
    let mut outcome = Outcome {
        status: head.status,
        keep_client: !close_client,
        target: None,
        upstream_time,
        bytes_out: 0,
        error: None,
    };

    if tunnel {
        out.extend_from_slice(upbuf.filled());
        upbuf.consume(upbuf.len());
        let early = inbuf.filled().to_vec();
        inbuf.consume(early.len());
        if write_all(client, out).await.is_err() || (!early.is_empty() && write_all(conn, &early).await.is_err()) {
            outcome.error = Some("client_error");
            outcome.keep_client = false;
            return Ok((outcome, false));
        }
        outcome.bytes_out = out.len() as u64;
        inbuf.release(ctx);
        upbuf.release(ctx);
        // Boxed: tunnels are rare, and the relay's state would otherwise enlarge every request.
        let done = Box::pin(relay(
            ctx,
            client,
            conn,
            Duration::from_secs(3600),
            crate::http::iobuf::HTTP_BUFFER_SIZE,
        ))
        .await;
        outcome.bytes_out += done.bytes_down;
        outcome.keep_client = false;
        return Ok((outcome, false));
    }

    let body = stream_body(ctx, conn, client, upbuf, out, head.framing, settings.read_timeout).await;
    match body {
        Ok(sent) => {
            outcome.bytes_out = sent;
            let reusable = head.keep_alive && head.framing != Framing::UntilClose && upbuf.is_empty();
            Ok((outcome, reusable))
        }
        Err((sent, why)) => {
            outcome.bytes_out = sent;
            outcome.error = Some(why);
            outcome.keep_client = false;
            Ok((outcome, false))
        }
    }
}

/// Sends `out` (the response head) followed by the body as framed, reading more from the
/// upstream as needed. Small bodies already read go out in the same write as the head.
async fn stream_body(
    ctx: &WorkerContext,
    conn: &mut TcpStream,
    client: &mut TcpStream,
    upbuf: &mut IoBuf,
    out: &mut Vec<u8>,
    framing: Framing,
    read_timeout: Duration,
) -> Result<u64, (u64, &'static str)> {
    let mut sent = 0u64;
    let mut decoder = ChunkedDecoder::new();
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => u64::MAX,
    };
    let mut done = framing == Framing::None;
    // First piece: whatever body bytes came with the head.
    let mut first = true;
    loop {
        let available = upbuf.len();
        let take = match framing {
            Framing::None => 0,
            Framing::Length(_) => (available as u64).min(left) as usize,
            Framing::Chunked => {
                let (used, progress) = decoder
                    .advance(upbuf.filled())
                    .map_err(|_| (sent, "upstream_bad_body"))?;
                done = progress == ChunkedProgress::Done;
                used
            }
            Framing::UntilClose => available,
        };
        if let Framing::Length(_) = framing {
            left -= take as u64;
            done = left == 0;
        }
        if first {
            // The head and the body bytes read with it leave in one system call: small bodies are
            // copied behind the head, larger ones go as a second slice of one vectored write.
            let body = &upbuf.filled()[..take];
            let written = if body.len() <= 2048 {
                out.extend_from_slice(body);
                write_all(client, out).await
            } else {
                write_all_vectored_within(client, out, body, read_timeout).await
            };
            written.map_err(|_| (sent, "client_error"))?;
            sent += (out.len() + if body.len() <= 2048 { 0 } else { body.len() }) as u64;
            first = false;
        } else if take > 0 {
            write_all(client, &upbuf.filled()[..take])
                .await
                .map_err(|_| (sent, "client_error"))?;
            sent += take as u64;
        }
        upbuf.consume(take);
        if done {
            return Ok(sent);
        }
        let read = tokio::time::timeout(
            read_timeout,
            upbuf.read_from(ctx, conn, crate::http::iobuf::HTTP_BUFFER_SIZE),
        )
        .await;
        match read {
            Ok(Ok(0)) if framing == Framing::UntilClose => return Ok(sent),
            Ok(Ok(0)) | Ok(Err(_)) => return Err((sent, "upstream_closed_early")),
            Ok(Ok(_)) => {}
            Err(_) => return Err((sent, "upstream_read_timeout")),
        }
    }
}
