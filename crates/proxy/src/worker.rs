//! What one worker owns. A worker is one thread running a single-threaded runtime, so its context
//! is shared among its own tasks through `Rc` and mutated through short `RefCell` borrows that are
//! never held across an `.await`.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::balance::{BalancerState, Tried};
use crate::free_list::FreeList;
use crate::pipes::Pipe;
use crate::session_log::SessionLogSink;
use rampart_model::Snapshot;

/// Pooled buffers and pipes beyond this many are freed rather than kept (and those unused for a
/// housekeeping period are freed too, see [`WorkerContext::trim_pools`]).
const POOL_MAX: usize = 1024;
/// Session records are handed to the writer thread once a worker has this many bytes of them.
const SESSION_LOG_BATCH: usize = 32 * 1024;

/// One worker's counters. Written only by the owning worker (plain load+store, no locked
/// instruction), read by the control plane. Aligned so that two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerCounters {
    pub accepted: AtomicU64,
    pub rejected_over_limit: AtomicU64,
    pub connect_failures: AtomicU64,
    pub no_healthy_target: AtomicU64,
    pub proxy_header_errors: AtomicU64,
    pub open: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    /// HTTP requests answered (proxied or local).
    pub http_requests: AtomicU64,
    /// New upstream connections opened for HTTP requests.
    pub upstream_connects: AtomicU64,
    /// HTTP requests sent on a pooled (reused) upstream connection.
    pub upstream_reuses: AtomicU64,
}

/// Adds `n` to a counter that only this thread writes.
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Subtracts `n` from a counter that only this thread writes.
#[inline]
pub fn drop_by(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_sub(n), Relaxed);
}

/// A worker's private state.
pub struct WorkerContext {
    pub id: usize,
    pub counters: Arc<WorkerCounters>,
    /// Whether bulk transfers may switch to splice(2).
    pub splice: bool,
    buffers: FreeList<Box<[u8]>>,
    http_buffers: FreeList<Vec<u8>>,
    out_buffers: FreeList<Vec<u8>>,
    pipes: FreeList<Pipe>,
    /// Idle keep-alive upstream connections of this worker.
    pub upstream_pool: RefCell<crate::http::pool::UpstreamPool>,
    /// A field list lent to whichever request is parsing a response head (empty while lent).
    pub response_fields: std::cell::Cell<Vec<rampart_proto::h1::Field>>,
    /// Idle keep-alive HTTP client connections held outside any task.
    pub parking: crate::http::park::ParkingLot,
    balancers: RefCell<Balancers>,
    session_log: Option<SessionLogSink>,
    /// Lines waiting to be handed to the writer, one buffer per file.
    log_buffers: RefCell<Vec<(Arc<std::path::Path>, Vec<u8>)>>,
}

struct Balancers {
    generation: u64,
    states: Vec<BalancerState>,
}

impl WorkerContext {
    pub fn new(id: usize, counters: Arc<WorkerCounters>, session_log: Option<SessionLogSink>) -> Self {
        WorkerContext {
            id,
            counters,
            splice: cfg!(target_os = "linux"),
            buffers: FreeList::new(POOL_MAX),
            http_buffers: FreeList::new(POOL_MAX),
            out_buffers: FreeList::new(POOL_MAX),
            pipes: FreeList::new(POOL_MAX),
            upstream_pool: RefCell::new(Default::default()),
            response_fields: Default::default(),
            parking: Default::default(),
            balancers: RefCell::new(Balancers {
                generation: u64::MAX,
                states: Vec::new(),
            }),
            session_log,
            log_buffers: RefCell::new(Vec::new()),
        }
    }

