//! One request over HTTP/2 to a target (`protocol = "h2c"`, `"h2"`, or `"auto"` when ALPN chose
//! h2): a stream on a shared connection from the worker's [`H2Pool`](crate::http::h2pool), or on
//! a new one. The request head the exchange wrote (HTTP/1.1, with forwarded headers and edits)
//! becomes the stream's HEADERS; the body is unframed into DATA (chunked trailers become HTTP/2
//! trailers). The response crosses the seam as the neutral message: its head's fields as the
//! `h2` crate decoded them, DATA as shared bytes, trailers as fields; no HTTP/1 text.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use rampart_model::UpstreamProtocol;
use rampart_proto::h1::{parse_request, ChunkedDecoder, ChunkedPart, Framing, Limits};
use rampart_proto::h2map::is_connection_specific;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::response::record_response_head;
use super::{connect, pool_key, InFlight, ProxyRequest};
use crate::balance::Tried;
use crate::http::context::RequestContext;
use crate::http::downstream::{BodySource, Downstream};
use crate::http::error::{ErrorSource, HttpError};
use crate::http::h2_send::write_data;
use crate::http::h2pool::{handshake, H2Conn};
use crate::http::head_out::UpstreamHead;
use crate::http::message::ResponseHeader;
use crate::stream::Stream;
use crate::worker::{bump, WorkerContext};

/// How an attempt over HTTP/2 ended.
pub(super) enum H2Outcome {
    /// The response went to the client (or failed after its head; the context says so).
    Done,
    /// Nothing of the response reached the client. `target` is the one tried, if any.
    Failed {
        target: Option<usize>,
        error: HttpError,
        reused: bool,
    },
    /// `auto`, and the target speaks HTTP/1.1 on this connection.
    Http1 { target: usize, conn: Stream },
}

/// Heads Rampart wrote itself: within the client's limits plus forwarded fields.
const OWN_HEAD_LIMITS: Limits = Limits {
    max_request_line: 1 << 20,
    max_head: 1 << 20,
    max_fields: 1024,
};

/// Tries the request on target `choice` (or another, if its connect fails).
pub(super) async fn attempt<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    head: UpstreamHead<'_>,
    rctx: &mut RequestContext,
    choice: usize,
    tried: &mut Tried,
) -> H2Outcome {
    let up = req.upstream();
    let protocol = up.http.protocol;
    let pooled = ctx.http.h2_pool.borrow_mut().get(&pool_key(req, choice));
    let (target, conn, reused) = match pooled {
        Some(conn) => (choice, conn, true),
        None => {
            if protocol == UpstreamProtocol::Auto {
                let idle = ctx
                    .http
                    .pool
                    .borrow_mut()
                    .take(&pool_key(req, choice), up.http.pool_idle_timeout);
                if let Some(conn) = idle {
                    return H2Outcome::Http1 { target: choice, conn };
                }
            }
            let (target, stream) = match connect(ctx, req, choice, tried).await {
                Ok(made) => made,
                Err(error) => {
                    return H2Outcome::Failed {
                        target: None,
                        error,
                        reused: false,
                    }
                }
            };
            let h2 = stream.tls_info().is_some_and(|t| t.alpn == Some(b"h2"));
            if protocol == UpstreamProtocol::Auto && !h2 {
                return H2Outcome::Http1 { target, conn: stream };
            }
            match tokio::time::timeout(up.connect_timeout, handshake(stream)).await {
                Ok(Ok(conn)) => {
                    ctx.http.h2_pool.borrow_mut().add(pool_key(req, target), conn.clone());
                    (target, conn, false)
                }
                _ => {
                    return H2Outcome::Failed {
                        target: Some(target),
                        error: HttpError::UpstreamReset,
                        reused: false,
                    }
                }
            }
        }
    };
    if reused {
        bump(&ctx.counters.upstream_reuses, 1);
        up.targets[target].metrics.worker(ctx.id).reused.add(1);
    }
    rctx.target = Some(target);
    let _in_flight = InFlight::new(ctx, req, target);
    let _stream = conn.open_stream();
    let mut edited = crate::http::filter::UpstreamHeadBuf::default();
    let head = down.upstream_request(up, target, head, &mut edited);
    match exchange_on(ctx, req, down, head, rctx, &conn).await {
        Ok(()) => H2Outcome::Done,
        Err(error) => {
            if matches!(error, HttpError::UpstreamRefused | HttpError::UpstreamReset) {
                // Whatever the stream met (GOAWAY, a broken connection) new streams go elsewhere.
                conn.retire();
            }
            H2Outcome::Failed {
                target: Some(target),
                error,
                reused,
            }
        }
    }
}

