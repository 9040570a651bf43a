//! One HTTP/2 stream as a request: its head laid out as the neutral request head (no HTTP/1
//! text), then routed, answered or proxied, and logged by the same code as an HTTP/1 request.
//! [`H2Stream`] is the stream's side of it: the [`ClientSide`] a request reaches its client by.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h1::{Framing, Limits};
use rampart_proto::h2conn::Connection;
use rampart_proto::h2frame::ErrorCode;
use rampart_proto::h2map::{lay_out_section, LayoutError};
use rampart_proto::message::RequestHead;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client_stream::{H2Stream, ResponseBody};
use super::downstream::H2Downstream;
use super::mux::{Incoming, StreamIo};
use super::ConnInfo;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{answer_error, ClientTerms};
use crate::http::error::HttpError;
use crate::http::filter::FilterRun;
use crate::http::iobuf::IoBuf;
use crate::http::request::{http_listener, RequestPath};
use crate::http::state::HttpWorkerState;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::{bump, WorkerContext};

/// Handles one stream from its head (laid out by the connection's task as it was read, or
/// refused) to its end, then gives its buffers back.
pub(super) async fn serve(
    ctx: &WorkerContext,
    info: &ConnInfo,
    io: StreamIo,
    head: Result<RequestHead, LayoutError>,
    end_stream: bool,
) {
    let grpc = head
        .as_ref()
        .ok()
        .and_then(|h| h.field(b"content-type"))
        .is_some_and(|v| v.starts_with(b"application/grpc"));
    let deadline = head
        .as_ref()
        .ok()
        .and_then(|h| h.field(b"grpc-timeout"))
        .and_then(grpc_timeout);
    let stream = H2Stream {
        info,
        io,
        body_taken: false,
        head_sent: false,
        request_ended: end_stream,
        request_data: Bytes::new(),
        request_trailers: None,
        grpc,
        response: ResponseBody::default(),
        sent: 0,
        send_timeout: Duration::from_secs(10),
    };
    let found = RequestPath::for_stream(
        ctx,
        stream,
        info.client,
        info.client_ip.clone(),
        info.listener_key.clone(),
    );
    let mut conn = match found {
        Ok(conn) => conn,
        Err(stream) => {
            // A reload removed the listener or made it a TCP listener: the stream is refused
            // unprocessed (the client may send it again elsewhere) and the connection ends
            // with GOAWAY once its other streams are done.
            stream.io.reset(ErrorCode::RefusedStream);
            stream.io.close();
            if let Ok(head) = head {
                ctx.http.give_request_head(head);
            }
            info.retire();
            return;
        }
    };
    let logged = conn.http().access_log.is_some();
    let mut rctx = RequestContext::new(logged);
    let mut run = FilterRun::default();
    bump(&ctx.counters.http_requests, 1);
    conn.ensure_out();
    conn.stream.send_timeout = conn.http().client_header_timeout;
    rctx.deadline = deadline.and_then(|limit| rctx.began.checked_add(limit));
    match head {
        Ok(head) => {
            // Boxed: built in place, not moved through this future and the timeout (see
            // docs/benchmarks.md, "Panics: unwind or abort").
            let handled = Box::pin(conn.handle(&head, &mut rctx, &mut run, true));
            let timed_out = match deadline {
                Some(limit) => tokio::time::timeout(limit, handled).await.is_err(),
                None => {
                    handled.await;
                    false
                }
            };
            if timed_out {
                // The client's grpc-timeout passed: DEADLINE_EXCEEDED, or a reset when the
                // response had begun.
                let mut down = conn.downstream(false, false, false, Framing::None);
                answer_error(&mut down, &mut rctx, HttpError::RequestTimeout).await;
            }
            conn.finish(Some(&head), &rctx, &mut run);
            ctx.http.give_request_head(head);
        }
        Err(LayoutError::Refused(e)) => {
            // A head the request path refuses as it would the same HTTP/1.1 head: 431 for one
            // over the limits, 400 for a bad target or length.
            conn.fail(&mut rctx, HttpError::BadRequest(e), false, false).await;
            conn.finish(None, &rctx, &mut run);
        }
        Err(LayoutError::Malformed(e)) => {
            tracing::debug!("malformed HTTP/2 request from {}: {e}", info.client);
            conn.stream.io.reset(ErrorCode::Protocol);
            rctx.fail(HttpError::BadRequestBody);
            conn.finish(None, &rctx, &mut run);
        }
    }
    conn.stream.end(&rctx);
    conn.release_idle();
}

