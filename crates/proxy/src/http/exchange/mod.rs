//! One proxied request: attempts, each on an upstream session (a pooled or new connection, HTTP/1
//! or an HTTP/2 stream: `session`), the request out and the response back through the
//! [`Downstream`] side, written once per protocol (`upstream_h1`, `upstream_h2`). Failures are
//! [`HttpError`]s; the ones that allow it are retried on another connection before any response
//! byte, by `Exchange`, which holds what the attempts share.

use std::net::SocketAddr;

use rampart_model::filter::ResponseEdits;
use rampart_model::metrics::UpstreamCells;
use rampart_model::retry::{RetryOn, RouteRetry};
use rampart_model::{Snapshot, Upstream};
use rampart_proto::message::BodyLength;

use super::attempts::{observe, Attempt};
use super::context::RequestContext;
use super::downstream::{answer_error, Downstream};
use super::error::HttpError;
use super::head_out::RequestParts;
use super::pool::PoolKey;
use crate::balance::Tried;
use crate::connect::no_target_key;
use crate::stream::Stream;
use crate::worker::WorkerContext;

mod choice;
mod kept_body;
mod response;
mod session;
mod upstream_h1;
mod upstream_h2;

use choice::response_edits;
pub use choice::sticky_target;
use kept_body::KeptBody;
use session::{NoSession, Session, UpstreamSession};

/// What the session knows about the request being proxied.
pub struct ProxyRequest<'a> {
    pub snapshot: &'a Snapshot,
    pub listener_name: &'a str,
    /// The upstream's index in the snapshot (the worker's balancer state is kept by it) and the
    /// upstream itself, looked up once when the request was routed.
    pub upstream: usize,
    pub up: &'a Upstream,
    /// The client (from a PROXY header when one named it).
    pub client: SocketAddr,
    /// The address the client connected to, for PROXY headers to the upstream.
    pub local: Option<SocketAddr>,
    /// The consistent-hashing key of this request (see [`crate::balance::HashKey`]).
    pub hash_key: u64,
    pub idempotent: bool,
    pub head_method: bool,
    /// The request body's length.
    pub body: BodyLength,
    pub expect_continue: bool,
    pub upgrade: bool,
    /// The response header edits every response starts with (the route's static edits).
    pub response_ops: &'a ResponseEdits,
    /// The target the request's sticky cookie names, when the upstream has `sticky_cookie` and
    /// the cookie names one of its targets.
    pub sticky_target: Option<usize>,
    /// Extra attempts and what they are made for: the route's `retries` and `retry_on`, else
    /// the upstream's.
    pub retries: usize,
    pub retry_on: RetryOn,
    /// The route's mirror, when it copies this request and its body (sent once the exchange has
    /// sent the body; a bodiless request is copied before the exchange).
    pub mirror: Option<&'a rampart_model::split::Mirror>,
    /// A request of Rampart's own pinned to this one target (a health check's): it goes there
    /// and nowhere else, down or not (no pick, no limits or queue, no connect to another target,
    /// a retry only on the same target), and it is not traffic: no target metrics, no outlier
    /// detection, no pass-over, no retry budget, no load or latency for the balancer. Its
    /// attempts are recorded in the request's context all the same.
    pub pinned: Option<usize>,
}

impl ProxyRequest<'_> {
    /// The retries of a request to `up` on a route with `route`'s retry settings.
    pub fn retry_settings(up: &Upstream, route: RouteRetry) -> (usize, RetryOn) {
        (
            route.retries.unwrap_or(up.http.retries),
            route.retry_on.unwrap_or(up.http.retry_on),
        )
    }

    fn upstream(&self) -> &Upstream {
        self.up
    }

    /// Whether the request counts as the upstream's traffic (it is not [`ProxyRequest::pinned`]).
    pub(crate) fn counted(&self) -> bool {
        self.pinned.is_none()
    }
}

/// Proxies one request whose head's edit view is `head` and whose body (if any) starts in the
/// downstream's buffer. Returns the upstream connection when the response was a `101` that
/// turned both connections into a tunnel, which the caller runs.
///
/// With a `request_timeout` on the upstream, the whole exchange (connect, request, response head
/// and body) must end in time: a timeout before the response head got to the client is a 504,
/// one after it closes the client connection. A tunnel runs outside it.
pub async fn proxy<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    head: &RequestParts<'_>,
    rctx: &mut RequestContext,
) -> Option<Stream> {
    let Some(limit) = req.upstream().http.request_timeout else {
        return exchange(ctx, req, down, head, rctx).await;
    };
    let finished = tokio::time::timeout(limit, exchange(ctx, req, down, head, rctx)).await;
    match finished {
        Ok(tunnel) => tunnel,
        Err(_) => {
            // The exchange is gone; what it recorded in the context is still there. An attempt
            // still waiting for its response head failed with the timeout (one whose head came
            // failed after it: the request's end counts that).
            observe::attempt_ended(ctx, req, rctx, HttpError::RequestTimeout, limit);
            answer_error(down, rctx, HttpError::RequestTimeout).await;
            None
        }
    }
}

