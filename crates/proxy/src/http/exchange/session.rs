//! The connection one attempt of a request goes on ([`UpstreamSession`]): HTTP/1 (a connection
//! of the attempt's own, pooled between requests) or HTTP/2 (a stream on a connection the
//! worker's requests share). The upstream's `protocol` decides which, and for `auto` the ALPN
//! of the connect. The attempt itself is written once per protocol (`upstream_h1`,
//! `upstream_h2`) against this one interface; a third protocol adds a variant here.

use rampart_model::UpstreamProtocol;

use super::{pool_key, ProxyRequest};
use crate::balance::Tried;
use crate::connect::{connect_pinned, connect_upstream, proxy_header, ConnectFailure, ConnectFor};
use crate::http::attempts::observe::connect_failed;
use crate::http::context::RequestContext;
use crate::http::error::HttpError;
use crate::http::h2pool::{handshake, H2Conn, H2Pool};
use crate::stream::Stream;
use crate::worker::{bump, WorkerContext};

/// A connection to a target, in the protocol it speaks.
pub(super) enum UpstreamSession {
    Http1(Stream),
    Http2(H2Conn),
}

/// The session an attempt goes on, and to which target.
pub(super) struct Session {
    pub target: usize,
    /// An earlier request used the connection.
    pub reused: bool,
    /// How long the connect took (a new connection).
    pub connect: Option<std::time::Duration>,
    pub conn: UpstreamSession,
}

/// Why no session was had: `target` is the one whose connection failed after the connect (an
/// HTTP/2 handshake), `None` when the connect itself failed on every target it tried.
pub(super) struct NoSession {
    pub target: Option<usize>,
    pub error: HttpError,
}

/// A pooled session to target `choice` for `req`: a shared HTTP/2 connection first, then an
/// idle HTTP/1 one (as the upstream's protocol allows).
pub(super) fn pooled(ctx: &WorkerContext, req: &ProxyRequest<'_>, choice: usize) -> Option<Session> {
    let up = req.upstream();
    let protocol = up.http.protocol;
    let key = pool_key(req, choice)?;
    let pooled = match protocol {
        UpstreamProtocol::Http1 => None,
        _ => ctx.http.h2_pool.borrow_mut().get(&key).map(UpstreamSession::Http2),
    };
    let conn = pooled.or_else(|| match protocol {
        UpstreamProtocol::H2 | UpstreamProtocol::H2c => None,
        _ => ctx
            .http
            .pool
            .borrow_mut()
            .take(&key, up.http.pool_idle_timeout)
            .map(UpstreamSession::Http1),
    })?;
    bump(&ctx.counters.upstream_reuses, 1);
    Some(Session {
        target: choice,
        reused: true,
        connect: None,
        conn,
    })
}

/// A session on a new connection (to `choice`, or another target if its connect fails), in the
/// protocol the upstream speaks (for `auto`, the one ALPN chose). Each target whose connect fails
/// on the way is recorded in `rctx` as an attempt.
pub(super) async fn open(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    choice: usize,
    tried: &mut Tried,
    rctx: &mut RequestContext,
) -> Result<Session, NoSession> {
    let up = req.upstream();
    let protocol = up.http.protocol;
    // HTTP/2 connections are shared: while another request connects to this target, wait for
    // its connection (at most the connect timeout) rather than open one more.
    let mut _connecting = None;
    if let (UpstreamProtocol::H2 | UpstreamProtocol::H2c, Some(key)) = (protocol, pool_key(req, choice)) {
        loop {
            if let Some(guard) = H2Pool::begin_connect(&ctx.http.h2_pool, key) {
                _connecting = Some(guard);
                break;
            }
            let Some(done) = ctx.http.h2_pool.borrow().connecting(&key) else {
                continue;
            };
            let waited = tokio::time::timeout(up.connect_timeout, done.notified()).await;
            if let Some(session) = pooled(ctx, req, choice) {
                return Ok(session);
            }
            if waited.is_err() {
                break;
            }
        }
    }
    let began = std::time::Instant::now();
    let (target, stream) = connect(ctx, req, choice, tried, rctx)
        .await
        .map_err(|error| NoSession { target: None, error })?;
    let connect = Some(began.elapsed());
    let http2 = match protocol {
        UpstreamProtocol::Http1 => false,
        UpstreamProtocol::H2 | UpstreamProtocol::H2c => true,
        UpstreamProtocol::Auto => stream.tls_info().is_some_and(|t| t.alpn == Some(b"h2")),
    };
    if !http2 {
        return Ok(Session {
            target,
            reused: false,
            connect,
            conn: UpstreamSession::Http1(stream),
        });
    }
    // The preface goes with the first request's HEADERS: a server that does not speak HTTP/2
    // fails that request's stream.
    let conn = handshake(stream);
    if let Some(key) = pool_key(req, target) {
        ctx.http.h2_pool.borrow_mut().add(key, conn.clone());
    }
    Ok(Session {
        target,
        reused: false,
        connect,
        conn: UpstreamSession::Http2(conn),
    })
}

/// A new upstream connection, starting with target `first` (only to it, for a pinned request);
/// it begins with a PROXY header when the upstream wants one.
pub(super) async fn connect(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    first: usize,
    tried: &mut Tried,
    rctx: &mut RequestContext,
) -> Result<(usize, Stream), HttpError> {
    let header = req
        .upstream()
        .send_proxy_protocol
        .map(|version| proxy_header(version, req.client, req.local.unwrap_or(req.client)));
    if let Some(pinned) = req.pinned {
        let began = std::time::Instant::now();
        let conn = connect_pinned(req.snapshot, req.upstream, pinned, header.as_deref()).await;
        return match conn {
            Ok(conn) => Ok((pinned, conn)),
            Err(failure) => {
                connect_failed(rctx, pinned, as_error(failure), began.elapsed());
                Err(as_error(failure))
            }
        };
    }
    let whom = ConnectFor {
        listener: req.listener_name,
        client: req.client.ip(),
        key: req.hash_key,
        proxy_header: header.as_deref(),
        outcome: "answering the request with an error",
    };
    let mut failed = |target, failure, took| connect_failed(rctx, target, as_error(failure), took);
    let (target, conn) = connect_upstream(
        ctx,
        req.snapshot,
        req.upstream,
        &whom,
        (Some(first), tried),
        &mut failed,
    )
    .await
    .map_err(as_error)?;
    bump(&ctx.counters.upstream_connects, 1);
    Ok((target, conn))
}

/// A connect failure as the request's error.
fn as_error(failure: ConnectFailure) -> HttpError {
    match failure {
        ConnectFailure::NoHealthyTarget => HttpError::NoHealthyTarget,
        ConnectFailure::Failed { timed_out: true } => HttpError::ConnectTimeout,
        ConnectFailure::Failed { timed_out: false } => HttpError::ConnectFailed,
        ConnectFailure::Tls => HttpError::UpstreamTls,
    }
}
