//! One L4 client connection from accept to close: connection limit, optional PROXY header from a
//! trusted client, target choice with bounded retries on failed connects, optional PROXY header to
//! the target, the relay, counters and the session record.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rampart_proto::proxy_protocol::{self, ProxyAddresses, ProxyVersion};
use tokio::net::{TcpSocket, TcpStream};

use crate::balance::Tried;
use crate::relay::{relay, write_all, RelayOutcome};
use crate::session_log::{write_json_str, write_timestamp};
use crate::snapshot::{Listener, Snapshot};
use crate::worker::{bump, drop_by, WorkerContext};

/// Why a connection ended before or instead of a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    OverConnectionLimit,
    ProxyHeaderInvalid,
    ProxyHeaderTimeout,
    NoHealthyTarget,
    ConnectFailed,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::OverConnectionLimit => "connection_limit",
            Refusal::ProxyHeaderInvalid => "proxy_header_invalid",
            Refusal::ProxyHeaderTimeout => "proxy_header_timeout",
            Refusal::NoHealthyTarget => "no_healthy_target",
            Refusal::ConnectFailed => "connect_failed",
        }
    }
}

/// Holds one place in a listener's connection limit.
struct OpenSlot<'a>(&'a AtomicUsize);

impl<'a> OpenSlot<'a> {
    fn take(open: &'a AtomicUsize, max: usize) -> Option<Self> {
        let before = open.fetch_add(1, Ordering::Relaxed);
        if before >= max {
            open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(OpenSlot(open))
    }
}

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The facts a session record is written from.
struct Session<'a> {
    listener: &'a Listener,
    snapshot: &'a Snapshot,
    client: SocketAddr,
    accepted_wall: SystemTime,
    accepted: Instant,
    target: Option<usize>,
    connected: Option<Instant>,
}

/// Serves one accepted client connection of `listener` (an index into `snapshot.listeners`).
pub async fn serve(ctx: &WorkerContext, snapshot: Arc<Snapshot>, listener: usize, client: TcpStream, peer: SocketAddr) {
    let accepted = Instant::now();
    let listener = &snapshot.listeners[listener];
    let mut session = Session {
        listener,
        snapshot: &snapshot,
        client: peer,
        accepted_wall: SystemTime::now(),
        accepted,
        target: None,
        connected: None,
    };
    bump(&ctx.counters.accepted, 1);
    let Some(_slot) = OpenSlot::take(&listener.open_connections, listener.max_connections) else {
        bump(&ctx.counters.rejected_over_limit, 1);
        record(ctx, &session, Err(Refusal::OverConnectionLimit));
        return;
    };
    bump(&ctx.counters.open, 1);
    let result = proxy(ctx, &mut session, client).await;
    drop_by(&ctx.counters.open, 1);
    if let Ok(outcome) = &result {
        bump(&ctx.counters.bytes_up, outcome.bytes_up);
        bump(&ctx.counters.bytes_down, outcome.bytes_down);
    }
    record(ctx, &session, result);
}

async fn proxy(ctx: &WorkerContext, session: &mut Session<'_>, mut client: TcpStream) -> Result<RelayOutcome, Refusal> {
    let listener = session.listener;
    let snapshot = session.snapshot;
    let _ = client.set_nodelay(true);
    let local = client.local_addr().unwrap_or(session.client);

    // Bytes read past a PROXY header belong to the stream and go to the target first.
    let mut early = Vec::new();
    if listener.expects_proxy_header(session.client.ip()) {
        let read = tokio::time::timeout(listener.proxy_header_timeout, read_proxy_header(&client, &mut early));
        match read.await {
            Ok(Ok(Some(addresses))) => session.client = addresses.source,
            Ok(Ok(None)) => {}
            Ok(Err(())) => {
                bump(&ctx.counters.proxy_header_errors, 1);
                return Err(Refusal::ProxyHeaderInvalid);
            }
            Err(_) => {
                bump(&ctx.counters.proxy_header_errors, 1);
                return Err(Refusal::ProxyHeaderTimeout);
            }
        }
    }

    let up_index = listener.upstream;
    let upstream_spec = &snapshot.upstreams[up_index];
    let attempts = upstream_spec.connect_attempts.clamp(1, Tried::CAPACITY);
    let mut tried = Tried::default();
    let (target, mut upstream) = loop {
        let Some(t) = ctx.pick(snapshot, up_index, session.client.ip(), &tried) else {
            let refusal = if tried.is_empty() {
                Refusal::NoHealthyTarget
            } else {
                Refusal::ConnectFailed
            };
            bump(&ctx.counters.no_healthy_target, 1);
            log::warn!(
                "listener {}: no healthy target left in upstream {} after {} attempt(s); closing connection from {}",
                listener.name,
                upstream_spec.name,
                tried.len(),
                session.client
            );
            return Err(refusal);
        };
        tried.push(t);
        let target = &upstream_spec.targets[t];
        match tokio::time::timeout(upstream_spec.connect_timeout, connect(target.addr)).await {
            Ok(Ok(stream)) => {
                target.health.record_connect_success();
                break (t, stream);
            }
            failure => {
                bump(&ctx.counters.connect_failures, 1);
                let backoff = target.health.record_connect_failure(&upstream_spec.passive_health);
                let why = match failure {
                    Ok(Err(e)) => e.to_string(),
                    _ => "connect timeout".to_string(),
                };
                log::warn!(
                    "upstream {}: connect to {} failed ({why}); marked down for {backoff:?}",
                    upstream_spec.name,
                    target.name
                );
                if tried.len() >= attempts {
                    log::warn!(
                        "listener {}: {} connect attempt(s) failed in upstream {}; closing connection from {}",
                        listener.name,
                        tried.len(),
                        upstream_spec.name,
                        session.client
                    );
                    return Err(Refusal::ConnectFailed);
                }
            }
        }
    };
    session.target = Some(target);
    session.connected = Some(Instant::now());

    if let Some(version) = upstream_spec.send_proxy_protocol {
        let addresses = ProxyAddresses {
            source: session.client,
            destination: local,
        };
        let mut header = Vec::with_capacity(64 + early.len());
        match version {
            ProxyVersion::V1 => proxy_protocol::encode_v1(&addresses, &mut header),
            ProxyVersion::V2 => proxy_protocol::encode_v2(&addresses, &mut header),
        }
        header.extend_from_slice(&early);
        early = header;
    }
    if !early.is_empty() && write_all(&upstream, &early).await.is_err() {
        return Err(Refusal::ConnectFailed);
    }

    ctx.track_open(snapshot, up_index, target, true);
    let outcome = relay(
        ctx,
        &mut client,
        &mut upstream,
        listener.idle_timeout,
        listener.buffer_size,
    )
    .await;
    ctx.track_open(snapshot, up_index, target, false);
    Ok(outcome)
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_nodelay(true)?;
    socket.connect(addr).await
}

