//! One proxied request: an upstream connection (pooled or new), the request out, the response
//! back through the [`Downstream`] side, and the decision whether the upstream connection goes
//! back to the pool. Failures are [`HttpError`]s; the ones that allow it are retried on another
//! connection before any response byte.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rampart_model::route::HeaderOps;
use rampart_model::{Snapshot, Upstream, UpstreamProtocol};
use rampart_proto::h1::{ChunkedDecoder, ChunkedProgress, Framing};

use super::context::RequestContext;
use super::downstream::{answer_error, Downstream};
use super::error::HttpError;
use super::filter::UpstreamHeadBuf;
use super::head_out::UpstreamHead;
use super::pool::PoolKey;
use crate::balance::{BalancePolicy, Tried};
use crate::connect::{connect_upstream, no_target_key, proxy_header, ConnectFailure, ConnectFor};
use crate::stream::Stream;
use crate::worker::{bump, WorkerContext};

mod response;
mod upstream_h2;

use response::{respond, Responded, Sent};
use upstream_h2::H2Outcome;

/// What the session knows about the request being proxied.
pub struct ProxyRequest<'a> {
    pub snapshot: &'a Snapshot,
    pub listener_name: &'a str,
    pub upstream: usize,
    /// The client (from a PROXY header when one named it).
    pub client: SocketAddr,
    /// The address the client connected to, for PROXY headers to the upstream.
    pub local: Option<SocketAddr>,
    /// The consistent-hashing key of this request (see [`crate::balance::HashKey`]).
    pub hash_key: u64,
    pub idempotent: bool,
    pub head_method: bool,
    pub framing: Framing,
    pub expect_continue: bool,
    pub upgrade: bool,
    /// The response header edits every response starts with (the route's static edits).
    pub response_ops: &'a HeaderOps,
}

impl ProxyRequest<'_> {
    /// Whether the request may be sent again after a failure that allows it: an idempotent
    /// request without a body.
    fn repeatable(&self) -> bool {
        self.idempotent && self.framing == Framing::None
    }

    fn upstream(&self) -> &Upstream {
        &self.snapshot.upstreams[self.upstream]
    }
}

/// Proxies one request whose upstream head is `head_out` and whose body (if any) starts in the
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
    head: UpstreamHead<'_>,
    rctx: &mut RequestContext,
) -> Option<Stream> {
    let Some(limit) = req.upstream().http.request_timeout else {
        return exchange(ctx, req, down, head, rctx).await;
    };
    let finished = tokio::time::timeout(limit, exchange(ctx, req, down, head, rctx)).await;
    match finished {
        Ok(tunnel) => tunnel,
        Err(_) => {
            // The exchange is gone; what it recorded in the context is still there.
            if let Some(target) = rctx.target {
                count_target_error(ctx, req.upstream(), target, HttpError::RequestTimeout);
            }
            answer_error(down, rctx, HttpError::RequestTimeout).await;
            None
        }
    }
}