async fn exchange<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    head: &RequestParts<'_>,
    rctx: &mut RequestContext,
) -> Option<Stream> {
    let up = req.upstream();
    let cells = up.metrics.worker(ctx.id);
    // The request's share of a retry, in this worker's budget account (until it ends).
    let _in_budget = req.counted().then(|| observe::exchange_started(up, cells));
    let mut exchange = Exchange {
        ctx,
        req,
        down,
        head,
        rctx,
        tried: Tried::default(),
        maybe_stale: None,
        retries_left: req.retries,
        sent_continue: false,
        cells,
        kept: KeptBody::new(req),
    };
    let tunnel = exchange.run().await;
    if let Some(mirror) = req.mirror {
        let body = crate::http::mirror::CopyBody::Kept(exchange.kept.whole());
        crate::http::mirror::copy(ctx, req.snapshot, mirror, exchange.head, body);
    }
    tunnel
}

/// One proxied request's attempts: where they went, how many retries are left.
struct Exchange<'e, 'r, D> {
    ctx: &'e WorkerContext,
    req: &'e ProxyRequest<'r>,
    down: &'e mut D,
    /// The request head's edit view: each attempt writes the head to send from it.
    head: &'e RequestParts<'e>,
    rctx: &'e mut RequestContext,
    /// Targets that failed this request (a balancer picks among the others).
    tried: Tried,
    /// A target among them that failed only by a reset on a pooled connection (which may have
    /// been the connection's fault): tried again, on a new connection, when no other is left.
    maybe_stale: Option<usize>,
    retries_left: usize,
    /// Rampart answered `100 Continue` itself.
    sent_continue: bool,
    /// This worker's cells of the upstream (the retry budget's account among them).
    cells: &'e UpstreamCells,
    /// The request body as far as it was sent, kept for a retry.
    kept: KeptBody,
}

/// How one attempt ended.
enum Attempted {
    /// The response went to the client (or failed after its head; the context says so); a 101
    /// leaves the upstream connection for the tunnel.
    Done(Option<Stream>),
    /// Nothing of the response reached the client.
    Failed {
        target: usize,
        error: HttpError,
        /// On a connection an earlier request had used.
        reused: bool,
    },
}

