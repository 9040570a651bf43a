//! Choosing a target and connecting to it, shared by the L4 and HTTP paths: a failed connect
//! marks the target down for its passive backoff and moves on to another target, up to the
//! upstream's attempt limit.

use std::net::{IpAddr, SocketAddr};

use rampart_proto::proxy_protocol::{self, ProxyAddresses, ProxyVersion};
use tokio::net::{TcpSocket, TcpStream};

use crate::stream::Stream;

use crate::balance::Tried;
use crate::worker::{bump, WorkerContext};
use rampart_model::Snapshot;

/// Why no upstream connection could be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectFailure {
    /// No target was available to try (all down, or all already tried).
    NoHealthyTarget,
    /// Every attempt failed; `timed_out` when the last one ran out of time.
    Failed { timed_out: bool },
}

/// Whom an upstream connection is for.
#[derive(Clone, Copy)]
pub struct ConnectFor<'a> {
    /// The listener's name, for logs.
    pub listener: &'a str,
    pub client: IpAddr,
    /// The consistent-hashing key of the connection or request.
    pub key: u64,
}

/// Connects to a target of upstream `up_index` for `whom`, starting with `first` when the
/// caller has already chosen one. `tried` holds targets that must not be chosen (and receives
/// the ones tried here).
pub async fn connect_upstream(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    up_index: usize,
    whom: &ConnectFor<'_>,
    mut first: Option<usize>,
    tried: &mut Tried,
) -> Result<(usize, Stream), ConnectFailure> {
    let ConnectFor { listener, client, key } = *whom;
    let upstream = &snapshot.upstreams[up_index];
    let attempts = upstream.connect_attempts.clamp(1, Tried::CAPACITY);
    let mut made = 0;
    loop {
        let Some(t) = first.take().or_else(|| ctx.pick(snapshot, up_index, key, tried)) else {
            bump(&ctx.counters.no_healthy_target, 1);
            log::warn!(
                "listener {listener}: no healthy target left in upstream {} after {made} attempt(s); closing connection from {client}",
                upstream.name,
            );
            return Err(if made == 0 {
                ConnectFailure::NoHealthyTarget
            } else {
                ConnectFailure::Failed { timed_out: false }
            });
        };
        tried.push(t);
        made += 1;
        let target = &upstream.targets[t];
        match tokio::time::timeout(upstream.connect_timeout, connect(target.addr)).await {
            Ok(Ok(stream)) => {
                target.health.record_connect_success();
                return Ok((t, Stream::Tcp(stream)));
            }
            failure => {
                bump(&ctx.counters.connect_failures, 1);
                let backoff = target.health.record_connect_failure(&upstream.passive_health);
                let timed_out = failure.is_err();
                let why = match failure {
                    Ok(Err(e)) => e.to_string(),
                    _ => "connect timeout".to_string(),
                };
                log::warn!(
                    "upstream {}: connect to {} failed ({why}); marked down for {backoff:?}",
                    upstream.name,
                    target.name
                );
                if made >= attempts {
                    log::warn!(
                        "listener {listener}: {made} connect attempt(s) failed in upstream {}; closing connection from {client}",
                        upstream.name,
                    );
                    return Err(ConnectFailure::Failed { timed_out });
                }
            }
        }
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
