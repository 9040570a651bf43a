//! What a connection holds once accepted: its place in the listener's connection limit (one RAII
//! type, whoever ends the connection), its stream and its client. The connection stage
//! ([`crate::conn`]) makes them; the protocols and the parking lot carry them.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use rampart_model::{ListenerKey, Snapshot, Transport};

use crate::counters::{bump, drop_by, WorkerCounters};
use crate::stream::Stream;

/// One worker's accepting socket for one listener address, shared by the connections it accepted.
pub struct BoundListener {
    pub bind: SocketAddr,
    /// What the socket carries: a TCP and a UDP listener may share an address.
    pub transport: Transport,
    /// Open connections of this listener across all workers (kept across reloads).
    open: Arc<AtomicUsize>,
    counters: Arc<WorkerCounters>,
}

impl BoundListener {
    /// The listener of `snapshot` bound to `bind` for `transport`, for the worker whose counters
    /// are `counters`.
    pub fn new(
        counters: &Arc<WorkerCounters>,
        snapshot: &Snapshot,
        transport: Transport,
        bind: SocketAddr,
    ) -> Option<Rc<BoundListener>> {
        let listener = snapshot
            .listeners
            .iter()
            .find(|l| l.is(&ListenerKey::Bound(transport, bind)))?;
        Some(Rc::new(BoundListener {
            bind,
            transport,
            open: listener.open_connections.clone(),
            counters: counters.clone(),
        }))
    }

    /// This listener's index in `snapshot`, if the snapshot still has it.
    pub fn index_in(&self, snapshot: &Snapshot) -> Option<usize> {
        snapshot.listener_index(&ListenerKey::Bound(self.transport, self.bind))
    }
}

/// A connection's place in its listener's limit and in the worker's `open` gauge, given back when
/// the connection ends, whichever part of the worker ends it (a task, or the parking lot).
pub struct ConnSlot(Rc<BoundListener>);

impl ConnSlot {
    /// Takes a place, or `None` when `max` are taken.
    pub(crate) fn take(listener: &Rc<BoundListener>, max: usize) -> Option<ConnSlot> {
        if listener.open.fetch_add(1, Relaxed) >= max {
            listener.open.fetch_sub(1, Relaxed);
            return None;
        }
        bump(&listener.counters.open, 1);
        Some(ConnSlot(listener.clone()))
    }

    /// The listener the connection came in on.
    pub fn listener(&self) -> &BoundListener {
        &self.0
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
        drop_by(&self.0.counters.open, 1);
    }
}

/// A connection past the connection stage.
pub struct Conn {
    pub stream: Stream,
    /// The client: the peer, or the source address a trusted PROXY header named.
    pub client: SocketAddr,
    /// Whether `client` came from a PROXY header (and so cannot be asked of the socket again).
    pub client_from_header: bool,
    /// Bytes already read from the client (behind a PROXY header, or peeked to choose a route):
    /// the start of the protocol's stream.
    pub early: Vec<u8>,
    pub slot: ConnSlot,
    /// The listener a TCP route handed the connection to, which serves it instead of the one
    /// that accepted it (whose limit it still counts in).
    pub handed_to: Option<ListenerKey>,
}

impl Conn {
    /// The listener that serves this connection.
    pub fn listener_key(&self) -> ListenerKey {
        match &self.handed_to {
            Some(key) => key.clone(),
            None => ListenerKey::Bound(Transport::Tcp, self.slot.listener().bind),
        }
    }
}
