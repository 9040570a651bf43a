//! One L4 client connection from accept to close: connection limit, optional PROXY header from a
//! trusted client, target choice with bounded retries on failed connects, optional PROXY header to
//! the target, the relay, counters and the session record.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rampart_proto::proxy_protocol::{self, ProxyAddresses, ProxyVersion};
use tokio::net::TcpStream;

use crate::balance::{BalancePolicy, Tried};
use crate::connect::{connect_upstream, ConnectFailure, ConnectFor};
use crate::relay::{relay, write_all, RelayOutcome};
use crate::session_log::{write_json_str, write_timestamp};
use crate::worker::{bump, drop_by, OpenSlot, WorkerContext};
use rampart_model::{Listener, Snapshot};

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
    // TCP_NODELAY comes from the listening socket (accepted sockets inherit it on Linux).

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

    let Some(up_index) = listener.tcp_upstream() else {
        return Err(Refusal::NoHealthyTarget);
    };
    let upstream_spec = &snapshot.upstreams[up_index];
    let mut tried = Tried::default();
    let connect_started = Instant::now();
    let (target, mut upstream) = match connect_upstream(
        ctx,
        snapshot,
        up_index,
        &ConnectFor {
            listener: &listener.name,
            client: session.client.ip(),
            key: upstream_spec.client_key(session.client.ip()),
        },
        None,
        &mut tried,
    )
    .await
    {
        Ok(found) => found,
        Err(ConnectFailure::NoHealthyTarget) => return Err(Refusal::NoHealthyTarget),
        Err(ConnectFailure::Failed { .. }) => return Err(Refusal::ConnectFailed),
    };
    session.target = Some(target);
    let connected = Instant::now();
    session.connected = Some(connected);
    if upstream_spec.policy == BalancePolicy::P2cEwma {
        ctx.observe_latency(snapshot, up_index, target, connected - connect_started);
    }

    if let Some(version) = upstream_spec.send_proxy_protocol {
        let addresses = ProxyAddresses {
            source: session.client,
            destination: client.local_addr().unwrap_or(session.client),
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

/// Reads a PROXY header; leaves any bytes after it in `buf`. `Ok(None)` for a header without
/// addresses (v1 UNKNOWN, v2 LOCAL).
async fn read_proxy_header(client: &TcpStream, buf: &mut Vec<u8>) -> Result<Option<ProxyAddresses>, ()> {
    // On the heap: this path is taken only for trusted sources, and an array here would enlarge
    // every connection's task.
    let mut chunk = vec![0u8; proxy_protocol::V2_MAX_LEN];
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
    let Some(path) = &s.snapshot.session_log else { return };
    let closed = Instant::now();
    let wall = |t: Instant| s.accepted_wall + t.saturating_duration_since(s.accepted);
    let upstream = &s.snapshot.upstreams[s.listener.tcp_upstream().unwrap_or(0)];
    ctx.push_log_line(path, |out| {
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
