//! One UDP session: a client address bound to one target through a socket connected to it. Its
//! task relays the target's replies back to the client and ends the session when it idles; a
//! target that refuses (ICMP port unreachable) is replaced by another, and the last datagram not
//! yet answered is sent to it.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use rampart_model::metrics::UpstreamErrorKind;
use rampart_model::Upstream;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::{now_both, send_now, Relay, DRAIN_GRACE};
use crate::balance::Tried;
use crate::slot::ConnSlot;
use crate::worker::{SharedSnapshot, WorkerContext};

/// Why a session ended, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionEnd {
    /// Nothing moved either way for the listener's idle timeout.
    Idle,
    /// Every target it tried refused (or none was left to try).
    TargetRefused,
    /// Its listener stopped (drain, reload, upgrade) and it idled for the grace period.
    Drained,
    /// It relayed the listener's `session_responses` replies.
    Answered,
}

impl SessionEnd {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            SessionEnd::Idle => "idle_timeout",
            SessionEnd::TargetRefused => "target_refused",
            SessionEnd::Drained => "drained",
            SessionEnd::Answered => "answered",
        }
    }
}

pub(super) struct Session {
    snapshot: Rc<SharedSnapshot>,
    pub upstream: usize,
    target: Cell<usize>,
    pub client: SocketAddr,
    socket: RefCell<Rc<UdpSocket>>,
    /// The PROXY v2 header every datagram to the target starts with, if the upstream asks.
    header: Option<Vec<u8>>,
    idle_timeout: Duration,
    pub opened: Instant,
    pub opened_wall: SystemTime,
    last: Cell<Instant>,
    pub first_reply: Cell<Option<Instant>>,
    pub bytes_up: Cell<u64>,
    pub bytes_down: Cell<u64>,
    /// The last datagram from the client that no reply followed yet (sent again to another
    /// target if its target refuses it).
    unanswered: RefCell<Vec<u8>>,
    /// The listener stopped: the session ends once idle for the grace period.
    winding_down: Cell<bool>,
    /// Replies each datagram from the client expects (`session_responses`), if the session ends
    /// when all came; and how many are still to come.
    responses_each: Option<u32>,
    responses_due: Cell<u32>,
    /// A send found the target's refusal pending (and took it off the socket): the session
    /// task is to move on.
    refused: Cell<bool>,
    wake: Notify,
    _slot: ConnSlot,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        snapshot: Rc<SharedSnapshot>,
        upstream: usize,
        target: usize,
        client: SocketAddr,
        socket: UdpSocket,
        header: Option<Vec<u8>>,
        (idle_timeout, responses): (Duration, Option<u32>),
        slot: ConnSlot,
    ) -> Session {
        let (opened, opened_wall) = now_both();
        Session {
            snapshot,
            upstream,
            target: Cell::new(target),
            client,
            socket: RefCell::new(Rc::new(socket)),
            header,
            idle_timeout,
            opened,
            opened_wall,
            last: Cell::new(opened),
            first_reply: Cell::new(None),
            bytes_up: Cell::new(0),
            bytes_down: Cell::new(0),
            unanswered: RefCell::new(Vec::new()),
            winding_down: Cell::new(false),
            responses_each: responses,
            responses_due: Cell::new(0),
            refused: Cell::new(false),
            wake: Notify::new(),
            _slot: slot,
        }
    }

    pub(super) fn snapshot(&self) -> &SharedSnapshot {
        &self.snapshot
    }

    pub(super) fn target(&self) -> usize {
        self.target.get()
    }

    /// The listener stopped: end once idle for the grace period.
    pub(super) fn wind_down(&self) {
        self.winding_down.set(true);
        self.wake.notify_one();
    }

    /// Sends a client's datagram to the session's target (a datagram the socket cannot take now
    /// is dropped, as a full network would drop it).
    pub(super) fn forward(&self, ctx: &WorkerContext, data: &[u8]) {
        self.last.set(Instant::now());
        if let Some(each) = self.responses_each {
            self.responses_due.set(self.responses_due.get().saturating_add(each));
        }
        self.bytes_up.set(self.bytes_up.get() + data.len() as u64);
        {
            let mut kept = self.unanswered.borrow_mut();
            kept.clear();
            kept.extend_from_slice(data);
        }
        // A datagram the socket cannot take now is dropped, as a full network would drop it. A
        // send that meets the target's pending refusal takes it: the task must hear of it.
        if let Err(e) = self.send(data) {
            if e.kind() == io::ErrorKind::ConnectionRefused {
                self.refused.set(true);
                self.wake.notify_one();
            }
        }
        let _ = ctx;
    }

    fn send(&self, data: &[u8]) -> io::Result<usize> {
        let socket = self.socket.borrow();
        match &self.header {
            None => send_now(&socket, data, None),
            Some(header) => {
                let mut datagram = Vec::with_capacity(header.len() + data.len());
                datagram.extend_from_slice(header);
                datagram.extend_from_slice(data);
                send_now(&socket, &datagram, None)
            }
        }
    }

    /// When the session is to end if nothing moves before.
    fn deadline(&self) -> Instant {
        let idle = match self.winding_down.get() {
            true => self.idle_timeout.min(DRAIN_GRACE),
            false => self.idle_timeout,
        };
        self.last.get() + idle
    }

    /// The target refused: it is counted as a failed connect, and the session moves to another
    /// target with the datagram not yet answered. `false` when no other target is left.
    fn move_on(&self, ctx: &WorkerContext, tried: &mut Tried) -> bool {
        let snapshot = &self.snapshot;
        let Some(up) = snapshot.upstreams.get(self.upstream) else {
            return false;
        };
        let failed = self.target.get();
        tried.push(failed);
        if let Some(t) = up.targets.get(failed) {
            t.health.record_connect_failure(&up.passive_health);
            t.metrics.worker(ctx.id).error(UpstreamErrorKind::Connect).add(1);
        }
        let key = up.client_key(self.client.ip());
        // With no other target (or no socket toward it) the session ends on the failed one,
        // whose open count its end lowers.
        let Some(next) = ctx.pick(snapshot, self.upstream, key, tried, false) else {
            return false;
        };
        let Ok(socket) = connect(up, next) else {
            return false;
        };
        ctx.track_open(snapshot, self.upstream, failed, false);
        if let Some(t) = up.targets.get(failed) {
            t.metrics.worker(ctx.id).active.down();
        }
        up.metrics.worker(ctx.id).retries.add(1);
        *self.socket.borrow_mut() = Rc::new(socket);
        self.target.set(next);
        ctx.track_open(snapshot, self.upstream, next, true);
        if let Some(t) = up.targets.get(next) {
            let cells = t.metrics.worker(ctx.id);
            cells.opened.add(1);
            cells.active.up();
        }
        let kept = self.unanswered.borrow().clone();
        if !kept.is_empty() {
            let _ = self.send(&kept);
        }
        true
    }
}

