//! Choosing a target and connecting to it, shared by the L4 and HTTP paths: a TCP connect, the
//! PROXY header when the upstream wants one, and the TLS handshake when it speaks TLS, all within
//! the upstream's connect timeout. A failed connect (or handshake) marks the target down for its
//! passive backoff and moves on to another target, up to the upstream's attempt limit.

use std::net::{IpAddr, SocketAddr};

use rampart_proto::proxy_protocol::{self, ProxyAddresses, ProxyVersion};
use tokio::net::{TcpSocket, TcpStream};

use crate::stream::Stream;

use crate::balance::Tried;
use crate::log_summary::{count_of, Detail, EventKey};
use crate::tls::accept::HandshakeFailure;
use crate::worker::{bump, WorkerContext};
use rampart_model::metrics::UpstreamErrorKind;
use rampart_model::{Snapshot, Target, Upstream};

/// Why no upstream connection could be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectFailure {
    /// No target was available to try (all down, or all already tried).
    NoHealthyTarget,
    /// Every attempt failed; `timed_out` when the last one ran out of time.
    Failed { timed_out: bool },
    /// Every attempt failed, the last in its TLS handshake (a certificate that did not verify,
    /// no common version or cipher).
    Tls,
}

/// Whom an upstream connection is for.
#[derive(Clone, Copy)]
pub struct ConnectFor<'a> {
    /// The listener's name, for logs.
    pub listener: &'a str,
    pub client: IpAddr,
    /// The consistent-hashing key of the connection or request.
    pub key: u64,
    /// A PROXY header to send first (before any TLS), when the upstream wants one.
    pub proxy_header: Option<&'a [u8]>,
    /// What happens to the client when no connect succeeds, as the warning says it:
    /// "closing connection" (L4) or "answering the request with an error" (HTTP).
    pub outcome: &'static str,
}

/// Connects to a target of upstream `up_index` for `whom`, starting with `first` when the
/// caller has already chosen one. `tried` holds targets that must not be chosen (and receives
/// the ones tried here). `failed` hears of each target whose connect failed, with how long it took,
/// as it happens (the HTTP exchange records each as an attempt).
pub async fn connect_upstream(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    up_index: usize,
    whom: &ConnectFor<'_>,
    (mut first, tried): (Option<usize>, &mut Tried),
    failed: &mut dyn FnMut(usize, ConnectFailure, std::time::Duration),
) -> Result<(usize, Stream), ConnectFailure> {
    let ConnectFor {
        listener,
        client,
        key,
        proxy_header,
        outcome,
    } = *whom;
    let Some(upstream) = snapshot.upstreams.get(up_index) else {
        return Err(ConnectFailure::NoHealthyTarget);
    };
    let attempts = upstream.connect_attempts.clamp(1, Tried::CAPACITY);
    let mut made = 0;
    // What the last attempt died of, for when no target is left to try.
    let mut last = ConnectFailure::NoHealthyTarget;
    loop {
        let Some(t) = first
            .take()
            .or_else(|| ctx.pick(snapshot, up_index, key, tried, tried.is_empty()))
        else {
            bump(&ctx.counters.no_healthy_target, 1);
            if made == 0 {
                // Nothing was tried: no target's error counts it, the upstream's does.
                upstream.metrics.worker(ctx.id).no_target.add(1);
            }
            ctx.log_summary.warn(no_target_key(&upstream.name), || Detail {
                listener: Some(listener.to_string()),
                message: if made == 0 {
                    format!(
                        "listener {listener}: no healthy target in upstream {}; {outcome} from {client}",
                        upstream.name
                    )
                } else {
                    format!(
                        "listener {listener}: no healthy target left in upstream {} after {}; {outcome} from {client}",
                        upstream.name,
                        count_of(made as u64, "attempt"),
                    )
                },
            });
            return Err(last);
        };
        tried.push(t);
        if made > 0 {
            // Another target after a failed connect: a retry.
            upstream.metrics.worker(ctx.id).retries.add(1);
        }
        made += 1;
        // (A pick is always one of the upstream's targets.)
        let Some(target) = upstream.targets.get(t) else {
            return Err(last);
        };
        let started = std::time::Instant::now();
        let attempt = tokio::time::timeout(upstream.connect_timeout, open(upstream, target, proxy_header));
        match attempt.await {
            Ok(Ok(stream)) => {
                target.metrics.worker(ctx.id).opened.add(1);
                target.health.record_connect_success();
                ctx.log_summary.recovered(|| failed_key(&upstream.name, &target.name));
                ctx.log_summary.recovered(|| no_target_key(&upstream.name));
                return Ok((t, stream));
            }
            failure => {
                bump(&ctx.counters.connect_failures, 1);
                let backoff = target.health.record_connect_failure(&upstream.passive_health);
                let why;
                (why, last) = match failure {
                    Ok(Err(Failed::Tcp(e))) => (e.to_string(), ConnectFailure::Failed { timed_out: false }),
                    Ok(Err(Failed::Tls(e))) => (format!("TLS: {e}"), ConnectFailure::Tls),
                    _ => (
                        "connect timeout".to_string(),
                        ConnectFailure::Failed { timed_out: true },
                    ),
                };
                let kind = match last {
                    ConnectFailure::Tls => UpstreamErrorKind::Tls,
                    _ => UpstreamErrorKind::Connect,
                };
                failed(t, last, started.elapsed());
                target.metrics.worker(ctx.id).error(kind).add(1);
                ctx.log_summary
                    .warn(failed_key(&upstream.name, &target.name), || Detail {
                        listener: Some(listener.to_string()),
                        message: format!(
                            "upstream {}: connect to {} failed ({why}); marked down for {backoff:?}",
                            upstream.name, target.name
                        ),
                    });
                if made >= attempts {
                    ctx.log_summary.warn(no_target_key(&upstream.name), || Detail {
                        listener: Some(listener.to_string()),
                        message: format!(
                            "listener {listener}: {} failed in upstream {}; {outcome} from {client}",
                            count_of(made as u64, "connect attempt"),
                            upstream.name,
                        ),
                    });
                    return Err(last);
                }
            }
        }
    }
}