/// Reads a PROXY header; leaves any bytes after it in `buf`. `Ok(None)` for a header without
/// addresses (v1 UNKNOWN, v2 LOCAL).
async fn read_proxy_header(client: &TcpStream, buf: &mut Vec<u8>) -> Result<Option<ProxyAddresses>, ()> {
    let mut chunk = [0u8; proxy_protocol::V2_MAX_LEN];
    loop {
        client.readable().await.map_err(|_| ())?;
        let n = match client.try_read(&mut chunk) {
            Ok(0) => return Err(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(()),
        };
        buf.extend_from_slice(&chunk[..n]);
        match proxy_protocol::decode(buf) {
            Ok(Some((header, used))) => {
                buf.drain(..used);
                return Ok(header.addresses);
            }
            Ok(None) => continue,
            Err(e) => {
                log::warn!(
                    "PROXY header from {}: {e}",
                    client.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                );
                return Err(());
            }
        }
    }
}

/// Appends the session record for a finished connection.
fn record(ctx: &WorkerContext, s: &Session<'_>, result: Result<RelayOutcome, Refusal>) {
    if s.snapshot.session_log.is_none() || !ctx.records_sessions() {
        return;
    }
    let closed = Instant::now();
    let wall = |t: Instant| s.accepted_wall + t.saturating_duration_since(s.accepted);
    let upstream = &s.snapshot.upstreams[s.listener.upstream];
    ctx.push_session_record(|out| {
        use std::io::Write;
        out.extend_from_slice(b"{\"client\":");
        write_json_str(out, &s.client.to_string());
        out.extend_from_slice(b",\"listener\":");
        write_json_str(out, &s.listener.name);
        out.extend_from_slice(b",\"upstream\":");
        write_json_str(out, &upstream.name);
        out.extend_from_slice(b",\"target\":");
        match s.target {
            Some(t) => write_json_str(out, &upstream.targets[t].name),
            None => out.extend_from_slice(b"null"),
        }
        let mut time_field = |name: &str, t: Option<Instant>| {
            let _ = write!(out, ",\"{name}\":");
            match t {
                Some(t) => {
                    out.push(b'"');
                    write_timestamp(out, wall(t));
                    out.push(b'"');
                }
                None => out.extend_from_slice(b"null"),
            }
        };
        time_field("accepted", Some(s.accepted));
        time_field("connected", s.connected);
        let (first_up, first_down) = match &result {
            Ok(o) => (o.first_byte_up, o.first_byte_down),
            Err(_) => (None, None),
        };
        time_field("first_byte_up", first_up);
        time_field("first_byte_down", first_down);
        time_field("closed", Some(closed));
        let (bytes_up, bytes_down, reason) = match &result {
            Ok(o) => (o.bytes_up, o.bytes_down, o.end.as_str()),
            Err(r) => (0, 0, r.as_str()),
        };
        let _ = writeln!(
            out,
            ",\"bytes_up\":{bytes_up},\"bytes_down\":{bytes_down},\"close\":\"{reason}\"}}"
        );
    });
}