impl<'e, D: Downstream> Exchange<'e, '_, D> {
    /// Attempts the request until one attempt answers it, or none may follow: then the error's
    /// answer goes to the client.
    async fn run(&mut self) -> Option<Stream> {
        let up = self.req.upstream();
        // A target that refused a stream unprocessed (HTTP/2) is tried again on another connection.
        let mut again = None;
        loop {
            let (choice, _slot) = match self.next_target(again.take()).await {
                Ok(Some(picked)) => picked,
                Ok(None) if self.maybe_stale.is_some() => {
                    // No other target left: the one whose pooled connection broke, anew.
                    again = self.maybe_stale.take();
                    continue;
                }
                Ok(None) => {
                    let error = self.nothing_to_pick();
                    answer_error(self.down, self.rctx, error).await;
                    return None;
                }
                Err(error) => {
                    answer_error(self.down, self.rctx, error).await;
                    return None;
                }
            };
            // The clock is read only for what needs an attempt's time: a latency-aware balancer.
            let began = up.policy.uses_latency().then(std::time::Instant::now);
            let elapsed = || began.map_or(std::time::Duration::ZERO, |b| b.elapsed());
            let recorded = usize::from(self.rctx.attempts.made());
            let session = match session::pooled(self.ctx, self.req, choice) {
                Some(session) => Ok(session),
                None => session::open(self.ctx, self.req, choice, &mut self.tried, self.rctx).await,
            };
            // Targets whose connect failed on the way were recorded as attempts: the filters'
            // phase for each.
            for index in recorded..usize::from(self.rctx.attempts.made()) {
                if let Some(failed) = self.rctx.attempts.get(index) {
                    self.down.upstream_error(up, failed);
                }
            }
            let attempted = match session {
                Ok(session) => {
                    // A connection to a target: an outage of this upstream (if one was being
                    // counted) is over. (Not at the pick: a target out of its backoff may fail
                    // again.)
                    if self.req.counted() {
                        self.ctx.log_summary.recovered(|| no_target_key(&up.name));
                    }
                    // One attempt, whichever protocol the session speaks.
                    let Session {
                        target,
                        reused,
                        connect,
                        conn,
                    } = session;
                    let attempt = Attempt::new(target, reused, connect);
                    let _in_flight = observe::attempt_started(self.ctx, self.req, self.rctx, attempt);
                    // The filters' upstream-request phase, for this attempt's target.
                    let base = self.head;
                    let edited = self.down.upstream_request(up, target, base);
                    let head = edited.as_ref().unwrap_or(base);
                    let result = match conn {
                        UpstreamSession::Http2(conn) => self.over_http2(head, &conn).await.map(|()| None),
                        UpstreamSession::Http1(conn) => self.over_http1(head, target, conn).await,
                    };
                    match result {
                        Ok(tunnel) => Attempted::Done(tunnel),
                        Err(error) => Attempted::Failed { target, error, reused },
                    }
                }
                // The connect tried every target it could: nothing is left to retry on.
                Err(NoSession { target: None, error }) => {
                    answer_error(self.down, self.rctx, error).await;
                    return None;
                }
                Err(NoSession {
                    target: Some(target),
                    error,
                }) => {
                    // Connected, but the HTTP/2 handshake failed: an attempt at that target.
                    let attempt = Attempt::new(target, false, None);
                    drop(observe::attempt_started(self.ctx, self.req, self.rctx, attempt));
                    Attempted::Failed {
                        target,
                        error,
                        reused: false,
                    }
                }
            };
            let (target, error, reused) = match attempted {
                Attempted::Done(tunnel) => return tunnel,
                Attempted::Failed { target, error, reused } => (target, error, reused),
            };
            // Past the client's deadline, a failure is the deadline: no retry.
            let error = self.rctx.blame(error);
            observe::attempt_ended(self.ctx, self.req, self.rctx, error, elapsed());
            // The filters' phase for an attempt that failed (one whose response was dropped for a
            // retry had its upstream-response phase).
            if let Some(attempt) = self.rctx.attempts.last().filter(|a| a.error().is_some()) {
                self.down.upstream_error(up, attempt);
            }
            // (A reset on a pooled connection may be that connection's, not the target's.)
            let maybe_stale = reused && !matches!(error, HttpError::UpstreamStatus { .. } | HttpError::UpstreamTimeout);
            let counted = self.req.counted();
            if counted && error.target_error().is_some() && !maybe_stale && error != HttpError::UpstreamRefused {
                // This worker's next requests go elsewhere first for a while.
                self.ctx.pass_over(self.req.snapshot, self.req.upstream, target);
            }
            // (A dropped response took its retry from the budget when it was dropped; a pinned
            // request's retries are outside the budget.)
            let dropped = matches!(error, HttpError::UpstreamStatus { .. });
            if !(self.retry_allowed(error) && self.retries_left > 0 && (dropped || !counted || self.take_budget())) {
                answer_error(self.down, self.rctx, error).await;
                return None;
            }
            self.retries_left -= 1;
            self.rctx.attempts.retried(error.reason());
            if counted {
                self.cells.retries.add(1);
            }
            if error == HttpError::UpstreamRefused {
                again = Some(target);
            } else {
                // The retry goes to a target this request has not been to.
                if maybe_stale && !self.tried.contains(target) {
                    self.maybe_stale = Some(target);
                }
                self.tried.push(target);
            }
        }
    }

    /// The error when the balancer has no target to give: none healthy (503, counted as an
    /// outage of the upstream), or every one already failed this request (502).
    fn nothing_to_pick(&self) -> HttpError {
        let (ctx, req) = (self.ctx, self.req);
        let up = req.upstream();
        if !self.tried.is_empty() {
            return HttpError::UpstreamUnavailable;
        }
        up.metrics.worker(ctx.id).no_target.add(1);
        ctx.log_summary
            .warn(no_target_key(&up.name), || crate::log_summary::Detail {
                listener: Some(req.listener_name.to_string()),
                message: format!(
                    "listener {}: no healthy target in upstream {}; answering 503",
                    req.listener_name, up.name
                ),
            });
        HttpError::NoHealthyTarget
    }
}

/// The pool key of a connection to `target` for this request (`None`: the upstream has no such
/// target, which no pick gives).
fn pool_key(req: &ProxyRequest<'_>, target: usize) -> Option<PoolKey> {
    let up = req.upstream();
    Some(PoolKey {
        target: up.targets.get(target)?.addr,
        proxied_client: up.send_proxy_protocol.map(|_| req.client),
        // The configuration's address: the snapshot that holds it outlives the pooled connection's
        // use under this key (a later configuration at the same address is a reload's, for the
        // same target).
        tls: up
            .tls
            .as_ref()
            .map_or(0, |t| std::sync::Arc::as_ptr(&t.config) as usize),
    })
}

#[cfg(test)]
mod tests;
