//! One HTTP/3 request stream as a request: its head (QPACK-decoded by `h3`) laid out as the owned
//! request head (no HTTP/1 text), then routed, answered or proxied, and logged by the same code
//! as HTTP/1 and HTTP/2 requests. [`H3Stream`] is the stream's side of it.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::FutureExt;
use rampart_proto::h1::{Field, Limits};
use rampart_proto::h2map::{lay_out_request, LayoutError};
use rampart_proto::message::{Protocol, RequestHead};

use super::downstream::H3Downstream;
use super::{code, ConnInfo};
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::ClientTerms;
use crate::http::error::HttpError;
use crate::http::filter::FilterRun;
use crate::http::iobuf::IoBuf;
use crate::http::request::{http_listener, RequestPath};
use crate::http::state::HttpWorkerState;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::{bump, WorkerContext};

pub(super) type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;
pub(super) type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
pub(super) type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;
/// Request trailers, packed: their bytes and the fields as ranges into them.
pub(super) type Trailers = (Vec<u8>, Vec<Field>);

/// The client side of one request stream.
pub(crate) struct H3Stream<'c> {
    pub(super) info: &'c ConnInfo,
    pub(super) send: SendHalf,
    /// The request body's side; `None` once taken by an exchange that streams it on its own.
    pub(super) recv: Option<RecvHalf>,
    /// Body data read ahead of the request (to learn whether a body follows its head).
    pub(super) first: Option<Bytes>,
    pub(super) request_ended: bool,
    pub(super) request_data: Bytes,
    pub(super) request_trailers: Option<Trailers>,
    pub(super) head_sent: bool,
    /// Body bytes the response head's length still allows (`None`: unknown).
    pub(super) left: Option<u64>,
    /// The response has ended (finished, or the stream was reset).
    pub(super) ended: bool,
    pub(super) sent: u64,
    /// Longest wait for the client's flow control to let a write through.
    pub(super) send_timeout: Duration,
}

/// Methods whose requests carry no body as a rule: before routing one without
/// `content-length`, the stream's end is awaited briefly, so that it is not sent upstream as a
/// body of unknown length.
fn usually_bodiless(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::DELETE | http::Method::TRACE
    )
}

/// Handles one stream from its head to its end. `early`: it was opened before the handshake was
/// confirmed (0-RTT), so it may be a replay.
pub(super) async fn serve(ctx: &WorkerContext, info: &ConnInfo, resolver: Resolver, early: bool) {
    let (request, stream) = match resolver.resolve_request().await {
        Ok(resolved) => resolved,
        Err(e) => {
            // A stream reset or ended before its head: counted as the client's reset.
            tracing::debug!("HTTP/3 stream from {} without a request: {e}", info.client);
            info.count_reset();
            return;
        }
    };
    let (send, mut recv) = stream.split();
    let (header_timeout, limits) = {
        let snapshot = ctx.snapshot();
        match http_listener(&snapshot, &info.listener_key) {
            Some((_, http)) => (http.client_header_timeout, http.limits),
            None => (Duration::from_secs(10), Limits::default()),
        }
    };
    // Whether a body follows: the stream's end may have come with the head.
    let has_length = request.headers().contains_key(http::header::CONTENT_LENGTH);
    let peeked = match recv.recv_data().now_or_never() {
        Some(result) => Some(result),
        None if !has_length && usually_bodiless(request.method()) => {
            tokio::time::timeout(header_timeout, recv.recv_data()).await.ok()
        }
        None => None,
    };
    let (first, request_ended) = match peeked {
        Some(Ok(Some(mut data))) => (Some(data.copy_to_bytes(data.remaining())), false),
        Some(Ok(None)) => (None, true),
        Some(Err(_)) => {
            info.count_reset();
            return;
        }
        None => (None, false),
    };
    let trailers = match request_ended {
        true => recv.recv_trailers().await.ok().flatten().map(|t| pack(&t)),
        false => None,
    };
    let head = lay_out(ctx, &request, request_ended, &limits);
    drop(request);
    let stream = H3Stream {
        info,
        send,
        recv: Some(recv),
        first,
        request_ended,
        request_data: Bytes::new(),
        request_trailers: trailers,
        head_sent: false,
        left: None,
        ended: false,
        sent: 0,
        send_timeout: header_timeout,
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
        Err(mut stream) => {
            // A reload removed the listener: refused unprocessed, the client may send it again.
            stream.send.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
            if let Ok(head) = head {
                ctx.http.give_request_head(head);
            }
            return;
        }
    };
    let logged = conn.http().access_log.is_some();
    let mut rctx = RequestContext::new(logged);
    let mut run = FilterRun::default();
    bump(&ctx.counters.http_requests, 1);
    conn.ensure_out();
    match head {
        Ok(head) => {
            let safe = matches!(head.method(), b"GET" | b"HEAD" | b"OPTIONS");
            if early && !safe {
                // RFC 8470: a request that changes state is not taken from early data, which an
                // attacker can replay; the client sends it again after the handshake.
                let too_early = HttpError::Filtered {
                    status: 425,
                    reason: "too_early",
                };
                conn.fail(&mut rctx, too_early, false, false).await;
            } else {
                // Boxed: built in place, not moved through this future (as HTTP/2's).
                Box::pin(conn.handle(&head, &mut rctx, &mut run, true)).await;
            }
            conn.finish(Some(&head), &rctx, &mut run);
            ctx.http.give_request_head(head);
        }
        Err(LayoutError::Refused(e)) => {
            conn.fail(&mut rctx, HttpError::BadRequest(e), false, false).await;
            conn.finish(None, &rctx, &mut run);
        }
        Err(LayoutError::Malformed(e)) => {
            tracing::debug!("malformed HTTP/3 request from {}: {e}", info.client);
            conn.stream.send.stop_stream(h3::error::Code::H3_MESSAGE_ERROR);
            conn.stream.ended = true;
            rctx.fail(HttpError::BadRequestBody);
            conn.finish(None, &rctx, &mut run);
        }
    }
    if rctx.error == Some(HttpError::ClientGone) {
        // The client let go of the stream before its answer: counted as HTTP/2's resets are.
        info.count_reset();
    }
    conn.stream.end(&rctx).await;
    conn.release_idle();
}