/// Lays the head the connection just decoded out as the owned request head, in place: the head
/// takes the decoded bytes (the one copy from the wire), and the connection decodes the next
/// head into storage from the worker's pools. No HTTP/1 text. The listener's current limits
/// apply.
pub(super) fn lay_out_head(
    ctx: &WorkerContext,
    info: &ConnInfo,
    conn: &mut Connection,
    end_stream: bool,
) -> Result<RequestHead, LayoutError> {
    let (bytes, fields) = conn.fields();
    // Only an extended CONNECT needs a key: the clock and hash stay off other requests.
    let key = match fields.iter().any(|f| f.name(bytes) == b":protocol") {
        true => websocket_key(ctx.id, info),
        false => [0; 24],
    };
    let limits = {
        let snapshot = ctx.snapshot();
        http_listener(&snapshot, &info.listener_key).map_or_else(Limits::default, |(_, http)| http.limits)
    };
    let (fresh, list) = ctx.http.take_head_storage();
    let decoded = conn.swap_decoded(fresh);
    match lay_out_section((decoded, list), conn.field_list(), end_stream, &key, &limits) {
        Ok((head, _)) => Ok(head),
        Err((e, (bytes, fields))) => {
            ctx.http.give_write_buffer(bytes);
            ctx.http.give_field_list(fields);
            Err(e)
        }
    }
}

/// A `Sec-WebSocket-Key` for the HTTP/1.1 upgrade an extended CONNECT becomes: 16 bytes that
/// differ per request (the upstream only echoes a hash of them), base64.
fn websocket_key(worker: usize, info: &ConnInfo) -> [u8; 24] {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ ((worker as u64) << 48) ^ (info as *const ConnInfo as u64);
    let mut raw = [0u8; 16];
    for chunk in raw.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = [b'='; 24];
    for (i, group) in raw.chunks(3).enumerate() {
        let b = [group[0], *group.get(1).unwrap_or(&0), *group.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let count = group.len() + 1;
        for j in 0..count {
            out[i * 4 + j] = ALPHABET[(n >> (18 - 6 * j) & 63) as usize];
        }
    }
    out
}

/// The deadline a gRPC client set (`grpc-timeout: 100m`), if any.
fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

impl H2Stream<'_> {
    /// Ends the stream after the request was handled: END_STREAM where the body's framing left
    /// it open (a body delimited by the upstream's close), a reset where the response failed or
    /// never began; then the stream is given back to the connection.
    fn end(&mut self, rctx: &RequestContext) {
        self.release_last();
        if !self.response.ended && !self.io.reset_by_peer() {
            if !self.head_sent {
                self.io.reset(match rctx.error {
                    Some(HttpError::ClientGone) => ErrorCode::Cancel,
                    _ => ErrorCode::Internal,
                });
            } else if rctx.error == Some(HttpError::RequestTimeout) {
                // A deadline that passed mid-response ends the stream as a gRPC server would.
                self.io.reset(ErrorCode::Cancel);
            } else if rctx.error.is_some() {
                self.io.reset(ErrorCode::Internal);
            } else {
                self.io.end_stream();
            }
            self.response.ended = true;
        }
        self.io.close();
    }
}

impl<'c> ClientSide for H2Stream<'c> {
    type Down<'b>
        = H2Downstream<'b, 'c>
    where
        Self: 'b;

    fn downstream<'b>(
        &'b mut self,
        inbuf: &'b mut IoBuf,
        _out: &'b mut Vec<u8>,
        state: &'b HttpWorkerState,
        terms: ClientTerms,
    ) -> H2Downstream<'b, 'c> {
        H2Downstream {
            s: self,
            inbuf,
            state,
            body_timeout: terms.body_timeout,
            head_only: terms.head_only,
        }
    }

    fn scheme(&self) -> &'static str {
        self.info.scheme
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.info
            .local
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no local address"))
    }

    fn client_cert(&self) -> Option<&str> {
        self.info.client_cert.as_deref()
    }

    fn tls_info(&self) -> Option<TlsInfo<'_>> {
        self.info.tls.as_ref().map(|t| t.view())
    }

    fn protocol(&self, _: rampart_proto::h1::Version) -> rampart_proto::message::Protocol {
        rampart_proto::message::Protocol::Http2
    }

    /// The WebSocket an extended CONNECT opened: DATA frames both ways, bridged to the upstream
    /// connection, until either side ends or nothing moves for `idle_timeout`.
    async fn tunnel(
        &mut self,
        _ctx: &WorkerContext,
        upstream: &mut Stream,
        idle_timeout: Duration,
        buffer_size: usize,
    ) -> (u64, u64) {
        let (mut up, mut down) = (0u64, 0u64);
        if !self.head_sent || self.body_taken {
            return (0, 0);
        }
        let mut buf = vec![0u8; buffer_size.min(64 * 1024)];
        let mut client_open = !self.request_ended;
        let io = self.io.clone();
        loop {
            let idle = tokio::time::sleep(idle_timeout);
            tokio::select! {
                data = io.data(), if client_open => match data {
                    Incoming::Data(bytes) => {
                        up += bytes.len() as u64;
                        if upstream.write_all(&bytes).await.is_err() {
                            break;
                        }
                        io.release(bytes.len());
                    }
                    Incoming::Reset => break,
                    Incoming::End => {
                        // The client's half ended: so does the upstream's.
                        client_open = false;
                        let _ = upstream.shutdown().await;
                    }
                },
                read = upstream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        down += n as u64;
                        if io.send_data(&buf[..n], false, idle_timeout, &mut self.sent).await.is_err() {
                            break;
                        }
                    }
                },
                _ = idle => break,
            }
        }
        // The stream ends with the tunnel (END_STREAM from `end`, unless it failed).
        (up, down)
    }
}