async fn exchange<D: Downstream>(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    down: &mut D,
    head: UpstreamHead<'_>,
    rctx: &mut RequestContext,
) -> Option<Stream> {
    let up = req.upstream();
    let settings = up.http;
    let mut tried = Tried::default();
    let mut sent_continue = false;
    let mut retries_left = settings.retries;
    // A target that refused a stream unprocessed (HTTP/2) is tried again on another connection.
    let mut again = None;
    loop {
        // An upstream connection: a pooled one to the chosen target, or a new one.
        let picked = again
            .take()
            .or_else(|| ctx.pick(req.snapshot, req.upstream, req.hash_key, &tried));
        let Some(choice) = picked else {
            let error = if tried.is_empty() {
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
            } else {
                HttpError::UpstreamUnavailable
            };
            answer_error(down, rctx, error).await;
            return None;
        };
        let mut made = None;
        if settings.protocol != UpstreamProtocol::Http1 {
            match upstream_h2::attempt(ctx, req, down, head, rctx, choice, &mut tried).await {
                H2Outcome::Done => {
                    ctx.log_summary.recovered(|| no_target_key(&up.name));
                    return None;
                }
                H2Outcome::Http1 { target, conn } => made = Some((target, conn)),
                H2Outcome::Failed { target, error, reused } => {
                    // Past the client's deadline, a failure is the deadline: no retry.
                    let error = rctx.blame(error);
                    if let Some(target) = target {
                        count_target_error(ctx, up, target, error);
                    }
                    if retry_allowed(req, error) && retries_left > 0 {
                        retries_left -= 1;
                        up.metrics.worker(ctx.id).retries.add(1);
                        match (target, error) {
                            (Some(target), HttpError::UpstreamRefused) => again = Some(target),
                            (Some(target), _) if !reused => tried.push(target),
                            _ => {}
                        }
                        continue;
                    }
                    answer_error(down, rctx, error).await;
                    return None;
                }
            }
        }
        let pooled = match made {
            Some(_) => None,
            None => ctx
                .http
                .pool
                .borrow_mut()
                .take(&pool_key(req, choice), settings.pool_idle_timeout),
        };
        let (target, mut conn, reused) = match (made, pooled) {
            (Some((target, conn)), _) => (target, conn, false),
            (None, Some(conn)) => {
                bump(&ctx.counters.upstream_reuses, 1);
                up.targets[choice].metrics.worker(ctx.id).reused.add(1);
                (choice, conn, true)
            }
            (None, None) => match connect(ctx, req, choice, &mut tried).await {
                Ok((target, conn)) => (target, conn, false),
                Err(error) => {
                    answer_error(down, rctx, error).await;
                    return None;
                }
            },
        };
        rctx.target = Some(target);
        // A connection to a target: an outage of this upstream (if one was being counted) is
        // over. (Not at the pick: a target out of its backoff may fail again.)
        ctx.log_summary.recovered(|| no_target_key(&up.name));

        if req.expect_continue && !sent_continue && req.framing != Framing::None && down.body().is_empty() {
            if let Err(error) = down.send_continue().await {
                answer_error(down, rctx, error).await;
                return None;
            }
            sent_continue = true;
        }

        let _in_flight = InFlight::new(ctx, req, target);
        // Only a latency-aware balancer needs the time of an attempt that failed.
        let latency_aware = up.policy == BalancePolicy::P2cEwma;
        let started = latency_aware.then(Instant::now);
        // Fields are laid out only for `h2` and `h2c` upstreams, which never get here.
        let mut edited = UpstreamHeadBuf::default();
        let UpstreamHead::Text(head_out) = down.upstream_request(up, target, head, &mut edited) else {
            answer_error(down, rctx, HttpError::UpstreamUnavailable).await;
            return None;
        };
        let sent = send_request(req, &mut conn, down, head_out, settings.write_timeout).await;
        let result = match sent {
            Ok(()) => {
                // Nothing of the client's is needed while the upstream thinks: its buffer goes
                // back now (unless a pipelined request is waiting in it).
                down.body().release_if_empty(&ctx.http);
                let sent = Sent {
                    continued: sent_continue,
                };
                let responded = respond(ctx, req, &mut conn, down, sent, rctx).await;
                if let Some(started) = started {
                    let took = rctx.upstream_time.unwrap_or_else(|| started.elapsed());
                    ctx.observe_latency(req.snapshot, req.upstream, target, took);
                }
                responded
            }
            Err(error) => Err(error),
        };
        let result = result.map_err(|error| rctx.blame(error));
        if let Err(error) = result {
            count_target_error(ctx, up, target, error);
        }
        match result {
            Err(error) if retry_allowed(req, error) && retries_left > 0 => {
                retries_left -= 1;
                up.metrics.worker(ctx.id).retries.add(1);
                if !reused {
                    tried.push(target);
                }
            }
            Err(error) => {
                answer_error(down, rctx, error).await;
                return None;
            }
            Ok(Responded::Tunnel) => return Some(conn),
            Ok(Responded::Complete { reusable }) => {
                // A failure after the head reached the client is in the context.
                if let Some(error) = rctx.error {
                    count_target_error(ctx, up, target, error);
                }
                if reusable {
                    let max = settings.pool_max_idle;
                    ctx.http.pool.borrow_mut().put(pool_key(req, target), conn, max);
                }
                return None;
            }
        }
    }
}

/// Whether a request that failed with `error` may go again: a failure before the upstream can
/// have acted on it, for a request safe to repeat (any bodiless one when the upstream said it
/// left the request unprocessed).
fn retry_allowed(req: &ProxyRequest<'_>, error: HttpError) -> bool {
    error.retryable() && (req.repeatable() || (error == HttpError::UpstreamRefused && req.framing == Framing::None))
}

