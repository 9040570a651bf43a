//! The internal client: requests Rampart makes itself (a mirror's copy, a `forward_auth` check,
//! an active HTTP health check, a JWKS fetch; later a cache's revalidation, any background
//! request with no client) sent to an upstream of the snapshot
//! through the exchange ([`crate::http::exchange::proxy`]), so they get what client requests get:
//! pooled connections, TLS, HTTP/2 (h2c, h2, `auto` by ALPN), DNS targets, the balancer, retries,
//! the upstream's timeouts, its metrics and outlier detection. A request pinned to one target
//! ([`InternalOptions::pinned`]) goes to it alone and counts as no traffic.
//!
//! The request is owned ([`InternalRequest`]: method, authority, path with query, fields, a body
//! as [`Bytes`] or none). [`send`] lays it out in the forms the upstream's protocol needs (HTTP/1.1
//! text, the fields head of an HTTP/2 stream: [`UpstreamHead`], as the request path does for a
//! client's request) and hands it to the exchange with a downstream side of its own
//! ([`collect::Collecting`]) that gives the body and collects the response: status, fields and
//! body up to a bound. [`spawn`] does the same on a task of its own, with only the worker's
//! context and a snapshot: a request that no client connection waits for.

use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;

use bytes::Bytes;
use rampart_model::filter::ResponseEdits;
use rampart_model::{Snapshot, UpstreamProtocol};
use rampart_proto::h1::{append_range, Field};
use rampart_proto::message::BodyLength;

use super::context::RequestContext;
use super::error::HttpError;
use super::exchange::{self, ProxyRequest};
use super::head_out::{FieldsHead, UpstreamHead};
use crate::worker::{SharedSnapshot, WorkerContext};

mod collect;

use collect::Collecting;

/// A request of Rampart's own, owning its bytes.
#[derive(Debug, Clone, Default)]
pub struct InternalRequest {
    pub method: Vec<u8>,
    /// The `Host` (HTTP/1) or `:authority` (HTTP/2); empty: the upstream's name.
    pub authority: Vec<u8>,
    /// Path and query (origin-form), or `*`.
    pub path: Vec<u8>,
    /// Header fields, in order. `Host` and the fields that frame the message or belong to a
    /// connection (`content-length`, `transfer-encoding`, `connection`, ...) are not taken from
    /// here: the client writes its own.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body (`None`: the request has none).
    pub body: Option<Bytes>,
}

/// How a request is sent and its answer kept.
#[derive(Debug, Clone, Copy)]
pub struct InternalOptions {
    /// What the request is for, where the exchange names the origin of a request in its logs
    /// (a client request's listener): `mirror`, `revalidation`.
    pub purpose: &'static str,
    /// The client the request is made for, named in a PROXY header to an upstream that wants one
    /// (`None`: 0.0.0.0:0).
    pub client: Option<SocketAddr>,
    /// Extra attempts after a failure the upstream's `retry_on` names.
    pub retries: usize,
    /// The most response body bytes read: past them the response is cut off
    /// ([`InternalError::TooLarge`]) and its connection closed.
    pub max_body: usize,
    /// Whether the body read is kept ([`InternalResponse::body`]) or only counted.
    pub keep_body: bool,
    /// The one target of the upstream the request goes to, down or not, and not counted as the
    /// upstream's traffic ([`ProxyRequest::pinned`]): a health check's. `None`: the balancer
    /// picks, as for a client's request.
    pub pinned: Option<usize>,
}

impl InternalOptions {
    /// `purpose`, no retry, the body kept up to `max_body` bytes.
    pub fn new(purpose: &'static str, max_body: usize) -> Self {
        InternalOptions {
            purpose,
            client: None,
            retries: 0,
            max_body,
            keep_body: true,
            pinned: None,
        }
    }
}

/// A whole response.
#[derive(Debug, Clone, Default)]
pub struct InternalResponse {
    pub status: u16,
    /// Its header fields as the upstream sent them (HTTP/2 names lowercase).
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body, when kept ([`InternalOptions::keep_body`]).
    pub body: Vec<u8>,
    /// The body's length as read.
    pub body_len: u64,
}

impl InternalResponse {
    /// The first value of field `name` (case-insensitive).
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| &v[..])
    }
}

/// Why a request got no whole response. Messages hold no response content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InternalError {
    #[error("no upstream {0} in the snapshot")]
    NoUpstream(usize),
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    #[error("no worker to run the request on")]
    NoWorker,
    /// No response head (the exchange's failure: connect, TLS, reset, timeout...).
    #[error("no response: {0}")]
    NoResponse(HttpError),
    #[error("status {status}: body larger than {max} bytes")]
    TooLarge { status: u16, max: usize },
    /// The response head came, its body failed.
    #[error("status {status}: response cut: {error}")]
    Cut { status: u16, error: HttpError },
}

impl InternalError {
    /// The status of the response head, when one came.
    pub fn status(&self) -> Option<u16> {
        match *self {
            InternalError::TooLarge { status, .. } | InternalError::Cut { status, .. } => Some(status),
            _ => None,
        }
    }
}

