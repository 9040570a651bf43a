//! Delayed binding: a connection of a TCP listener with routes is held, and its first bytes read
//! (and kept, to be sent on first), until the listener's routes decide where it goes: relay to an
//! upstream, hand over to another listener of the same worker (which may terminate TLS and serve
//! HTTP), or close. Nothing decided within `peek_timeout` or `peek_max` bytes goes to the
//! listener's default.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rampart_model::tcp_route::{Decision, Peeked, TcpAction, TcpRouting};
use rampart_model::Snapshot;
use rampart_proto::detect::{detect, Detected, Detection};
use tokio::net::TcpStream;

use super::Choice;
use crate::session_log::RoutedView;
use crate::slot::{Conn, ConnSlot};
use crate::stream::Stream;
use crate::worker::WorkerContext;

/// What peeking found, for the session record.
pub struct PeekFacts {
    /// `None`: detection had not finished when the route was decided.
    pub detected: Option<Detected>,
    /// From accept to the decision.
    pub took: Duration,
}

impl PeekFacts {
    /// The record's view, with the name of the route that took the connection.
    pub fn view<'a>(&'a self, route: Option<&'a str>) -> RoutedView<'a> {
        let d = self.detected.as_ref();
        RoutedView {
            protocol: d.map(|d| d.protocol.as_str()),
            sni: d.and_then(|d| d.sni.as_deref()),
            alpn: d.map_or(&[], |d| &d.alpn[..]),
            http_host: d.and_then(|d| d.http_host.as_deref()),
            route: route.filter(|r| !r.is_empty()),
            peek: self.took,
        }
    }
}

/// A connection of a TCP listener with routes, past the connection stage's PROXY header.
pub struct Arrival {
    pub tcp: TcpStream,
    /// Bytes already read (behind a PROXY header).
    pub early: Vec<u8>,
    pub client: SocketAddr,
    pub client_from_header: bool,
    /// The connection began with a PROXY header.
    pub proxy_header: bool,
    pub slot: ConnSlot,
    pub accepted: (Instant, SystemTime),
}

/// A connection a route hands to another listener of the same snapshot, which serves it from its
/// TLS handshake (reading the ClientHello already peeked) on. The connection keeps its place in
/// the limit of the listener that accepted it.
pub struct HandOver {
    pub target: usize,
    pub arrival: Arrival,
}

/// Serves one connection of TCP listener `index` (which has routes): peek, decide, act. A
/// connection handed to another listener comes back, for the connection stage to serve.
pub async fn serve(
    ctx: &WorkerContext,
    snapshot: Arc<Snapshot>,
    index: usize,
    mut arrival: Arrival,
) -> Option<HandOver> {
    let listener = snapshot.listeners.get(index)?;
    let routing = listener.tcp_routing()?;
    let peeked = peek(
        &arrival.tcp,
        &mut arrival.early,
        routing,
        arrival.client.ip(),
        arrival.proxy_header,
    )
    .await;
    let took = arrival.accepted.0.elapsed();
    let (decision, detection, undecided) = match peeked {
        Ok(found) => found,
        Err(close) => {
            let facts = PeekFacts { detected: None, took };
            let record = crate::refusal::Refused {
                client: arrival.client,
                accepted: arrival.accepted,
                close,
                routed: Some(facts.view(None)),
            };
            crate::refusal::record_refusal(ctx, &snapshot, listener, record);
            return None;
        }
    };
    let facts = PeekFacts {
        detected: match detection {
            Detection::Done(d) => Some(d),
            Detection::NeedMore => None,
        },
        took,
    };
    let (route, action) = match decision {
        Decision::Route(i) if i < routing.routes.len() => {
            if let Some(route) = routing.routes.get(i) {
                route.metrics.worker(ctx.id).connections.add(1);
            }
            (Some(i), routing.routes.get(i).map_or(TcpAction::Reject, |r| r.action))
        }
        Decision::Route(_) | Decision::Default | Decision::Wait => {
            let cells = routing.default_metrics.worker(ctx.id);
            cells.connections.add(1);
            if undecided {
                cells.undecided.add(1);
            }
            match listener.tcp_upstream() {
                Some(upstream) => (None, TcpAction::Upstream(upstream)),
                None => (None, TcpAction::Reject),
            }
        }
    };
    match action {
        TcpAction::Upstream(upstream) => {
            let conn = Conn {
                stream: Stream::Tcp(arrival.tcp),
                client: arrival.client,
                client_from_header: arrival.client_from_header,
                early: arrival.early,
                slot: arrival.slot,
                handed_to: None,
            };
            let choice = Choice {
                upstream: Some(upstream),
                route,
                peek: Some(facts),
            };
            super::serve(ctx, Arc::clone(&snapshot), index, conn, arrival.accepted, choice).await;
        }
        TcpAction::Listener(target) => return Some(HandOver { target, arrival }),
        TcpAction::Reject => {
            let name = route.and_then(|i| routing.routes.get(i)).map(|r| r.name.as_str());
            let record = crate::refusal::Refused {
                client: arrival.client,
                accepted: arrival.accepted,
                close: if route.is_some() { "rejected" } else { "no_route" },
                routed: Some(facts.view(name)),
            };
            crate::refusal::record_refusal(ctx, &snapshot, listener, record);
        }
    }
    None
}

/// Reads the connection's first bytes into `buf` until `routing` decides: the decision, what
/// detection found, and whether the decision was forced (timeout, `peek_max`, or the client's end
/// of stream while undecided). `Err` names why the connection closes instead: the client closed
/// before sending anything, or its socket failed.
async fn peek(
    tcp: &TcpStream,
    buf: &mut Vec<u8>,
    routing: &TcpRouting,
    client: IpAddr,
    proxy_header: bool,
) -> Result<(Decision, Detection, bool), &'static str> {
    if buf.is_empty() {
        if let Some(decision) = routing.decides_without_bytes(client, proxy_header) {
            return Ok((decision, Detection::NeedMore, false));
        }
    }
    let deadline = tokio::time::Instant::now() + routing.peek_timeout;
    let mut last = false;
    loop {
        let detection = if buf.is_empty() {
            Detection::NeedMore
        } else {
            detect(buf, routing.wants)
        };
        last |= buf.len() >= routing.peek_max;
        let peeked = Peeked {
            bytes: buf,
            detection: &detection,
            client,
            proxy_header,
            last,
        };
        match routing.decide(&peeked) {
            Decision::Wait => {}
            decided => return Ok((decided, detection, last)),
        }
        match tokio::time::timeout_at(deadline, read_some(tcp, buf, routing.peek_max)).await {
            Ok(Ok(0)) if buf.is_empty() => return Err("client_closed"),
            Ok(Ok(0)) | Err(_) => last = true,
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err("client_error"),
        }
    }
}

/// Reads what the socket has (at most up to `max` bytes in `buf`); 0 at end of stream.
async fn read_some(tcp: &TcpStream, buf: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
    let room = max.saturating_sub(buf.len()).max(1);
    buf.reserve(room.min(4096));
    loop {
        tcp.readable().await?;
        match tcp.try_read_buf(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}
