//! One L4 client connection past the connection stage: target choice with bounded retries on
//! failed connects, optional PROXY header to the target, the relay, counters and the session
//! record. A listener with routes first peeks at the connection's first bytes to choose its
//! route ([`routed`]); a route with payload filters relays through them ([`filter`]).

pub mod filter;
mod filtered;
pub mod routed;
mod span;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::balance::{BalancePolicy, Tried};
use crate::connect::{connect_upstream, proxy_header, ConnectFailure, ConnectFor};
use crate::relay::{relay, RelayOutcome};
use crate::session_log::SessionRecord;
use crate::slot::Conn;
use crate::tls::OwnedTlsInfo;
use crate::worker::{bump, WorkerContext};
use rampart_model::{Listener, Snapshot};

/// Why a connection ended before or instead of a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    NoHealthyTarget,
    ConnectFailed,
    UpstreamTls,
    /// A listener with routes and no default: no route took the connection.
    NoRoute,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::NoHealthyTarget => "no_healthy_target",
            Refusal::ConnectFailed => "connect_failed",
            Refusal::UpstreamTls => "upstream_tls",
            Refusal::NoRoute => "no_route",
        }
    }
}

/// Where a connection goes, as its listener's routes decided (or the listener's upstream when it
/// has none).
pub struct Choice {
    /// The upstream to relay to (`None`: close).
    pub upstream: Option<usize>,
    /// The route that took the connection (an index into the listener's routes), if one did.
    pub route: Option<usize>,
    /// What peeking found, on a listener with routes.
    pub peek: Option<routed::PeekFacts>,
}