/// Lays the decoded head out as the owned request head, as an HTTP/2 head is (the same checks,
/// refusals and limits), in storage from the worker's pools.
fn lay_out(
    ctx: &WorkerContext,
    request: &http::Request<()>,
    end_stream: bool,
    limits: &Limits,
) -> Result<RequestHead, LayoutError> {
    let uri = request.uri();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let pseudo = [
        (&b":method"[..], request.method().as_str().as_bytes()),
        (b":scheme", uri.scheme_str().unwrap_or("https").as_bytes()),
        (b":path", path.as_bytes()),
    ];
    let authority = uri.authority().map(|a| (&b":authority"[..], a.as_str().as_bytes()));
    let fields = pseudo.into_iter().chain(authority).chain(
        request
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
    );
    let storage = ctx.http.take_head_storage();
    match lay_out_request(fields, end_stream, &[0; 24], limits, storage) {
        Ok((mut head, _)) => {
            head.protocol = Protocol::Http3;
            Ok(head)
        }
        Err((e, (bytes, list))) => {
            ctx.http.give_write_buffer(bytes);
            ctx.http.give_field_list(list);
            Err(e)
        }
    }
}

/// Trailer fields as packed bytes and ranges.
pub(super) fn pack(map: &http::HeaderMap) -> Trailers {
    let mut bytes = Vec::new();
    let list = map
        .iter()
        .map(|(n, v)| Field::append(&mut bytes, n.as_str().as_bytes(), v.as_bytes()))
        .collect();
    (bytes, list)
}

impl H3Stream<'_> {
    /// Ends the stream after the request was handled: finished where the response is whole
    /// (all of a known length sent, or an unknown length the upstream ended without error),
    /// reset where it failed or never began.
    async fn end(&mut self, rctx: &RequestContext) {
        if self.ended {
            return;
        }
        self.ended = true;
        let whole = self.left == Some(0) || (self.left.is_none() && rctx.error.is_none());
        if !self.head_sent || !whole {
            let code = match rctx.error {
                Some(HttpError::ClientGone) => code::REQUEST_CANCELLED,
                _ => code::INTERNAL_ERROR,
            };
            self.send.stop_stream(h3::error::Code::from(u64::from(code)));
            return;
        }
        let finish = self.send.finish();
        let _ = tokio::time::timeout(self.send_timeout, finish).await;
    }
}

impl<'c> ClientSide for H3Stream<'c> {
    type Down<'b>
        = H3Downstream<'b, 'c>
    where
        Self: 'b;

    fn downstream<'b>(
        &'b mut self,
        _inbuf: &'b mut IoBuf,
        _out: &'b mut Vec<u8>,
        _state: &'b HttpWorkerState,
        terms: ClientTerms,
    ) -> H3Downstream<'b, 'c> {
        H3Downstream {
            s: self,
            body_timeout: terms.body_timeout,
            head_only: terms.head_only,
        }
    }

    fn scheme(&self) -> &'static str {
        "https"
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

    fn protocol(&self, _: rampart_proto::h1::Version) -> Protocol {
        Protocol::Http3
    }

    /// No tunnels over HTTP/3 (its extended CONNECT, RFC 9220, is not offered): nothing moves.
    async fn tunnel(&mut self, _: &WorkerContext, _: &mut Stream, _: Duration, _: usize) -> (u64, u64) {
        (0, 0)
    }
}
