//! Each worker's HTTP/2 connections to targets (`protocol = "h2c"`, `"h2"`, or `"auto"` where
//! ALPN chose h2). Unlike HTTP/1 connections they are shared, not taken: a request opens a stream
//! on the first live connection for its key that has room under the peer's
//! SETTINGS_MAX_CONCURRENT_STREAMS, and a new connection is made only when none has. A
//! connection that got GOAWAY, failed, or was found closed is dropped from the pool; its
//! accepted streams finish on it (its task keeps driving it: [`crate::http::h2::upstream`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::h2::upstream::{self, ConnHandle};
use super::pool::{AddrHasher, PoolKey};
use crate::stream::Stream;

/// One HTTP/2 connection to a target.
#[derive(Clone)]
pub struct H2Conn {
    pub(crate) handle: Rc<ConnHandle>,
    /// Set when it is not to take new streams (GOAWAY, an error).
    retired: Rc<Cell<bool>>,
    /// When it last had no stream open (for the idle timeout).
    idle_since: Rc<Cell<Option<Instant>>>,
    /// Streams of this worker's requests open on it.
    open: Rc<Cell<usize>>,
}

/// A stream's place on a connection, given back when the request is done with it.
pub struct OpenStream(Rc<Cell<usize>>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl H2Conn {
    /// Whether another stream may open on it now.
    fn has_room(&self) -> bool {
        !self.is_closed() && self.handle.can_open()
    }

    /// Counts a stream opened on it until the returned guard drops.
    pub fn open_stream(&self) -> OpenStream {
        self.open.set(self.open.get() + 1);
        OpenStream(self.open.clone())
    }

    fn is_closed(&self) -> bool {
        self.retired.get() || self.handle.closed.get()
    }

    /// Marks it unusable for new streams (after GOAWAY or an error).
    pub fn retire(&self) {
        self.retired.set(true);
    }
}

/// Starts HTTP/2 on a new connection (the preface and SETTINGS, with windows large enough for
/// one stream to fill a fast path, as on the client side), driven by a task of its own until it
/// ends.
pub fn handshake(stream: Stream) -> H2Conn {
    let handle = upstream::handshake(
        stream,
        rampart_model::defaults::HTTP2_STREAM_WINDOW,
        rampart_model::defaults::HTTP2_CONNECTION_WINDOW,
    );
    H2Conn {
        handle: Rc::new(handle),
        retired: Rc::new(Cell::new(false)),
        idle_since: Rc::new(Cell::new(Some(Instant::now()))),
        open: Rc::new(Cell::new(0)),
    }
}

#[derive(Default)]
pub struct H2Pool {
    /// By target, hashed as the HTTP/1 pool hashes it (not SipHash: this runs per request).
    conns: HashMap<PoolKey, Vec<H2Conn>, BuildHasherDefault<AddrHasher>>,
    /// Targets a request is connecting to now: the others wait for that connection rather than
    /// each opening one (a burst of requests to a target with no connection would otherwise open
    /// a connection per request).
    connecting: HashMap<PoolKey, Rc<Notify>, BuildHasherDefault<AddrHasher>>,
}

/// A connect in progress to a target ([`H2Pool::begin_connect`]): when it ends, with a
/// connection in the pool or not, the requests waiting for it look again.
pub struct Connecting<'a> {
    pool: &'a RefCell<H2Pool>,
    key: PoolKey,
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        if let Some(done) = self.pool.borrow_mut().connecting.remove(&self.key) {
            done.notify_waiters();
        }
    }
}

impl H2Pool {
    /// A live connection for `key` with room for another stream.
    pub fn get(&mut self, key: &PoolKey) -> Option<H2Conn> {
        let list = self.conns.get_mut(key)?;
        list.retain(|c| !c.is_closed());
        let conn = list.iter().find(|c| c.has_room())?.clone();
        conn.idle_since.set(None);
        Some(conn)
    }

    /// Says a request is connecting to `key`'s target, until the guard drops; `None` when one
    /// already is: then wait on what [`H2Pool::connecting`] gives.
    pub fn begin_connect(pool: &RefCell<H2Pool>, key: PoolKey) -> Option<Connecting<'_>> {
        let mut this = pool.borrow_mut();
        if this.connecting.contains_key(&key) {
            return None;
        }
        this.connecting.insert(key, Rc::new(Notify::new()));
        Some(Connecting { pool, key })
    }

    /// What a request waits on while another connects to `key`'s target.
    pub fn connecting(&self, key: &PoolKey) -> Option<Rc<Notify>> {
        self.connecting.get(key).cloned()
    }

    /// Keeps a new connection for later requests.
    pub fn add(&mut self, key: PoolKey, conn: H2Conn) {
        self.conns.entry(key).or_default().push(conn);
    }

    /// Closes connections that ended, and those without streams for longer than `max_idle`.
    pub fn sweep(&mut self, max_idle: Duration) {
        for list in self.conns.values_mut() {
            list.retain(|c| {
                if c.is_closed() {
                    return false;
                }
                if c.open.get() > 0 {
                    c.idle_since.set(None);
                    return true;
                }
                match c.idle_since.get() {
                    None => {
                        c.idle_since.set(Some(Instant::now()));
                        true
                    }
                    Some(since) => since.elapsed() <= max_idle,
                }
            });
        }
        self.conns.retain(|_, list| !list.is_empty());
    }

    /// Drops the connections to targets for which `keep` says no (after a reload).
    pub fn retain_targets(&mut self, keep: impl Fn(SocketAddr) -> bool) {
        self.conns.retain(|key, _| keep(key.target));
    }
}