impl Choice {
    /// A listener without routes: its upstream.
    pub fn listener_default(listener: &Listener) -> Choice {
        Choice {
            upstream: listener.tcp_upstream(),
            route: None,
            peek: None,
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
    choice: Choice,
    target: Option<usize>,
    connected: Option<Instant>,
    tls: Option<OwnedTlsInfo>,
}

/// Relays one connection of TCP listener `listener` (an index into `snapshot.listeners`), past
/// the connection stage, and writes its session record.
pub async fn serve(
    ctx: &WorkerContext,
    snapshot: Arc<Snapshot>,
    listener: usize,
    conn: Conn,
    (accepted, accepted_wall): (Instant, SystemTime),
    choice: Choice,
) {
    let Some(listener) = snapshot.listeners.get(listener) else {
        return;
    };
    let mut session = Session {
        listener,
        snapshot: &snapshot,
        client: conn.client,
        accepted_wall,
        accepted,
        choice,
        target: None,
        connected: None,
        tls: conn.stream.tls_info().map(|t| t.to_owned_info()),
    };
    let result = proxy(ctx, &mut session, conn).await;
    let cells = listener.metrics.worker(ctx.id);
    if let Ok(outcome) = &result {
        bump(&ctx.counters.bytes_up, outcome.bytes_up);
        bump(&ctx.counters.bytes_down, outcome.bytes_down);
        cells.bytes_in.add(outcome.bytes_up);
        cells.bytes_out.add(outcome.bytes_down);
    }
    cells.session_duration.observe(accepted.elapsed());
    if let Ok(RelayOutcome {
        end: crate::relay::RelayEnd::Filtered,
        ..
    }) = &result
    {
        let route = listener.tcp_routing().zip(session.choice.route);
        if let Some(route) = route.and_then(|(routing, r)| routing.routes.get(r)) {
            route.metrics.worker(ctx.id).filter_closes.add(1);
        }
    }
    record(ctx, &session, result);
}

async fn proxy(ctx: &WorkerContext, session: &mut Session<'_>, conn: Conn) -> Result<RelayOutcome, Refusal> {
    let listener = session.listener;
    let snapshot = session.snapshot;
    let Conn {
        stream: mut client,
        early,
        slot: _slot,
        ..
    } = conn;
    let Some(up_index) = session.choice.upstream else {
        return Err(Refusal::NoRoute);
    };
    let Some(upstream_spec) = snapshot.upstreams.get(up_index) else {
        return Err(Refusal::NoRoute);
    };
    let mut tried = Tried::default();
    let connect_started = Instant::now();
    let header = upstream_spec.send_proxy_protocol.map(|version| {
        let destination = client.local_addr().unwrap_or(session.client);
        proxy_header(version, session.client, destination)
    });
    let (target, mut upstream) = match connect_upstream(
        ctx,
        snapshot,
        up_index,
        &ConnectFor {
            listener: &listener.name,
            client: session.client.ip(),
            key: upstream_spec.client_key(session.client.ip()),
            proxy_header: header.as_deref(),
            outcome: "closing connection",
        },
        (None, &mut tried),
        &mut |_, _, _| {},
    )
    .await
    {
        Ok(found) => found,
        Err(ConnectFailure::NoHealthyTarget) => return Err(Refusal::NoHealthyTarget),
        Err(ConnectFailure::Failed { .. }) => return Err(Refusal::ConnectFailed),
        Err(ConnectFailure::Tls) => return Err(Refusal::UpstreamTls),
    };
    session.target = Some(target);
    let connected = Instant::now();
    session.connected = Some(connected);
    if upstream_spec.policy == BalancePolicy::P2cEwma {
        ctx.observe_latency(snapshot, up_index, target, connected - connect_started);
    }
    let filters = session
        .choice
        .route
        .and_then(|r| listener.tcp_routing()?.routes.get(r))
        .map(|route| &route.filters)
        .filter(|f| !f.is_empty());
    // With filters, the early bytes (the peeked ones) go through them in the relay.
    let mut early_sent = None;
    if filters.is_none() && !early.is_empty() {
        if upstream.write_all(&early).await.is_err() {
            return Err(Refusal::ConnectFailed);
        }
        early_sent = Some(Instant::now());
    }

    ctx.track_open(snapshot, up_index, target, true);
    let target_cells = upstream_spec.targets.get(target).map(|t| t.metrics.worker(ctx.id));
    if let Some(cells) = target_cells {
        cells.active.up();
    }
    let mut outcome = match filters {
        None => {
            relay(
                ctx,
                &mut client,
                &mut upstream,
                listener.idle_timeout,
                listener.buffer_size,
            )
            .await
        }
        Some(filters) => {
            let chains = (
                filter::FilterChain::new(filters, filter::Direction::Up),
                filter::FilterChain::new(filters, filter::Direction::Down),
            );
            let settings = (listener.idle_timeout, listener.buffer_size);
            Box::pin(filtered::relay_filtered(
                ctx,
                &mut client,
                &mut upstream,
                settings,
                chains,
                &early,
            ))
            .await
        }
    };
    // The early bytes went up too: count them, and they were the first.
    if let Some(sent) = early_sent {
        outcome.bytes_up += early.len() as u64;
        outcome.first_byte_up = Some(outcome.first_byte_up.map_or(sent, |t| t.min(sent)));
    }
    if let Some(cells) = target_cells {
        cells.active.down();
    }
    ctx.track_open(snapshot, up_index, target, false);
    Ok(outcome)
}

/// Appends the session record for a finished connection.
fn record(ctx: &WorkerContext, s: &Session<'_>, result: Result<RelayOutcome, Refusal>) {
    span::record(ctx, s, &result);
    let Some(path) = &s.snapshot.session_log else { return };
    let upstream = s.choice.upstream.and_then(|u| s.snapshot.upstreams.get(u));
    let (first_byte_up, first_byte_down, bytes_up, bytes_down, close) = match &result {
        Ok(o) => (
            o.first_byte_up,
            o.first_byte_down,
            o.bytes_up,
            o.bytes_down,
            o.end.as_str(),
        ),
        Err(r) => (None, None, 0, 0, r.as_str()),
    };
    let record = SessionRecord {
        client: s.client,
        listener: &s.listener.name,
        upstream: upstream.map(|u| u.name.as_str()),
        target: upstream
            .zip(s.target)
            .and_then(|(u, t)| u.targets.get(t))
            .map(|t| t.name.as_str()),
        accepted: s.accepted,
        accepted_wall: s.accepted_wall,
        connected: s.connected,
        first_byte_up,
        first_byte_down,
        bytes_up,
        bytes_down,
        close,
        tls: s.tls.as_ref().map(OwnedTlsInfo::view),
        routed: s.choice.peek.as_ref().map(|peek| {
            let route = s.choice.route.zip(s.listener.tcp_routing());
            peek.view(
                route
                    .and_then(|(r, routing)| routing.routes.get(r))
                    .map(|r| r.name.as_str()),
            )
        }),
    };
    ctx.push_log_line(path, |out| record.write(out));
}