    /// A relay buffer of `size` bytes from the pool; it goes back when the guard drops. Pooled
    /// buffers of another size (left from before a reload changed it) are freed.
    pub fn buffer(&self, size: usize) -> PooledBuffer<'_> {
        let buf = loop {
            match self.buffers.take() {
                Some(b) if b.len() == size => break b,
                Some(_) => continue,
                None => break vec![0u8; size].into_boxed_slice(),
            }
        };
        PooledBuffer {
            ctx: self,
            buf: Some(buf),
        }
    }

    /// An HTTP read buffer (initialised, [`HTTP_BUFFER_SIZE`](crate::http::iobuf::HTTP_BUFFER_SIZE) bytes).
    pub(crate) fn take_http_buffer(&self) -> Vec<u8> {
        self.http_buffers
            .take()
            .unwrap_or_else(|| vec![0u8; crate::http::iobuf::HTTP_BUFFER_SIZE])
    }

    pub(crate) fn give_http_buffer(&self, mut buf: Vec<u8>) {
        // A buffer grown for a large head goes back at the standard size.
        buf.truncate(crate::http::iobuf::HTTP_BUFFER_SIZE);
        buf.shrink_to(crate::http::iobuf::HTTP_BUFFER_SIZE);
        self.http_buffers.give(buf);
    }

    /// An empty output buffer (for heads being written).
    pub(crate) fn take_out_buffer(&self) -> Vec<u8> {
        self.out_buffers.take().unwrap_or_else(|| Vec::with_capacity(4096))
    }

    pub(crate) fn give_out_buffer(&self, mut buf: Vec<u8>) {
        if buf.capacity() <= 64 * 1024 {
            buf.clear();
            self.out_buffers.give(buf);
        }
    }

    pub(crate) fn take_pipe(&self) -> std::io::Result<Pipe> {
        match self.pipes.take() {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }

    pub(crate) fn return_pipe(&self, pipe: Pipe) {
        if pipe.is_empty() {
            self.pipes.give(pipe);
        }
    }

    /// Chooses a target of `upstream`; `key` is the consistent-hashing key (see
    /// [`BalancerState::pick`]).
    pub fn pick(&self, snapshot: &Snapshot, upstream: usize, key: u64, tried: &Tried) -> Option<usize> {
        self.with_balancer(snapshot, upstream, |b| {
            b.pick(&snapshot.upstreams[upstream], key, tried)
        })
    }

    /// Tells a latency-aware balancer how long `target` took to answer.
    pub fn observe_latency(&self, snapshot: &Snapshot, upstream: usize, target: usize, took: std::time::Duration) {
        self.with_balancer(snapshot, upstream, |b| b.observe_latency(target, took));
    }

    /// Tells the balancer a connection to `target` opened (`true`) or closed (`false`).
    pub fn track_open(&self, snapshot: &Snapshot, upstream: usize, target: usize, open: bool) {
        let mut b = self.balancers.borrow_mut();
        // A connection that outlived its snapshot's balancer state has nothing to update.
        if b.generation == snapshot.generation {
            if open {
                b.states[upstream].opened(target);
            } else {
                b.states[upstream].closed(target);
            }
        }
    }

    fn with_balancer<R>(&self, snapshot: &Snapshot, upstream: usize, f: impl FnOnce(&mut BalancerState) -> R) -> R {
        let mut b = self.balancers.borrow_mut();
        if b.generation != snapshot.generation {
            let seed = (self.id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            b.states = snapshot
                .upstreams
                .iter()
                .map(|u| BalancerState::new(u.targets.len(), seed))
                .collect();
            b.generation = snapshot.generation;
        }
        f(&mut b.states[upstream])
    }

    /// Frees pooled buffers and pipes that went unused since the last call (called periodically).
    pub fn trim_pools(&self) {
        self.buffers.trim();
        self.http_buffers.trim();
        self.out_buffers.trim();
        self.pipes.trim();
    }

    /// Appends one line for the log file `path`; hands a full batch to the writer thread.
    pub fn push_log_line(&self, path: &Arc<std::path::Path>, write: impl FnOnce(&mut Vec<u8>)) {
        let Some(sink) = &self.session_log else { return };
        let mut buffers = self.log_buffers.borrow_mut();
        let index = match buffers.iter().position(|(p, _)| Arc::ptr_eq(p, path) || p == path) {
            Some(i) => i,
            None => {
                buffers.push((path.clone(), Vec::new()));
                buffers.len() - 1
            }
        };
        let buf = &mut buffers[index].1;
        write(buf);
        if buf.len() >= SESSION_LOG_BATCH {
            sink.send(path.clone(), std::mem::take(buf));
        }
    }

    /// Hands buffered log lines to the writer thread (called periodically and at exit).
    pub fn flush_log_lines(&self) {
        if let Some(sink) = &self.session_log {
            for (path, buf) in self.log_buffers.borrow_mut().iter_mut() {
                if !buf.is_empty() {
                    sink.send(path.clone(), std::mem::take(buf));
                }
            }
        }
    }
}

/// A buffer borrowed from a worker's pool.
pub struct PooledBuffer<'a> {
    ctx: &'a WorkerContext,
    buf: Option<Box<[u8]>>,
}

impl Deref for PooledBuffer<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or(&[])
    }
}

impl DerefMut for PooledBuffer<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for PooledBuffer<'_> {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.ctx.buffers.give(buf);
        }
    }
}

/// Holds one place in a listener's connection limit (shared by all workers).
pub struct OpenSlot<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> OpenSlot<'a> {
    /// Keeps the place taken without this guard: whoever ends the connection releases it
    /// later through [`OpenSlot::adopt`].
    pub fn keep(self) {
        std::mem::forget(self);
    }

    /// The guard of a place taken earlier and kept with [`OpenSlot::keep`].
    pub fn adopt(open: &'a std::sync::atomic::AtomicUsize) -> Self {
        OpenSlot(open)
    }

    /// Takes a place, or `None` when `max` are taken.
    pub fn take(open: &'a std::sync::atomic::AtomicUsize, max: usize) -> Option<Self> {
        let before = open.fetch_add(1, Relaxed);
        if before >= max {
            open.fetch_sub(1, Relaxed);
            return None;
        }
        Some(OpenSlot(open))
    }
}

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