/// Sends `request` to upstream `upstream` of `snapshot` through the exchange and collects the
/// response. The upstream's own timeouts bound it (connect, response head, body reads, its
/// `request_timeout`). With [`InternalOptions::pinned`], to that target only.
pub async fn send(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    upstream: usize,
    request: &InternalRequest,
    options: &InternalOptions,
) -> Result<InternalResponse, InternalError> {
    let up = snapshot
        .upstreams
        .get(upstream)
        .ok_or(InternalError::NoUpstream(upstream))?;
    check(request)?;
    let authority = match &request.authority[..] {
        b"" => up.name.as_bytes(),
        given => given,
    };
    let protocol = up.http.protocol;
    let text =
        matches!(protocol, UpstreamProtocol::Http1 | UpstreamProtocol::Auto).then(|| write_text(request, authority));
    let laid = (protocol != UpstreamProtocol::Http1).then(|| LaidOut::new(request, authority));
    let head = UpstreamHead {
        text: text.as_deref(),
        fields: laid.as_ref().map(LaidOut::head),
    };
    let method = &request.method[..];
    let ops = ResponseEdits::default();
    let req = ProxyRequest {
        snapshot,
        listener_name: options.purpose,
        upstream,
        up,
        client: options.client.unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
        local: None,
        hash_key: 0,
        idempotent: matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"),
        head_method: method == b"HEAD",
        body: match &request.body {
            Some(body) if !body.is_empty() => BodyLength::Exact(body.len() as u64),
            _ => BodyLength::None,
        },
        expect_continue: false,
        upgrade: false,
        response_ops: &ops,
        sticky_target: None,
        retries: options.retries,
        retry_on: up.http.retry_on,
        mirror: None,
        pinned: options.pinned,
    };
    let mut down = Collecting::new(request.body.clone(), options.max_body, options.keep_body);
    let mut rctx = RequestContext::new(false);
    // Not an upgrade: no tunnel comes back.
    let _ = exchange::proxy(ctx, &req, &mut down, head, &mut rctx).await;
    if req.counted() {
        crate::http::attempts::observe::request_ended(ctx, snapshot, &rctx);
    }
    down.finish(rctx.error)
}

/// Sends `request` as [`send`] does, on a task of its own on this worker: no client connection
/// waits for it, and `done` gets its outcome. Fails at once (and `done` is not called) when the
/// worker's context cannot be held by a task (one not made by [`WorkerContext::shared`]). Call it
/// on a worker (inside its `LocalSet`).
pub fn spawn(
    ctx: &WorkerContext,
    snapshot: Rc<SharedSnapshot>,
    upstream: usize,
    request: InternalRequest,
    options: InternalOptions,
    done: impl FnOnce(Result<InternalResponse, InternalError>) + 'static,
) -> Result<(), InternalError> {
    let worker = ctx.handle().ok_or(InternalError::NoWorker)?;
    if snapshot.upstreams.get(upstream).is_none() {
        return Err(InternalError::NoUpstream(upstream));
    }
    tokio::task::spawn_local(async move {
        done(send(&worker, &snapshot, upstream, &request, &options).await);
    });
    Ok(())
}

/// Whether `name` is one the client writes itself (or drops): `Host`, the framing, and the
/// connection's own fields.
fn written_by_the_client(name: &[u8]) -> bool {
    const OURS: &[&[u8]] = &[
        b"host",
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"upgrade",
        b"expect",
        b"trailer",
    ];
    OURS.iter().any(|o| o.eq_ignore_ascii_case(name))
}

fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn valid_value(value: &[u8]) -> bool {
    value.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Refuses what cannot be written as a request head: a method that is no token, a path that is
/// neither origin-form nor `*` or that holds a space or control byte, an authority or a field that would break a
/// line.
fn check(request: &InternalRequest) -> Result<(), InternalError> {
    if !is_token(&request.method) {
        return Err(InternalError::Invalid("method"));
    }
    // Origin-form, or `*` (asterisk-form, an `OPTIONS` for the whole server).
    let form = request.path.first() == Some(&b'/') || request.path == b"*";
    let path_ok = form && request.path.iter().all(|&b| b > 0x20 && b != 0x7f);
    if !path_ok {
        return Err(InternalError::Invalid("path"));
    }
    if !request.authority.iter().all(|&b| b > 0x20 && b != 0x7f) {
        return Err(InternalError::Invalid("authority"));
    }
    if request
        .fields
        .iter()
        .any(|(name, value)| !is_token(name) || !valid_value(value))
    {
        return Err(InternalError::Invalid("header field"));
    }
    Ok(())
}

/// The fields to send after `Host`: the request's own (less those the client writes), then the
/// body's length.
fn each_field(request: &InternalRequest, mut each: impl FnMut(&[u8], &[u8])) {
    for (name, value) in request.fields.iter().filter(|(n, _)| !written_by_the_client(n)) {
        each(name, value);
    }
    if let Some(body) = &request.body {
        each(b"content-length", body.len().to_string().as_bytes());
    }
}

/// The request as HTTP/1.1 text.
fn write_text(request: &InternalRequest, authority: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    out.extend_from_slice(&request.method);
    out.push(b' ');
    out.extend_from_slice(&request.path);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    line(&mut out, b"host", authority);
    each_field(request, |name, value| line(&mut out, name, value));
    out.extend_from_slice(b"\r\n");
    out
}

/// The request laid out as fields, for an HTTP/2 upstream (`host` first: it becomes the
/// `:authority`).
struct LaidOut {
    buf: Vec<u8>,
    fields: Vec<Field>,
    method: (u32, u32),
    target: (u32, u32),
}

impl LaidOut {
    fn new(request: &InternalRequest, authority: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(256);
        let mut fields = Vec::with_capacity(request.fields.len() + 2);
        let method = append_range(&mut buf, &request.method);
        let target = append_range(&mut buf, &request.path);
        fields.push(Field::append(&mut buf, b"host", authority));
        each_field(request, |name, value| fields.push(Field::append(&mut buf, name, value)));
        LaidOut {
            buf,
            fields,
            method,
            target,
        }
    }

    fn head(&self) -> FieldsHead<'_> {
        FieldsHead {
            buf: &self.buf,
            method: self.method,
            target: self.target,
            fields: &self.fields,
        }
    }
}

#[cfg(test)]
mod tests;