/// Connects to target `t` of upstream `up_index` and to no other, down or not, within the
/// upstream's connect timeout: the connect of a pinned request (a health check). Nothing is
/// counted or recorded (no target health, no metrics, no log summary): the caller says what the
/// failure means.
pub async fn connect_pinned(
    snapshot: &Snapshot,
    up_index: usize,
    t: usize,
    proxy_header: Option<&[u8]>,
) -> Result<Stream, ConnectFailure> {
    let upstream = snapshot.upstreams.get(up_index);
    let Some((upstream, target)) = upstream.and_then(|u| Some((u, u.targets.get(t)?))) else {
        return Err(ConnectFailure::NoHealthyTarget);
    };
    match tokio::time::timeout(upstream.connect_timeout, open(upstream, target, proxy_header)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(Failed::Tls(_))) => Err(ConnectFailure::Tls),
        Ok(Err(Failed::Tcp(_))) => Err(ConnectFailure::Failed { timed_out: false }),
        Err(_) => Err(ConnectFailure::Failed { timed_out: true }),
    }
}

/// The summarised event "no target could be reached in upstream `upstream`".
pub fn no_target_key(upstream: &str) -> EventKey {
    EventKey::no_target(upstream)
}

/// The summarised event "connects to `target` fail".
fn failed_key(upstream: &str, target: &str) -> EventKey {
    EventKey::connect_failed(upstream, target)
}

/// Why one connect attempt failed.
enum Failed {
    Tcp(std::io::Error),
    Tls(HandshakeFailure),
}

/// One connect attempt to `target`: TCP, the PROXY header, then TLS if the upstream speaks it.
async fn open(upstream: &Upstream, target: &Target, proxy_header: Option<&[u8]>) -> Result<Stream, Failed> {
    let tcp = connect(target.addr).await.map_err(Failed::Tcp)?;
    if let Some(header) = proxy_header {
        crate::stream::write_all(&tcp, header).await.map_err(Failed::Tcp)?;
    }
    match (&upstream.tls, &target.tls_name) {
        (Some(tls), Some(name)) => crate::tls::connect::connect(tcp, &tls.config, name)
            .await
            .map(|t| Stream::Tls(Box::new(t)))
            .map_err(Failed::Tls),
        _ => Ok(Stream::Tcp(tcp)),
    }
}

/// A PROXY protocol header of `version` for a connection from `source` to `destination`.
pub fn proxy_header(version: ProxyVersion, source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let addresses = ProxyAddresses { source, destination };
    let mut header = Vec::with_capacity(64);
    match version {
        ProxyVersion::V1 => proxy_protocol::encode_v1(&addresses, &mut header),
        ProxyVersion::V2 => proxy_protocol::encode_v2(&addresses, &mut header),
    }
    header
}

/// A TCP connect with TCP_NODELAY set.
pub async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_nodelay(true)?;
    socket.connect(addr).await
}
