//! One proxied request: an upstream connection (pooled or new), the request out, the response
//! back, and the decision whether both connections stay open.

use std::cell::Cell;
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use rampart_proto::h1::{ChunkedDecoder, ChunkedProgress, Framing};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::iobuf::IoBuf;
use crate::balance::{BalancePolicy, Tried};
use crate::connect::{connect_upstream, ConnectFailure, ConnectFor};
use crate::relay::{write_all, write_all_within};
use crate::worker::{bump, WorkerContext};
use rampart_model::route::HeaderOps;
use rampart_model::Snapshot;

mod response;

use response::{respond, ResponseFailure};

/// What the session knows about the request being proxied.
pub struct ProxyRequest<'a> {
    pub snapshot: &'a Snapshot,
    pub listener_name: &'a str,
    pub upstream: usize,
    pub client_ip: IpAddr,
    /// The consistent-hashing key of this request (see [`crate::balance::HashKey`]).
    pub hash_key: u64,
    pub idempotent: bool,
    pub head_method: bool,
    pub framing: Framing,
    pub expect_continue: bool,
    pub upgrade: bool,
    pub client_keep_alive: bool,
    pub client_http10: bool,
    pub max_body_size: Option<u64>,
    pub response_ops: &'a HeaderOps,
    /// Idle wait for more request body bytes from the client.
    pub client_body_timeout: Duration,
    /// Measure the upstream time (for the access log); costs two clock reads.
    pub measure: bool,
    /// The status of the response head once it is on its way to the client (0 before).
    pub response_status: Cell<u16>,
}

/// How an exchange ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The status the client got (from the upstream or our own).
    pub status: u16,
    /// Whether the client connection can take another request.
    pub keep_client: bool,
    pub target: Option<usize>,
    /// From sending the request to having the response head.
    pub upstream_time: Option<Duration>,
    /// Response bytes written to the client.
    pub bytes_out: u64,
    /// What went wrong, for the access log.
    pub error: Option<&'static str>,
}

impl Outcome {
    fn local(status: u16, error: &'static str) -> Outcome {
        Outcome {
            status,
            keep_client: false,
            target: None,
            upstream_time: None,
            bytes_out: 0,
            error: Some(error),
        }
    }
}

/// A failure while sending the request.
enum SendFailure {
    /// The upstream connection broke; `body_sent` says whether request body bytes had left.
    Upstream {
        body_sent: bool,
    },
    UpstreamTimeout,
    Client,
    ClientTimeout,
    BadBody,
    TooLarge,
}

/// Proxies one request whose upstream head is `head_out` and whose body (if any) starts in
/// `inbuf`. On return the request body has been consumed from `inbuf` unless the client
/// connection must close anyway.
///
/// With a `request_timeout` on the upstream, the whole exchange (connect, request, response
/// head and body) must end in time: a timeout before the response head got to the client is a
/// 504, one after it closes the client connection. A WebSocket tunnel, once set up, is exempt.
pub async fn proxy(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    client: &mut TcpStream,
    inbuf: &mut IoBuf,
    head_out: &[u8],
    out: &mut Vec<u8>,
) -> Outcome {
    let Some(limit) = req.snapshot.upstreams[req.upstream].http.request_timeout else {
        return exchange(ctx, req, client, inbuf, head_out, out).await;
    };
    let finished = {
        let mut exchange = std::pin::pin!(exchange(ctx, req, client, inbuf, head_out, out));
        match tokio::time::timeout(limit, &mut exchange).await {
            Ok(o) => Some(o),
            Err(_) if req.response_status.get() == 101 => Some(exchange.await),
            Err(_) => None,
        }
    };
    // Only a timed-out exchange gets an answer here (an eager `unwrap_or` would also write one
    // after exchanges that ended with an answer of their own).
    match (finished, req.response_status.get()) {
        (Some(o), _) => o,
        (None, 0) => local(client, out, 504, "request_timeout", req.head_method).await,
        (None, status) => Outcome::local(status, "request_timeout"),
    }
}

