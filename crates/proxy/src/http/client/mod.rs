//! The internal client: requests Rampart makes itself (a mirror's copy, a `forward_auth` check,
//! an active HTTP health check, a JWKS fetch; later a cache's revalidation, any background
//! request with no client) sent to an upstream of the snapshot
//! through the exchange ([`crate::http::exchange::proxy`]), so they get what client requests get:
//! pooled connections, TLS, HTTP/2 (h2c, h2, `auto` by ALPN), DNS targets, the balancer, retries,
//! the upstream's timeouts, its metrics and outlier detection. A request pinned to one target
//! ([`InternalOptions::pinned`]) goes to it alone and counts as no traffic.
//!
//! The request is the owned request head every request is ([`RequestHead`], made by
//! [`request_head`] or copied from a client's request), with a body as [`Bytes`] or none.
//! [`send`] hands it to the exchange through the same edit view a client's request has
//! ([`RequestParts`], which writes it in the form each attempt's connection speaks), with a
//! downstream side of its own ([`collect::Collecting`]) that gives the body and collects the
//! response: status, fields and body up to a bound. [`spawn`] does the same on a task of its own, with only the worker's
//! context and a snapshot: a request that no client connection waits for.

use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;

use bytes::Bytes;
use std::borrow::Cow;

use rampart_model::filter::ResponseEdits;
use rampart_model::route::HeaderOps;
use rampart_model::{ForwardedHeaders, Snapshot};
use rampart_proto::message::{BodyLength, RequestHead, ResponseHead};

use super::context::RequestContext;
use super::error::HttpError;
use super::exchange::{self, ProxyRequest};
use super::head_out::{is_field_value, is_token, Forwarding, RequestParts};
use crate::worker::{SharedSnapshot, WorkerContext};

mod collect;

use collect::Collecting;

/// A request head of Rampart's own: `method`, `authority` (its `Host`; empty: the upstream's
/// name), `path` (origin-form with its query, or `*`) and `fields` in order. `Host` and the fields
/// that frame the message or belong to a connection (`content-length`, `transfer-encoding`,
/// `connection`, ...) are not taken from the fields when it is sent: the client writes its own.
/// Refused when it cannot be written as a request head (see [`check`]).
pub fn request_head<N: AsRef<[u8]>, V: AsRef<[u8]>>(
    method: &[u8],
    authority: &[u8],
    path: &[u8],
    fields: impl IntoIterator<Item = (N, V)>,
) -> Result<RequestHead, InternalError> {
    let mut head = RequestHead::with_storage(Vec::with_capacity(256), Vec::new());
    head.method = head.append(method);
    head.target = head.append(path);
    if !authority.is_empty() {
        head.host = Some(head.push_field(b"host", authority).value);
    }
    for (name, value) in fields {
        head.push_field(name.as_ref(), value.as_ref());
    }
    head.keep_alive = true;
    check(&head)?;
    Ok(head)
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
    /// Whether the body read is kept ([`Collected::body`]) or only counted.
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

/// A field's name and value, owned.
pub type OwnedField = (Box<[u8]>, Box<[u8]>);

/// A whole response as the internal client collected it: its head, owned, and its body.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// The head as the upstream sent it (an HTTP/2 head's names lowercase).
    pub head: ResponseHead,
    /// The body, when kept ([`InternalOptions::keep_body`]).
    pub body: Vec<u8>,
    /// The body's length as read.
    pub body_len: u64,
    /// The trailers that ended the body, if any (names as the upstream sent them).
    pub trailers: Vec<OwnedField>,
}

impl Collected {
    pub fn status(&self) -> u16 {
        self.head.status
    }

    /// The first value of field `name` (case-insensitive).
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.head.field(name.as_bytes())
    }

    /// The first value of trailer `name` (case-insensitive).
    pub fn trailer(&self, name: &str) -> Option<&[u8]> {
        self.trailers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| &**v)
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

