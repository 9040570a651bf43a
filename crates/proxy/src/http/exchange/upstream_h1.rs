//! One attempt of a request over an HTTP/1 connection: `100 Continue` where the client waits for
//! it, the head and body out (a body of unknown length chunked), the response back
//! ([`super::response`]), and the connection back to the pool when it can carry another request.

use std::time::Duration;

use rampart_proto::h1::chunk_size_line;
use rampart_proto::message::BodyLength;

use super::kept_body::KeptBody;
use super::response::{respond, Responded, Sent};
use super::{pool_key, Exchange, ProxyRequest};
use crate::http::downstream::{BodyFrame, Downstream};
use crate::http::error::HttpError;
use crate::http::head_out::{write_chunked_end, write_request_head, RequestParts};
use crate::stream::Stream;

impl<D: Downstream> Exchange<'_, '_, D> {
    /// Exchanges the request on `conn` to `target`. `Ok` with the connection when a 101 turned
    /// it into a tunnel; an error means nothing of the response reached the client.
    pub(super) async fn over_http1(
        &mut self,
        head: &RequestParts<'_>,
        target: usize,
        mut conn: Stream,
    ) -> Result<Option<Stream>, HttpError> {
        let retry = self.status_retry();
        let (ctx, req) = (self.ctx, self.req);
        let (down, rctx) = (&mut *self.down, &mut *self.rctx);
        let sent_continue = &mut self.sent_continue;
        let up = req.upstream();
        let settings = up.http;
        if req.expect_continue && !*sent_continue && req.body != BodyLength::None && !down.body_waiting() {
            // The client waits for it: ours, before the upstream's (which is not relayed then).
            down.send_continue().await?;
            *sent_continue = true;
        }
        let kept = &mut self.kept;
        // The head as HTTP/1.1 text, written for this attempt (in a buffer the client side lends
        // while the request goes up, or one from the pool).
        let mut head_out = down.lend_buffer().unwrap_or_else(|| ctx.http.take_write_buffer());
        write_request_head(&mut head_out, head);
        let sent = send_request(req, &mut conn, down, kept, &head_out, settings.write_timeout).await;
        if let Some(unlent) = down.return_buffer(head_out) {
            ctx.http.give_write_buffer(unlent);
        }
        sent?;
        // A body lost past its limit as it went: no response is dropped for a retry then.
        let retry = retry.filter(|_| kept.replayable(req));
        // Nothing of the client's is needed while the upstream thinks: its buffer goes back now
        // (unless a pipelined request is waiting in it).
        down.release_read_buffer();
        let sent = Sent {
            continued: *sent_continue,
            retry,
        };
        let responded = respond(ctx, req, &mut conn, down, sent, rctx).await;
        let responded = match responded {
            Err(error @ HttpError::UpstreamStatus { reusable: true, .. }) => {
                // A response dropped for a retry, read whole: its connection carries on.
                let max = settings.pool_max_idle;
                if let Some(key) = pool_key(req, target) {
                    ctx.http.pool.borrow_mut().put(key, conn, max);
                }
                return Err(error);
            }
            other => other?,
        };
        match responded {
            Responded::Tunnel => Ok(Some(conn)),
            Responded::Complete { reusable } => {
                // (A failure after the head reached the client is in the context: the request's
                // end counts it.)
                if reusable {
                    let max = settings.pool_max_idle;
                    if let Some(key) = pool_key(req, target) {
                        ctx.http.pool.borrow_mut().put(key, conn, max);
                    }
                }
                Ok(None)
            }
        }
    }
}

/// Writes the head and streams the body to the upstream (what is kept of it first, on a retry).
async fn send_request<D: Downstream>(
    req: &ProxyRequest<'_>,
    conn: &mut Stream,
    down: &mut D,
    kept: &mut KeptBody,
    head_out: &[u8],
    write_timeout: Duration,
) -> Result<(), HttpError> {
    let up_write = |result: std::io::Result<()>, body_sent: bool| match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(HttpError::UpstreamWriteTimeout),
        Err(_) => Err(HttpError::UpstreamWriteFailed { body_sent }),
    };
    up_write(conn.write_all_within(head_out, &[], write_timeout).await, false)?;
    if req.body == BodyLength::None {
        return Ok(());
    }
    // A body of unknown length goes chunked (the head said so); one of known length as it is.
    let chunked = req.body == BodyLength::Unknown;
    // Each chunk's line end goes out with the next chunk's size line (or the last chunk).
    let mut framing = Vec::new();
    let mut chunk_open = false;
    // Of a body of known length, the bytes still due: a client side whose body ends short of
    // them (an HTTP/2 stream that lied about its length) fails the request.
    let mut left = match req.body {
        BodyLength::Exact(n) => n,
        _ => 0,
    };
    let mut at = 0;
    loop {
        let frame = kept.frame(down, &mut at).await?;
        match (frame, frame.data()) {
            (_, Some(data)) if chunked => {
                framing.clear();
                if chunk_open {
                    framing.extend_from_slice(b"\r\n");
                }
                chunk_size_line(data.len(), &mut framing);
                up_write(conn.write_all_within(&framing, data, write_timeout).await, true)?;
                chunk_open = true;
            }
            (_, Some(data)) => {
                left = left.checked_sub(data.len() as u64).ok_or(HttpError::BadRequestBody)?;
                up_write(conn.write_all_within(data, &[], write_timeout).await, true)?;
            }
            (BodyFrame::End(trailers), _) if chunked => {
                framing.clear();
                if chunk_open {
                    framing.extend_from_slice(b"\r\n");
                }
                write_chunked_end(&mut framing, trailers);
                return up_write(conn.write_all_within(&framing, &[], write_timeout).await, true);
            }
            // The length said where the body ends: nothing follows it on HTTP/1.
            _ if left == 0 => return Ok(()),
            _ => return Err(HttpError::BadRequestBody),
        }
    }
}
