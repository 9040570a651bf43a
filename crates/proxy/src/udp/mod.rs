//! UDP load balancing: a listener's datagrams, one worker's share of them (SO_REUSEPORT spreads
//! client addresses over the workers' sockets). Datagrams from one client address form a
//! session bound to one target, chosen by the upstream's balancer (consistent hashing on the
//! client's address for DNS-style traffic), through a socket of its own connected to that
//! target; the target's replies go back to the client from the listener's socket, so the client
//! sees them come from the address it wrote to. A session ends when nothing moves either way for
//! the listener's `idle_timeout`.
//!
//! One task serves a socket and all its sessions ([`serve`]); no buffer is held per session
//! (each reads into the task's one scratch buffer when its socket is readable). A datagram
//! refused by a dead target (ICMP port unreachable, seen as `ECONNREFUSED` on the connected
//! socket) takes the target out as a failed connect would and is sent once more, to another
//! target ([`session`]). With `send_proxy_protocol = "v2"` on the upstream each datagram to a
//! target starts with a PROXY v2 header (its protocol byte says UDP).
//!
//! On drain (and once a reload removed the listener, or a binary upgrade handed its socket to a
//! new process) the socket is no longer read; sessions live on until they idle for
//! [`DRAIN_GRACE`] (or their idle timeout, if shorter), so replies to datagrams already relayed
//! still reach their clients.

mod session;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{FuturesUnordered, StreamExt};
use rampart_model::metrics::RefusedReason;
use rampart_model::{ListenerKey, Transport};
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use crate::balance::Tried;
use crate::slot::{BoundListener, ConnSlot};
use crate::worker::{bump, WorkerContext};
use session::{Session, SessionEnd};

/// How long a session must idle before it ends while its listener stops.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The largest datagram (UDP's own limit), with room in front for a PROXY v2 header.
const SCRATCH: usize = 65_536 + 64;

/// The most datagrams read from the listening socket in one turn: then the sessions relay their
/// replies before more is read (a flood of new datagrams does not starve them).
const READ_BATCH: usize = 64;

/// How often the task looks at drain.
const TICK: Duration = Duration::from_millis(250);

/// Stops one socket's relay: no more reading; its sessions end once idle ([`DRAIN_GRACE`]).
#[derive(Default)]
pub struct Stop {
    stopped: Cell<bool>,
    wake: Notify,
}

impl Stop {
    pub fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify_one();
    }
}

/// Relays the datagrams of the UDP listener bound to `addr` that reach `socket` (this worker's
/// socket of it), until stopped or drained and its last session ended.
pub async fn serve(ctx: &WorkerContext, addr: SocketAddr, socket: std::net::UdpSocket, stop: &Stop) {
    let socket = match UdpSocket::from_std(socket) {
        Ok(s) => Rc::new(s),
        Err(e) => {
            tracing::error!("worker {}: cannot use UDP socket {addr}: {e}", ctx.id);
            return;
        }
    };
    let Some(bound) = BoundListener::new(&ctx.counters, &ctx.snapshot(), Transport::Udp, addr) else {
        return;
    };
    let relay = Relay {
        ctx,
        key: ListenerKey::Bound(Transport::Udp, addr),
        socket,
        bound,
        scratch: RefCell::new(vec![0; SCRATCH]),
    };
    let mut table: HashMap<SocketAddr, Rc<Session>> = HashMap::new();
    let mut running = FuturesUnordered::new();
    let mut tick = tokio::time::interval(TICK);
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            Some((client, end)) = running.next(), if !running.is_empty() => {
                if let Some(session) = table.remove(&client) {
                    relay.ended(&session, end);
                }
            }
            ready = relay.socket.readable(), if reading => {
                if ready.is_ok() {
                    relay.read_all(&mut table, &mut running);
                }
            }
            _ = stop.wake.notified() => {}
            _ = tick.tick() => {}
        }
        if reading && (stop.stopped.get() || ctx.draining()) {
            reading = false;
            for session in table.values() {
                session.wind_down();
            }
        }
        if !reading && running.is_empty() {
            break;
        }
    }
}

/// What one socket's sessions share.
struct Relay<'a> {
    ctx: &'a WorkerContext,
    key: ListenerKey,
    socket: Rc<UdpSocket>,
    bound: Rc<BoundListener>,
    /// Every datagram is read into it, both ways.
    scratch: RefCell<Vec<u8>>,
}

type Running<'a> =
    FuturesUnordered<std::pin::Pin<Box<dyn std::future::Future<Output = (SocketAddr, SessionEnd)> + 'a>>>;