/// Sends `head` (and `body`, when there is one) to upstream `upstream` of `snapshot` through the
/// exchange and collects the response. The upstream's own timeouts bound it (connect, response
/// head, body reads, its `request_timeout`). With [`InternalOptions::pinned`], to that target
/// only.
pub async fn send(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    upstream: usize,
    head: &RequestHead,
    body: Option<Bytes>,
    options: &InternalOptions,
) -> Result<Collected, InternalError> {
    let up = snapshot
        .upstreams
        .get(upstream)
        .ok_or(InternalError::NoUpstream(upstream))?;
    check(head)?;
    let body_length = match &body {
        Some(body) if !body.is_empty() => BodyLength::Exact(body.len() as u64),
        _ => BodyLength::None,
    };
    let no_edits = HeaderOps::default();
    let mut parts = RequestParts::of(head, Cow::Borrowed(&no_edits), Some(upstream));
    parts.body = body_length;
    let forwarding = Forwarding {
        host: head.host(),
        replace_host: false,
        default_host: &up.name,
        client_ip: "",
        scheme: if up.tls.is_some() { "https" } else { "http" },
        forwarded: ForwardedHeaders::Off,
        client_cert: None,
        internal: true,
        trace: None,
    };
    parts.forwarding = Some(&forwarding);
    let method = head.method();
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
        body: body_length,
        expect_continue: false,
        upgrade: false,
        response_ops: &ops,
        sticky_target: None,
        retries: options.retries,
        retry_on: up.http.retry_on,
        mirror: None,
        pinned: options.pinned,
    };
    let mut down = Collecting::new(body, options.max_body, options.keep_body);
    let mut rctx = RequestContext::new(false);
    // Not an upgrade: no tunnel comes back.
    let _ = exchange::proxy(ctx, &req, &mut down, &parts, &mut rctx).await;
    if req.counted() {
        crate::http::attempts::observe::request_ended(ctx, snapshot, &rctx);
    }
    down.finish(rctx.error)
}

/// Sends `head` as [`send`] does, on a task of its own on this worker: no client connection
/// waits for it, and `done` gets its outcome. Fails at once (and `done` is not called) when the
/// worker's context cannot be held by a task (one not made by [`WorkerContext::shared`]). Call it
/// on a worker (inside its `LocalSet`).
pub fn spawn(
    ctx: &WorkerContext,
    snapshot: Rc<SharedSnapshot>,
    upstream: usize,
    head: RequestHead,
    body: Option<Bytes>,
    options: InternalOptions,
    done: impl FnOnce(Result<Collected, InternalError>) + 'static,
) -> Result<(), InternalError> {
    let worker = ctx.handle().ok_or(InternalError::NoWorker)?;
    if snapshot.upstreams.get(upstream).is_none() {
        return Err(InternalError::NoUpstream(upstream));
    }
    tokio::task::spawn_local(async move {
        done(send(&worker, &snapshot, upstream, &head, body, &options).await);
    });
    Ok(())
}

/// Refuses what cannot be written as a request head: a method that is no token, a path that is
/// neither origin-form nor `*` or that holds a space or control byte, an authority or a field
/// that would break a line.
fn check(head: &RequestHead) -> Result<(), InternalError> {
    if !is_token(head.method()) {
        return Err(InternalError::Invalid("method"));
    }
    // Origin-form, or `*` (asterisk-form, an `OPTIONS` for the whole server).
    let path = head.target();
    let form = path.first() == Some(&b'/') || path == b"*";
    let path_ok = form && path.iter().all(|&b| b > 0x20 && b != 0x7f);
    if !path_ok {
        return Err(InternalError::Invalid("path"));
    }
    if !head.host().unwrap_or_default().iter().all(|&b| b > 0x20 && b != 0x7f) {
        return Err(InternalError::Invalid("authority"));
    }
    if head
        .pairs()
        .any(|(name, value)| !is_token(name) || !is_field_value(value))
    {
        return Err(InternalError::Invalid("header field"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