async fn exchange(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    client: &mut TcpStream,
    inbuf: &mut IoBuf,
    head_out: &[u8],
    out: &mut Vec<u8>,
) -> Outcome {
    let up = &req.snapshot.upstreams[req.upstream];
    let settings = up.http;
    let mut tried = Tried::default();
    let mut sent_continue = false;
    let mut retries_left = settings.retries;
    loop {
        // An upstream connection: a pooled one to the chosen target, or a new one.
        let Some(choice) = ctx.pick(req.snapshot, req.upstream, req.hash_key, &tried) else {
            return if tried.is_empty() {
                log::warn!(
                    "listener {}: no healthy target in upstream {}",
                    req.listener_name,
                    up.name
                );
                local(client, out, 503, "no_healthy_target", req.head_method).await
            } else {
                local(client, out, 502, "upstream_unavailable", req.head_method).await
            };
        };
        let pooled = ctx
            .upstream_pool
            .borrow_mut()
            .take(up.targets[choice].addr, settings.pool_idle_timeout);
        let (target, mut conn, reused) = match pooled {
            Some(conn) => {
                bump(&ctx.counters.upstream_reuses, 1);
                (choice, conn, true)
            }
            None => {
                let connected = connect_upstream(
                    ctx,
                    req.snapshot,
                    req.upstream,
                    &ConnectFor {
                        listener: req.listener_name,
                        client: req.client_ip,
                        key: req.hash_key,
                    },
                    Some(choice),
                    &mut tried,
                )
                .await;
                match connected {
                    Ok((t, conn)) => {
                        bump(&ctx.counters.upstream_connects, 1);
                        (t, conn, false)
                    }
                    Err(ConnectFailure::NoHealthyTarget) => {
                        return local(client, out, 503, "no_healthy_target", req.head_method).await
                    }
                    Err(ConnectFailure::Failed { timed_out: true }) => {
                        return local(client, out, 504, "connect_timeout", req.head_method).await
                    }
                    Err(ConnectFailure::Failed { timed_out: false }) => {
                        return local(client, out, 502, "connect_failed", req.head_method).await
                    }
                }
            }
        };

        if req.expect_continue && !sent_continue && req.framing != Framing::None && inbuf.is_empty() {
            if write_all(client, b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
                return Outcome::local(100, "client_error");
            }
            sent_continue = true;
        }

        let _in_flight = up.policy.uses_load().then(|| InFlight::new(ctx, req, target));
        let latency_aware = up.policy == BalancePolicy::P2cEwma;
        let started = (req.measure || latency_aware).then(Instant::now);
        let sent = send_request(ctx, req, &mut conn, client, inbuf, head_out, settings.write_timeout).await;
        let retryable = |body_sent: bool| !body_sent && req.idempotent && req.framing == Framing::None;
        match sent {
            Ok(()) => {}
            Err(SendFailure::Upstream { body_sent }) if retries_left > 0 && retryable(body_sent) => {
                retries_left -= 1;
                if !reused {
                    tried.push(target);
                }
                continue;
            }
            Err(SendFailure::Upstream { .. }) => {
                return local(client, out, 502, "upstream_write_failed", req.head_method).await
            }
            Err(SendFailure::UpstreamTimeout) => {
                return local(client, out, 504, "upstream_write_timeout", req.head_method).await
            }
            Err(SendFailure::Client) => return Outcome::local(400, "client_error"),
            Err(SendFailure::ClientTimeout) => {
                return local(client, out, 408, "client_body_timeout", req.head_method).await
            }
            Err(SendFailure::BadBody) => return local(client, out, 400, "bad_request_body", req.head_method).await,
            Err(SendFailure::TooLarge) => return local(client, out, 413, "body_too_large", req.head_method).await,
        }

        // Nothing of the client's is needed while the upstream thinks: its buffer goes back now
        // (unless a pipelined request is waiting in it).
        inbuf.release_if_empty(ctx);
        let mut upbuf = IoBuf::default();
        let result = respond(
            ctx,
            req,
            &mut conn,
            client,
            inbuf,
            &mut upbuf,
            out,
            sent_continue,
            started,
        )
        .await;
        upbuf.release(ctx);
        if latency_aware {
            let took = match &result {
                Ok((o, _)) => o.upstream_time,
                Err(_) => None,
            };
            let took = took.or_else(|| started.map(|s| s.elapsed())).unwrap_or_default();
            ctx.observe_latency(req.snapshot, req.upstream, target, took);
        }
        match result {
            Err(ResponseFailure::Reset) if retries_left > 0 && retryable(false) => {
                retries_left -= 1;
                if !reused {
                    tried.push(target);
                }
                continue;
            }
            Err(failure) => {
                let (status, why) = failure.status_and_reason();
                let mut o = local(client, out, status, why, req.head_method).await;
                o.target = Some(target);
                return o;
            }
            Ok((mut outcome, reusable)) => {
                outcome.target = Some(target);
                if reusable {
                    ctx.upstream_pool
                        .borrow_mut()
                        .put(up.targets[target].addr, conn, settings.pool_max_idle);
                }
                return outcome;
            }
        }
    }
}

