//! The connection stage, one for every listener: a place in the listener's connection limit, then
//! the PROXY header when the client is trusted to send one, then the TLS handshake if the
//! listener terminates TLS, and a [`Conn`] handed to the protocol: the L4 relay or the HTTP
//! session. A connection refused here leaves a session record whatever the listener speaks.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rampart_model::metrics::RefusedReason;
use rampart_model::tls::ListenerTls;
use rampart_model::{Listener, ListenerKey, ListenerProtocol, Snapshot};
use rampart_proto::proxy_protocol::{self, ProxyAddresses};
use tokio::net::TcpStream;

use crate::http::park::Parked;
use crate::l4::routed::{Arrival, HandOver};
use crate::refusal::{record_refusal, Refused};
pub use crate::slot::{BoundListener, Conn, ConnSlot};
use crate::stream::Stream;
use crate::tls::accept::{accept, answer_plain_http, first_bytes, HandshakeFailure};
use crate::worker::{bump, WorkerContext};

/// Why a connection ended in the connection stage (the names used in session records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageRefusal {
    OverConnectionLimit,
    ProxyHeaderInvalid,
    ProxyHeaderTimeout,
    /// The TLS handshake failed; the name says how (see [`HandshakeFailure::as_str`]).
    Tls(&'static str),
}

impl StageRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            StageRefusal::OverConnectionLimit => "connection_limit",
            StageRefusal::ProxyHeaderInvalid => "proxy_header_invalid",
            StageRefusal::ProxyHeaderTimeout => "proxy_header_timeout",
            StageRefusal::Tls(name) => name,
        }
    }
}

/// Serves one accepted connection of `listener`: the stage, then its protocol. The listener's
/// settings come from the snapshot current now; an L4 connection keeps that snapshot for its
/// life, an HTTP connection takes the current one for each request.
pub async fn serve(ctx: &WorkerContext, listener: Rc<BoundListener>, stream: TcpStream, peer: SocketAddr) {
    let accepted = (Instant::now(), SystemTime::now());
    bump(&ctx.counters.accepted, 1);
    let snapshot = ctx.snapshot();
    let Some((index, spec)) = listener
        .index_in(&snapshot)
        .and_then(|i| Some((i, snapshot.listeners.get(i)?)))
    else {
        // The listener was removed by a reload and its socket is about to close.
        return;
    };
    let cells = spec.metrics.worker(ctx.id);
    cells.accepted.add(1);
    let Some(slot) = ConnSlot::take(&listener, spec.max_connections) else {
        bump(&ctx.counters.rejected_over_limit, 1);
        cells.refused(RefusedReason::Limit).add(1);
        record_refusal(
            ctx,
            &snapshot,
            spec,
            stage_refusal(peer, accepted, StageRefusal::OverConnectionLimit),
        );
        return;
    };
    let (mut client, mut client_from_header, mut early) = (peer, false, Vec::new());
    let mut proxy_header = false;
    if spec.expects_proxy_header(peer.ip()) {
        let read = tokio::time::timeout(spec.proxy_header_timeout, read_proxy_header(&stream, &mut early));
        let refusal = match read.await {
            Ok(Ok(Some(addresses))) => {
                client = addresses.source;
                client_from_header = true;
                proxy_header = true;
                None
            }
            Ok(Ok(None)) => {
                proxy_header = true;
                None
            }
            Ok(Err(())) => Some(StageRefusal::ProxyHeaderInvalid),
            Err(_) => Some(StageRefusal::ProxyHeaderTimeout),
        };
        if let Some(refusal) = refusal {
            bump(&ctx.counters.proxy_header_errors, 1);
            cells.refused(RefusedReason::ProxyHeader).add(1);
            record_refusal(ctx, &snapshot, spec, stage_refusal(peer, accepted, refusal));
            return;
        }
    }
    let arrival = Arrival {
        tcp: stream,
        early,
        client,
        client_from_header,
        proxy_header,
        slot,
        accepted,
    };
    let routed = spec.tcp_routing().is_some();
    let snapshot = {
        let shared = snapshot;
        Arc::clone(&shared.0)
    };
    if !routed {
        return terminate_and_serve(ctx, snapshot, index, arrival, peer, None).await;
    }
    // Boxed: the peek's and the relay's state would otherwise enlarge every connection's task.
    let handed = Box::pin(crate::l4::routed::serve(ctx, Arc::clone(&snapshot), index, arrival)).await;
    let handed = handed.and_then(|h| Some((snapshot.listeners.get(h.target)?.key(), h)));
    if let Some((key, HandOver { target, arrival })) = handed {
        let peer = arrival.client;
        Box::pin(terminate_and_serve(ctx, snapshot, target, arrival, peer, Some(key))).await;
    }
}

