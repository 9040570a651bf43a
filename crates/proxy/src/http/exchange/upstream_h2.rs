//! One attempt of a request over HTTP/2 (`protocol = "h2c"`, `"h2"`, or `"auto"` when ALPN chose
//! h2): a stream on a connection the worker's requests share ([`super::session`] finds or opens
//! it). The request head, laid out as fields (forwarded headers and edits included), becomes the
//! stream's HEADERS field by field; the body's frames become DATA and trailers. The response
//! crosses the seam as the neutral message: its head's fields as the `h2` crate decoded them,
//! DATA as shared bytes, trailers as fields. No HTTP/1 text either way.

use std::time::Duration;

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use rampart_proto::h2map::{is_connection_specific, to_h2_fields};
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead};

use super::choice::StatusRetry;
use super::kept_body::KeptBody;
use super::response::record_response_head;
use super::{Exchange, ProxyRequest};
use crate::http::context::RequestContext;
use crate::http::downstream::{BodyFrame, BodySink, BodySource, Downstream};
use crate::http::error::{ErrorSource, HttpError};
use crate::http::h2_send::{write_bytes, write_data};
use crate::http::h2pool::H2Conn;
use crate::http::head_out::{sent_fields, RequestParts, ResponseParts};
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
        let request = h2_request(req, target, head, req.upstream().tls.is_some())?;
        let ready = tokio::time::timeout(settings.write_timeout, conn.send.clone().ready()).await;
        let mut send = match ready {
            Ok(Ok(send)) => send,
            Ok(Err(e)) => return Err(stream_error(&e)),
            Err(_) => return Err(HttpError::UpstreamWriteTimeout),
        };
        let end = req.body == BodyLength::None;
        let (response, mut body) = send.send_request(request, end).map_err(|e| stream_error(&e))?;
        if req.body == BodyLength::Unknown {
            if let Some(source) = down.take_body_source() {
                // Full duplex: the body flows up while the response flows back (a gRPC stream may
                // answer before the client is done, and the client may wait for that answer). It
                // is not kept for a retry.
                kept.lose();
                let pump = source.pump(&mut body, settings.write_timeout);
                let respond = receive(ctx, req, down, rctx, response, None);
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
            send_body(req, down, kept, &mut body, settings.write_timeout).await?;
        }
        // A body lost past its limit as it went: no response is dropped for a retry then.
        let retry = retry.filter(|_| kept.replayable(req));
        receive(ctx, req, down, rctx, response, retry).await
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

/// The request head to send, as an HTTP/2 request: its fields (see [`sent_fields`]) mapped one
/// by one into the `h2` crate's map, `host` becoming the authority (the target's name without
/// one); connection-specific fields and `te` left out (`te: trailers` put back for gRPC).
fn h2_request(
    req: &ProxyRequest<'_>,
    target: usize,
    head: &RequestParts<'_>,
    tls: bool,
) -> Result<Request<()>, HttpError> {
    let method = Method::from_bytes(head.method).map_err(|_| HttpError::BadRequestBody)?;
    let mut request = Request::new(());
    let map = request.headers_mut();
    let mut grpc = false;
    let mut host: Option<HeaderValue> = None;
    sent_fields(head, |name, value| {
        if name.eq_ignore_ascii_case(b"host") {
            if host.is_none() {
                host = HeaderValue::from_bytes(value).ok();
            }
            return;
        }
        if is_connection_specific(name, value) || name.eq_ignore_ascii_case(b"te") {
            return;
        }
        grpc |= name.eq_ignore_ascii_case(b"content-type") && value.starts_with(b"application/grpc");
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    });
    if grpc {
        // gRPC servers want to know the client takes trailers (HTTP/1 hop-by-hop rules dropped it).
        map.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    let up = req.upstream();
    let fallback = up.targets.get(target).map_or(&up.name, |t| &t.name).as_bytes();
    let scheme = if tls { "https" } else { "http" };
    let path = &head.target[..];
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(host.as_ref().map_or(fallback, |h| h.as_bytes()))
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
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    Ok(request)
}

/// Waits for the response and sends it to the client: its head, its DATA, its trailers.
async fn receive<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    rctx: &mut RequestContext,
    response: h2::client::ResponseFuture,
    retry: Option<StatusRetry<'_>>,
) -> Result<(), HttpError> {
    let settings = req.upstream().http;
    down.release_read_buffer();
    let sent_at = tokio::time::Instant::now();
    let response = match tokio::time::timeout(settings.response_header_timeout, response).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(stream_error(&e)),
        Err(_) => return Err(HttpError::UpstreamTimeout),
    };
    let status = response.status().as_u16();
    record_response_head(
        ctx,
        req,
        down,
        rctx,
        (status, FieldsRef::Map(response.headers())),
        sent_at,
    );
    if retry.is_some_and(|r| r.drops(status)) {
        // Dropping the stream resets it: the next try goes elsewhere.
        return Err(HttpError::UpstreamStatus {
            status,
            reusable: false,
        });
    }
    let (parts, mut recv) = response.into_parts();
    // The owned head takes the map the `h2` crate decoded, as it is.
    let length = response_length(status, req.head_method, recv.is_end_stream(), &parts.headers);
    let head = ResponseHead::from_map(status, parts.headers, length);
    let view = ResponseParts::of(&head, (0, 0), super::response_edits(req, rctx.target, status));
    rctx.status = status;
    match down.send_response_head(&view, &[], settings.read_timeout).await {
        Err(e) => rctx.fail(e),
        Ok(()) if length == BodyLength::None => {}
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

/// Streams the request body from the client as DATA (what is kept of it first, on a retry), its
/// trailers as trailers. A body of known length ends with its last data (END_STREAM on that DATA
/// frame).
async fn send_body<D: Downstream>(
    req: &ProxyRequest<'_>,
    down: &mut D,
    kept: &mut KeptBody,
    body: &mut SendStream<Bytes>,
    write_timeout: Duration,
) -> Result<(), HttpError> {
    let failed = |_: HttpError| HttpError::UpstreamWriteFailed { body_sent: true };
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
                let data = frame.data().unwrap_or_default();
                let end = length == Some(sent + data.len() as u64);
                let written = match frame {
                    BodyFrame::Shared(bytes) => write_bytes(body, bytes.clone(), end, write_timeout, &mut sent).await,
                    _ => write_data(body, data, end, write_timeout, &mut sent).await,
                };
                written.map_err(failed)?;
                ended = end;
            }
            // Trailers behind a body whose length said where it ends cannot follow it.
            BodyFrame::End(_) if ended => return Ok(()),
            // A body that ended short of the length it declared.
            BodyFrame::End(_) if length.is_some_and(|n| n > sent) => return Err(HttpError::BadRequestBody),
            BodyFrame::End(trailers) if trailers.is_empty() => {
                return body.send_data(Bytes::new(), true).map_err(|e| stream_error(&e));
            }
            BodyFrame::End(trailers) => {
                let mut map = HeaderMap::new();
                to_h2_fields(trailers.iter(), &mut map, |_, _| true);
                return body.send_trailers(map).map_err(|e| stream_error(&e));
            }
        }
    }
}

/// An HTTP/2 upstream request stream as the sink of a body taken out of its downstream side.
impl BodySink for SendStream<Bytes> {
    async fn send_bytes(&mut self, data: Bytes, limit: Duration) -> Result<(), HttpError> {
        let mut sent = 0;
        write_bytes(self, data, false, limit, &mut sent)
            .await
            .map_err(|_| HttpError::UpstreamWriteFailed { body_sent: true })
    }

    fn end(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        let ended = match trailers {
            FieldsRef::Map(map) => self.send_trailers(map.clone()),
            empty if empty.is_empty() => self.send_data(Bytes::new(), true),
            trailers => {
                let mut map = HeaderMap::new();
                to_h2_fields(trailers.iter(), &mut map, |_, _| true);
                self.send_trailers(map)
            }
        };
        ended.map_err(|_| HttpError::UpstreamWriteFailed { body_sent: true })
    }

    fn cancel(&mut self) {
        self.send_reset(Reason::CANCEL);
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