/// Counts a request in flight to a target for the balancers that look at load.
struct InFlight<'a> {
    ctx: &'a WorkerContext,
    snapshot: &'a Snapshot,
    upstream: usize,
    target: usize,
}

impl<'a> InFlight<'a> {
    fn new(ctx: &'a WorkerContext, req: &ProxyRequest<'a>, target: usize) -> Self {
        ctx.track_open(req.snapshot, req.upstream, target, true);
        InFlight {
            ctx,
            snapshot: req.snapshot,
            upstream: req.upstream,
            target,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.ctx.track_open(self.snapshot, self.upstream, self.target, false);
    }
}

/// Writes the head and streams the body to the upstream.
async fn send_request(
    ctx: &WorkerContext,
    req: &ProxyRequest<'_>,
    conn: &mut TcpStream,
    client: &mut TcpStream,
    inbuf: &mut IoBuf,
    head_out: &[u8],
    write_timeout: Duration,
) -> Result<(), SendFailure> {
    let up_write = |result: io::Result<()>, body_sent: bool| match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(SendFailure::UpstreamTimeout),
        Err(_) => Err(SendFailure::Upstream { body_sent }),
    };
    up_write(write_all_within(conn, head_out, write_timeout).await, false)?;
    match req.framing {
        Framing::None | Framing::UntilClose => Ok(()),
        Framing::Length(total) => {
            let mut left = total;
            while left > 0 {
                if inbuf.is_empty() {
                    read_client(ctx, client, inbuf, req.client_body_timeout).await?;
                }
                let take = (inbuf.len() as u64).min(left) as usize;
                up_write(
                    write_all_within(conn, &inbuf.filled()[..take], write_timeout).await,
                    true,
                )?;
                inbuf.consume(take);
                left -= take as u64;
            }
            Ok(())
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                if inbuf.is_empty() {
                    read_client(ctx, client, inbuf, req.client_body_timeout).await?;
                }
                let (used, progress) = decoder.advance(inbuf.filled()).map_err(|_| SendFailure::BadBody)?;
                if req.max_body_size.is_some_and(|max| decoder.declared_size() > max) {
                    return Err(SendFailure::TooLarge);
                }
                up_write(
                    write_all_within(conn, &inbuf.filled()[..used], write_timeout).await,
                    true,
                )?;
                inbuf.consume(used);
                if progress == ChunkedProgress::Done {
                    return Ok(());
                }
            }
        }
    }
}

async fn read_client(
    ctx: &WorkerContext,
    client: &mut TcpStream,
    inbuf: &mut IoBuf,
    wait: Duration,
) -> Result<(), SendFailure> {
    match tokio::time::timeout(wait, inbuf.read_from(ctx, client, super::iobuf::HTTP_BUFFER_SIZE)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Err(SendFailure::Client),
        Ok(Ok(_)) => Ok(()),
        Err(_) => Err(SendFailure::ClientTimeout),
    }
}

/// Sends an answer of our own and describes it. The client connection closes after it.
pub async fn local(
    client: &mut TcpStream,
    out: &mut Vec<u8>,
    status: u16,
    why: &'static str,
    head_only: bool,
) -> Outcome {
    out.clear();
    super::local::write_error(out, status, true, head_only);
    let written = write_all(client, out).await.is_ok();
    let mut o = Outcome::local(status, why);
    o.bytes_out = if written { out.len() as u64 } else { 0 };
    o
}

/// Reads whatever the client sent and discards it (used before closing after an error, so the
/// client sees our answer rather than a reset).
pub async fn drain_briefly(client: &mut TcpStream) {
    // Small on purpose: this buffer lives in every connection's future.
    let mut sink = [0u8; 256];
    let _ = tokio::time::timeout(Duration::from_millis(50), async {
        while let Ok(n) = client.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}