/// What an `h2` error on a stream means for the request: refused (never processed, safe to send
/// again) or reset.
fn stream_error(e: &h2::Error) -> HttpError {
    let refused = e.reason() == Some(Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(Reason::NO_ERROR));
    if refused {
        HttpError::UpstreamRefused
    } else {
        HttpError::UpstreamReset
    }
}

/// The request head as an HTTP/2 request: laid out as fields (`h2`, `h2c`: mapped field by
/// field), or HTTP/1.1 text (`auto` when ALPN chose h2: read back first).
fn h2_request(
    req: &ProxyRequest<'_>,
    target: usize,
    head: UpstreamHead<'_>,
    tls: bool,
) -> Result<Request<()>, HttpError> {
    match head {
        UpstreamHead::Fields(head) => {
            let host = head
                .fields
                .iter()
                .find(|f| f.name(head.buf).eq_ignore_ascii_case(b"host"))
                .map(|f| f.value(head.buf));
            let fields = head.fields.iter().map(|f| (f.name(head.buf), f.value(head.buf)));
            build_request(req, target, tls, head.method(), head.target(), host, fields)
        }
        UpstreamHead::Text(text) => {
            let mut fields = Vec::new();
            let parsed = match parse_request(text, &OWN_HEAD_LIMITS, &mut fields) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => return Err(HttpError::BadRequest(rampart_proto::h1::H1Error::HeadTooLarge)),
                Err(e) => return Err(HttpError::BadRequest(e)),
            };
            let slice = |r: (u32, u32)| &text[r.0 as usize..r.1 as usize];
            let pairs = fields.iter().map(|f| (f.name(text), f.value(text)));
            build_request(
                req,
                target,
                tls,
                slice(parsed.method),
                slice(parsed.target),
                parsed.host.map(slice),
                pairs,
            )
        }
    }
}

/// An HTTP/2 request: `host` becomes the authority (the target's name without one), and the
/// fields go field by field, without `host`, connection-specific fields and `te`.
fn build_request<'a>(
    req: &ProxyRequest<'_>,
    target: usize,
    tls: bool,
    method: &[u8],
    path: &[u8],
    host: Option<&[u8]>,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Request<()>, HttpError> {
    let method = Method::from_bytes(method).map_err(|_| HttpError::BadRequestBody)?;
    let fallback = req.upstream().targets[target].name.as_bytes();
    let scheme = if tls { "https" } else { "http" };
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(host.unwrap_or(fallback))
        .path_and_query(path)
        .build()
        .or_else(|_| {
            Uri::builder()
                .scheme(scheme)
                .authority(fallback)
                .path_and_query(path)
                .build()
        })
        .map_err(|_| HttpError::BadRequestBody)?;
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    let map = request.headers_mut();
    let mut grpc = false;
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"host") || is_connection_specific(name, value) || name.eq_ignore_ascii_case(b"te")
        {
            continue;
        }
        grpc |= name.eq_ignore_ascii_case(b"content-type") && value.starts_with(b"application/grpc");
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    if grpc {
        // gRPC servers want to know the client takes trailers (HTTP/1 hop-by-hop rules dropped it).
        map.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Ok(request)
}

async fn exchange_on<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    head: UpstreamHead<'_>,
    rctx: &mut RequestContext,
    conn: &H2Conn,
) -> Result<(), HttpError> {
    let settings = req.upstream().http;
    let target = rctx.target.unwrap_or_default();
    let request = h2_request(req, target, head, req.upstream().tls.is_some())?;
    let ready = tokio::time::timeout(settings.write_timeout, conn.send.clone().ready()).await;
    let mut send = match ready {
        Ok(Ok(send)) => send,
        Ok(Err(e)) => return Err(stream_error(&e)),
        Err(_) => return Err(HttpError::UpstreamWriteTimeout),
    };
    let end = req.framing == Framing::None;
    let (response, mut body) = send.send_request(request, end).map_err(|e| stream_error(&e))?;
    if !end && req.framing == Framing::Chunked {
        if let Some(source) = down.take_body_source() {
            // Full duplex: the body flows up while the response flows back (a gRPC stream may
            // answer before the client is done, and the client may wait for that answer).
            let pump = source.pump(&mut body, settings.write_timeout);
            let respond = receive(ctx, req, down, rctx, response);
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
        send_body(req, down, &mut body, settings.write_timeout).await?;
    }
    receive(ctx, req, down, rctx, response).await
}

/// Waits for the response and sends it to the client: its head, its DATA, its trailers.
async fn receive<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    rctx: &mut RequestContext,
    response: h2::client::ResponseFuture,
) -> Result<(), HttpError> {
    let settings = req.upstream().http;
    down.body().release_if_empty(&ctx.http);
    let sent_at = Instant::now();
    let response = match tokio::time::timeout(settings.response_header_timeout, response).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(stream_error(&e)),
        Err(_) => return Err(HttpError::UpstreamTimeout),
    };
    let status = response.status().as_u16();
    record_response_head(ctx, req, rctx, status, sent_at.elapsed());
    let (parts, mut recv) = response.into_parts();
    let header = ResponseHeader {
        status,
        reason: b"",
        fields: FieldsRef::Map(&parts.headers),
        length: response_length(status, req.head_method, recv.is_end_stream(), &parts.headers),
        edits: Cow::Borrowed(req.response_ops),
        upgrade: false,
    };
    rctx.status = status;
    match down.send_response_head(&header, &[], settings.read_timeout).await {
        Err(e) => rctx.fail(e),
        Ok(()) if header.length == BodyLength::None => {}
        Ok(()) => {
            if let Err(e) = stream_response_body(down, &mut recv, settings.read_timeout).await {
                rctx.fail(e);
            }
        }
    }
    Ok(())
}