impl<'a> Relay<'a> {
    /// Reads the datagrams waiting on the listener's socket (at most [`READ_BATCH`]; the socket
    /// stays ready for the next turn) and relays each.
    fn read_all(&'a self, table: &mut HashMap<SocketAddr, Rc<Session>>, running: &mut Running<'a>) {
        for _ in 0..READ_BATCH {
            let mut scratch = self.scratch.borrow_mut();
            let (n, client) = match self.socket.try_recv_from(&mut scratch[..]) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // An ICMP error for an earlier reply of ours; nothing to do with this datagram.
                Err(_) => continue,
            };
            let session = match table.get(&client) {
                Some(s) => s.clone(),
                None => match self.open(client) {
                    Some(s) => {
                        table.insert(client, s.clone());
                        running.push(Box::pin(session::run(self, s.clone())));
                        s
                    }
                    None => continue,
                },
            };
            session.forward(self.ctx, &scratch[..n]);
        }
    }

    /// A new session for `client`: a place in the listener's limit, a target, a socket connected
    /// to it. `None` (the datagram is dropped, and counted) when the limit is reached, no target
    /// is healthy or the socket cannot be made.
    fn open(&self, client: SocketAddr) -> Option<Rc<Session>> {
        let snapshot = self.ctx.snapshot();
        let listener = snapshot
            .listener_index(&self.key)
            .and_then(|i| snapshot.listeners.get(i))?;
        let upstream = listener.udp_upstream()?;
        let cells = listener.metrics.worker(self.ctx.id);
        cells.accepted.add(1);
        bump(&self.ctx.counters.accepted, 1);
        let Some(slot) = ConnSlot::take(&self.bound, listener.max_connections) else {
            cells.refused(RefusedReason::Limit).add(1);
            bump(&self.ctx.counters.rejected_over_limit, 1);
            return None;
        };
        let up = snapshot.upstreams.get(upstream)?;
        let key = up.client_key(client.ip());
        let Some(target) = self.ctx.pick(&snapshot, upstream, key, &Tried::default(), true) else {
            bump(&self.ctx.counters.no_healthy_target, 1);
            up.metrics.worker(self.ctx.id).no_target.add(1);
            return None;
        };
        let socket = match session::connect(up, target) {
            Ok(s) => s,
            Err(e) => {
                let name = up.targets.get(target).map_or("?", |t| t.name.as_str());
                tracing::debug!("UDP session from {client}: no socket toward target {name}: {e}");
                return None;
            }
        };
        // PROXY v2 (v1 has no way to say UDP; the config refuses it for UDP upstreams).
        let header = up.send_proxy_protocol.map(|_| {
            let destination = self.socket.local_addr().unwrap_or(self.bound.bind);
            let addresses = rampart_proto::proxy_protocol::ProxyAddresses {
                source: client,
                destination,
            };
            let mut header = Vec::with_capacity(64);
            rampart_proto::proxy_protocol::encode_v2_for(&addresses, true, &mut header);
            header
        });
        let session = Session::new(
            snapshot.clone(),
            upstream,
            target,
            client,
            socket,
            header,
            (listener.idle_timeout, listener.udp_responses()),
            slot,
        );
        self.ctx.track_open(&snapshot, upstream, target, true);
        if let Some(t) = up.targets.get(target) {
            let target_cells = t.metrics.worker(self.ctx.id);
            target_cells.opened.add(1);
            target_cells.active.up();
        }
        Some(Rc::new(session))
    }

    /// Counts a session that ended and writes its record.
    fn ended(&self, s: &Session, end: SessionEnd) {
        let snapshot = s.snapshot();
        let target = s.target();
        self.ctx.track_open(snapshot, s.upstream, target, false);
        let up = snapshot.upstreams.get(s.upstream);
        if let Some(t) = up.and_then(|u| u.targets.get(target)) {
            t.metrics.worker(self.ctx.id).active.down();
        }
        let (up_bytes, down_bytes) = (s.bytes_up.get(), s.bytes_down.get());
        bump(&self.ctx.counters.bytes_up, up_bytes);
        bump(&self.ctx.counters.bytes_down, down_bytes);
        if let Some(listener) = snapshot
            .listener_index(&self.key)
            .and_then(|i| snapshot.listeners.get(i))
        {
            let cells = listener.metrics.worker(self.ctx.id);
            cells.bytes_in.add(up_bytes);
            cells.bytes_out.add(down_bytes);
            cells.session_duration.observe(s.opened.elapsed());
            let Some(path) = &snapshot.session_log else { return };
            let record = crate::session_log::SessionRecord {
                client: s.client,
                listener: &listener.name,
                upstream: up.map(|u| u.name.as_str()),
                target: up.and_then(|u| u.targets.get(target)).map(|t| t.name.as_str()),
                accepted: s.opened,
                accepted_wall: s.opened_wall,
                connected: Some(s.opened),
                first_byte_up: Some(s.opened),
                first_byte_down: s.first_reply.get(),
                bytes_up: up_bytes,
                bytes_down: down_bytes,
                close: end.as_str(),
                tls: None,
                routed: None,
            };
            self.ctx.push_log_line(path, |out| record.write(out));
        }
    }
}

/// Sends `data` on `socket` (connected; to `to` when given) with one system call now. Tokio's
/// own `try_send` answers `WouldBlock` until the reactor has seen the socket writable once,
/// which would drop a new session's first datagram.
fn send_now(socket: &UdpSocket, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
    let socket = socket2::SockRef::from(socket);
    match to {
        Some(to) => socket.send_to(data, &to.into()),
        None => socket.send(data),
    }
}

/// The wall clock and the monotonic one, read together.
fn now_both() -> (Instant, SystemTime) {
    (Instant::now(), SystemTime::now())
}