/// A socket connected to target `target` of `up`, from an ephemeral port of its family: made
/// non-blocking by `socket(2)` itself and bound by `connect(2)`, so a session costs two system
/// calls here (and the reactor's registration), not four.
pub(super) fn connect(up: &Upstream, target: usize) -> io::Result<UdpSocket> {
    let addr = up
        .targets
        .get(target)
        .ok_or_else(|| io::Error::other("no such target"))?
        .addr;
    let kind = socket2::Type::DGRAM.nonblocking().cloexec();
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), kind, Some(socket2::Protocol::UDP))?;
    socket.connect(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// Relays the target's replies to the client until the session idles out (or every target
/// refused). Returns the client's address, to find the session by, and why it ended.
pub(super) async fn run(relay: &Relay<'_>, s: Rc<Session>) -> (SocketAddr, SessionEnd) {
    let mut tried = Tried::default();
    let end = loop {
        let socket = s.socket.borrow().clone();
        let deadline = s.deadline();
        tokio::select! {
            // A refusal (ICMP port unreachable) is a socket error, not readable data: asked too.
            ready = socket.ready(Interest::READABLE | Interest::ERROR) => {
                let result = match ready {
                    // The socket's error, taken off it (tokio reads no data when it is set).
                    Ok(ready) if ready.is_error() => match socket2::SockRef::from(&*socket).take_error() {
                        Ok(Some(e)) | Err(e) => Err(e),
                        Ok(None) => relay_replies(relay, &s, &socket),
                    },
                    Ok(_) => relay_replies(relay, &s, &socket),
                    Err(e) => Err(e),
                };
                match result {
                    Ok(()) if s.responses_each.is_some() && s.responses_due.get() == 0 => break SessionEnd::Answered,
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        if !s.move_on(relay.ctx, &mut tried) {
                            break SessionEnd::TargetRefused;
                        }
                    }
                    Err(_) => break SessionEnd::TargetRefused,
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                if Instant::now() >= s.deadline() {
                    break match s.winding_down.get() {
                        true => SessionEnd::Drained,
                        false => SessionEnd::Idle,
                    };
                }
            }
            _ = s.wake.notified() => {
                if s.refused.replace(false) && !s.move_on(relay.ctx, &mut tried) {
                    break SessionEnd::TargetRefused;
                }
            }
        }
    };
    (s.client, end)
}

/// Sends every reply waiting on the target's socket to the client, from the listener's socket.
fn relay_replies(relay: &Relay<'_>, s: &Session, socket: &UdpSocket) -> io::Result<()> {
    let mut scratch = relay.scratch.borrow_mut();
    loop {
        let n = match socket.try_recv(&mut scratch[..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        s.last.set(now);
        if s.first_reply.get().is_none() {
            s.first_reply.set(Some(now));
            // The target answers: a refusal streak it had is over.
            let target = s
                .snapshot
                .upstreams
                .get(s.upstream)
                .and_then(|u| u.targets.get(s.target()));
            if let Some(t) = target {
                t.health.record_connect_success();
            }
        }
        s.unanswered.borrow_mut().clear();
        s.bytes_down.set(s.bytes_down.get() + n as u64);
        // A reply the socket cannot take now is dropped, as the network would.
        let _ = send_now(&relay.socket, &scratch[..n], Some(s.client));
        if s.responses_each.is_some() {
            let due = s.responses_due.get().saturating_sub(1);
            s.responses_due.set(due);
            if due == 0 {
                // Every datagram answered: the session ends with this reply.
                return Ok(());
            }
        }
    }
}