/// What an HTTP/2 response head says of its body's length: none for a HEAD request, a 1xx, 204
/// or 304; nothing at all when the head ended the stream; its `content-length` (which the `h2`
/// crate holds the DATA to); otherwise unknown.
fn response_length(status: u16, head_request: bool, ended: bool, headers: &HeaderMap) -> BodyLength {
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return BodyLength::None;
    }
    if ended {
        return BodyLength::Exact(0);
    }
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map_or(BodyLength::Unknown, BodyLength::Exact)
}

/// Streams the request body from the client as DATA (a chunked body unframed, its trailers sent
/// as trailers).
async fn send_body<D: Downstream>(
    req: &ProxyRequest<'_>,
    down: &mut D,
    body: &mut SendStream<Bytes>,
    write_timeout: Duration,
) -> Result<(), HttpError> {
    let failed = |_: HttpError| HttpError::UpstreamWriteFailed { body_sent: true };
    let mut sent = 0u64;
    match req.framing {
        Framing::None | Framing::UntilClose => body.send_data(Bytes::new(), true).map_err(|e| stream_error(&e)),
        Framing::Length(total) => {
            let mut left = total;
            while left > 0 {
                if down.body().is_empty() {
                    down.read_body().await?;
                }
                let take = (down.body().len() as u64).min(left) as usize;
                down.forwarding_body(take)?;
                let buf = down.body();
                left -= take as u64;
                write_data(body, &buf.filled()[..take], left == 0, write_timeout, &mut sent)
                    .await
                    .map_err(failed)?;
                buf.consume(take);
            }
            Ok(())
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let (mut data, mut trailers) = (Vec::new(), Vec::new());
            loop {
                if down.body().is_empty() {
                    down.read_body().await?;
                }
                data.clear();
                let (used, _) = decoder
                    .decode(down.body().filled(), |part| match part {
                        ChunkedPart::Data(d) => data.extend_from_slice(d),
                        ChunkedPart::Trailer(t) => trailers.extend_from_slice(t),
                    })
                    .map_err(|_| HttpError::BadRequestBody)?;
                down.forwarding_body(used)?;
                down.body().consume(used);
                let done = decoder.is_done();
                let end = done && trailers.is_empty();
                write_data(body, &data, end, write_timeout, &mut sent)
                    .await
                    .map_err(failed)?;
                if done {
                    if !trailers.is_empty() {
                        let mut map = HeaderMap::new();
                        for (name, value) in rampart_proto::h2map::trailer_fields(&trailers) {
                            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                                map.append(n, v);
                            }
                        }
                        body.send_trailers(map).map_err(|e| stream_error(&e))?;
                    }
                    return Ok(());
                }
            }
        }
    }
}

/// Sends the response body to the client: DATA as shared bytes, then the trailers (or the end).
async fn stream_response_body<D: Downstream>(
    down: &mut D,
    recv: &mut RecvStream,
    read_timeout: Duration,
) -> Result<(), HttpError> {
    loop {
        let data = match tokio::time::timeout(read_timeout, recv.data()).await {
            Err(_) => return Err(HttpError::UpstreamReadTimeout),
            Ok(data) => data,
        };
        match data {
            Some(Ok(bytes)) => {
                let _ = recv.flow_control().release_capacity(bytes.len());
                if !bytes.is_empty() {
                    down.send_bytes(bytes).await?;
                }
            }
            Some(Err(_)) => return Err(HttpError::UpstreamClosedEarly),
            None => break,
        }
    }
    match tokio::time::timeout(read_timeout, recv.trailers()).await {
        Ok(Ok(Some(trailers))) => down.send_trailers(FieldsRef::Map(&trailers)).await,
        Ok(Ok(None)) => down.end_body().await,
        Ok(Err(_)) => Err(HttpError::UpstreamClosedEarly),
        Err(_) => Err(HttpError::UpstreamReadTimeout),
    }
}