/// The pool key of a connection to `target` for this request.
fn pool_key(req: &ProxyRequest<'_>, target: usize) -> PoolKey {
    let up = req.upstream();
    PoolKey {
        target: up.targets[target].addr,
        proxied_client: up.send_proxy_protocol.map(|_| req.client),
        // The configuration's address: the snapshot that holds it outlives the pooled connection's
        // use under this key (a later configuration at the same address is a reload's, for the
        // same target).
        tls: up
            .tls
            .as_ref()
            .map_or(0, |t| std::sync::Arc::as_ptr(&t.config) as usize),
    }
}

/// A new upstream connection, starting with target `first`; it begins with a PROXY header when
/// the upstream wants one.
async fn connect(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    first: usize,
    tried: &mut Tried,
) -> Result<(usize, Stream), HttpError> {
    let header = req
        .upstream()
        .send_proxy_protocol
        .map(|version| proxy_header(version, req.client, req.local.unwrap_or(req.client)));
    let whom = ConnectFor {
        listener: req.listener_name,
        client: req.client.ip(),
        key: req.hash_key,
        proxy_header: header.as_deref(),
        outcome: "answering the request with an error",
    };
    let (target, conn) = connect_upstream(ctx, req.snapshot, req.upstream, &whom, Some(first), tried)
        .await
        .map_err(|failure| match failure {
            ConnectFailure::NoHealthyTarget => HttpError::NoHealthyTarget,
            ConnectFailure::Failed { timed_out: true } => HttpError::ConnectTimeout,
            ConnectFailure::Failed { timed_out: false } => HttpError::ConnectFailed,
            ConnectFailure::Tls => HttpError::UpstreamTls,
        })?;
    bump(&ctx.counters.upstream_connects, 1);
    Ok((target, conn))
}

/// Counts a failure of `target` in its error metrics (when it is the target's).
fn count_target_error(ctx: &WorkerContext, up: &Upstream, target: usize, error: HttpError) {
    if let Some(kind) = error.target_error() {
        up.targets[target].metrics.worker(ctx.id).error(kind).add(1);
    }
}

/// Counts a request in flight to a target: in its `active` gauge, and for the balancers that look
/// at load.
struct InFlight<'a> {
    ctx: &'a WorkerContext,
    snapshot: &'a Snapshot,
    upstream: usize,
    target: usize,
    load: bool,
}

impl<'a> InFlight<'a> {
    fn new(ctx: &'a WorkerContext, req: &ProxyRequest<'a>, target: usize) -> Self {
        let up = req.upstream();
        up.targets[target].metrics.worker(ctx.id).active.up();
        let load = up.policy.uses_load();
        if load {
            ctx.track_open(req.snapshot, req.upstream, target, true);
        }
        InFlight {
            ctx,
            snapshot: req.snapshot,
            upstream: req.upstream,
            target,
            load,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let up = &self.snapshot.upstreams[self.upstream];
        up.targets[self.target].metrics.worker(self.ctx.id).active.down();
        if self.load {
            self.ctx.track_open(self.snapshot, self.upstream, self.target, false);
        }
    }
}

/// Writes the head and streams the body to the upstream.
async fn send_request<D: Downstream>(
    req: &ProxyRequest<'_>,
    conn: &mut Stream,
    down: &mut D,
    head_out: &[u8],
    write_timeout: Duration,
) -> Result<(), HttpError> {
    let up_write = |result: std::io::Result<()>, body_sent: bool| match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(HttpError::UpstreamWriteTimeout),
        Err(_) => Err(HttpError::UpstreamWriteFailed { body_sent }),
    };
    up_write(conn.write_all_within(head_out, &[], write_timeout).await, false)?;
    match req.framing {
        Framing::None | Framing::UntilClose => Ok(()),
        Framing::Length(total) => {
            let mut left = total;
            while left > 0 {
                if down.body().is_empty() {
                    down.read_body().await?;
                }
                let take = (down.body().len() as u64).min(left) as usize;
                down.forwarding_body(take)?;
                let body = down.body();
                up_write(
                    conn.write_all_within(&body.filled()[..take], &[], write_timeout).await,
                    true,
                )?;
                body.consume(take);
                left -= take as u64;
            }
            Ok(())
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                if down.body().is_empty() {
                    down.read_body().await?;
                }
                let (used, progress) = decoder
                    .advance(down.body().filled())
                    .map_err(|_| HttpError::BadRequestBody)?;
                down.forwarding_body(used)?;
                let body = down.body();
                up_write(
                    conn.write_all_within(&body.filled()[..used], &[], write_timeout).await,
                    true,
                )?;
                body.consume(used);
                if progress == ChunkedProgress::Done {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