/// The rest of the stage for listener `index` of `snapshot` (its TLS handshake, when it
/// terminates TLS), then its protocol. `handed_to`: the listener's key when a TCP route handed the
/// connection over to it.
pub(crate) async fn terminate_and_serve(
    ctx: &WorkerContext,
    snapshot: Arc<Snapshot>,
    index: usize,
    arrival: Arrival,
    peer: SocketAddr,
    handed_to: Option<ListenerKey>,
) {
    let Some(spec) = snapshot.listeners.get(index) else {
        return;
    };
    let Arrival {
        tcp,
        mut early,
        client,
        client_from_header,
        slot,
        accepted,
        ..
    } = arrival;
    let stream = match &spec.tls {
        None => Stream::Tcp(tcp),
        // Boxed: the handshake's state would otherwise enlarge every connection's task.
        Some(tls) => match Box::pin(handshake(ctx, &snapshot, spec, tls, tcp, &mut early, peer, accepted)).await {
            Some(stream) => stream,
            None => return,
        },
    };
    if early.is_empty() {
        // The handshake consumed what was read (keep no capacity for the connection's life).
        early = Vec::new();
    }
    // An ACME CA's TLS-ALPN-01 validation: the handshake was all it wanted.
    if stream
        .tls_info()
        .is_some_and(|t| t.alpn == Some(rampart_model::acme::ACME_TLS_ALPN))
    {
        return;
    }
    let conn = Conn {
        stream,
        client,
        client_from_header,
        early,
        slot,
        handed_to,
    };
    match &spec.protocol {
        // Boxed: the relay's state would otherwise enlarge every HTTP connection's task too.
        ListenerProtocol::Tcp { .. } => {
            let choice = crate::l4::Choice::listener_default(spec);
            Box::pin(crate::l4::serve(
                ctx,
                Arc::clone(&snapshot),
                index,
                conn,
                accepted,
                choice,
            ))
            .await
        }
        ListenerProtocol::Http(_) => {
            // The HTTP session takes the current snapshot per request: keep no old one alive.
            drop(snapshot);
            crate::http::connection::serve(ctx, conn).await
        }
        // Not reached: a UDP listener's socket takes no connections.
        ListenerProtocol::Udp { .. } => {}
    }
}

/// The TLS handshake of a connection of `listener`: the TLS stream, or `None` when it failed (the
/// failure is counted, logged at debug level and recorded; a plain HTTP request gets its 400).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn handshake(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    listener: &Listener,
    tls: &ListenerTls,
    tcp: TcpStream,
    early: &mut Vec<u8>,
    peer: SocketAddr,
    accepted: (Instant, SystemTime),
) -> Option<Stream> {
    let deadline = tokio::time::Instant::now() + tls.handshake_timeout;
    let first = tokio::time::timeout_at(deadline, first_bytes(&tcp, early)).await;
    let result = match first.unwrap_or(Err(HandshakeFailure::TimedOut)) {
        Err(HandshakeFailure::PlainHttp) => {
            fail(ctx, snapshot, listener, peer, accepted, &HandshakeFailure::PlainHttp);
            if listener.http().is_some() {
                answer_plain_http(tcp, PLAIN_HTTP_LINGER).await;
            }
            return None;
        }
        Err(failure) => Err(failure),
        Ok(()) => tokio::time::timeout_at(deadline, accept(tcp, early, tls))
            .await
            .unwrap_or(Err(HandshakeFailure::TimedOut)),
    };
    match result {
        Ok(stream) => Some(Stream::Tls(Box::new(stream))),
        Err(failure) => {
            fail(ctx, snapshot, listener, peer, accepted, &failure);
            None
        }
    }
}

/// How long a plain HTTP client on a TLS port may go on sending after its 400.
const PLAIN_HTTP_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

fn fail(
    ctx: &WorkerContext,
    snapshot: &Snapshot,
    listener: &Listener,
    peer: SocketAddr,
    accepted: (Instant, SystemTime),
    failure: &HandshakeFailure,
) {
    bump(&ctx.counters.tls_handshake_failures, 1);
    listener.metrics.worker(ctx.id).refused(RefusedReason::Tls).add(1);
    tracing::debug!(
        "listener {}: TLS handshake from {peer} failed: {failure}",
        listener.name
    );
    let refused = stage_refusal(peer, accepted, StageRefusal::Tls(failure.as_str()));
    record_refusal(ctx, snapshot, listener, refused);
}

/// Serves a connection the parking lot woke up (its client sent something or closed).
pub async fn serve_woken(ctx: &WorkerContext, parked: Parked) {
    if let Some(conn) = parked.into_conn() {
        crate::http::connection::serve(ctx, conn).await;
    }
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
                tracing::warn!(
                    "PROXY header from {}: {e}",
                    client.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                );
                return Err(());
            }
        }
    }
}

/// The record of a connection the stage refused.
fn stage_refusal(client: SocketAddr, accepted: (Instant, SystemTime), refusal: StageRefusal) -> Refused<'static> {
    Refused {
        client,
        accepted,
        close: refusal.as_str(),
        routed: None,
    }
}
