//! What one worker owns. A worker is one thread running a single-threaded runtime, so its context
//! is shared among its own tasks through `Rc` and mutated through short `RefCell` borrows that are
//! never held across an `.await`.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::balance::{BalancerState, Tried};
use crate::pipes::Pipe;
use crate::session_log::SessionLogSink;
use crate::snapshot::Snapshot;

/// Pooled buffers and pipes beyond this many are freed rather than kept.
const POOL_MAX: usize = 4096;
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
    buffers: RefCell<Vec<Box<[u8]>>>,
    pipes: RefCell<Vec<Pipe>>,
    balancers: RefCell<Balancers>,
    session_log: Option<SessionLogSink>,
    session_buffer: RefCell<Vec<u8>>,
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
            buffers: RefCell::new(Vec::new()),
            pipes: RefCell::new(Vec::new()),
            balancers: RefCell::new(Balancers {
                generation: u64::MAX,
                states: Vec::new(),
            }),
            session_log,
            session_buffer: RefCell::new(Vec::new()),
        }
    }

    /// A relay buffer of `size` bytes from the pool; it goes back when the guard drops. Pooled
    /// buffers of another size (left from before a reload changed it) are freed.
    pub fn buffer(&self, size: usize) -> PooledBuffer<'_> {
        let mut pool = self.buffers.borrow_mut();
        let buf = loop {
            match pool.pop() {
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

    pub(crate) fn take_pipe(&self) -> std::io::Result<Pipe> {
        match self.pipes.borrow_mut().pop() {
            Some(p) => Ok(p),
            None => Pipe::new(),
        }
    }

    pub(crate) fn return_pipe(&self, pipe: Pipe) {
        let mut pipes = self.pipes.borrow_mut();
        if pipe.is_empty() && pipes.len() < POOL_MAX {
            pipes.push(pipe);
        }
    }

    /// Chooses a target of `upstream` (see [`BalancerState::pick`]).
    pub fn pick(&self, snapshot: &Snapshot, upstream: usize, client: std::net::IpAddr, tried: &Tried) -> Option<usize> {
        self.with_balancer(snapshot, upstream, |b| {
            b.pick(&snapshot.upstreams[upstream], client, tried)
        })
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

    /// Whether session records are being written.
    pub fn records_sessions(&self) -> bool {
        self.session_log.is_some()
    }

    /// Appends one session record line; hands a full batch to the writer thread.
    pub fn push_session_record(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let Some(sink) = &self.session_log else { return };
        let mut buf = self.session_buffer.borrow_mut();
        write(&mut buf);
        if buf.len() >= SESSION_LOG_BATCH {
            sink.send(std::mem::take(&mut *buf));
        }
    }

    /// Hands buffered session records to the writer thread (called periodically and at exit).
    pub fn flush_session_records(&self) {
        if let Some(sink) = &self.session_log {
            let mut buf = self.session_buffer.borrow_mut();
            if !buf.is_empty() {
                sink.send(std::mem::take(&mut *buf));
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
            let mut pool = self.ctx.buffers.borrow_mut();
            if pool.len() < POOL_MAX {
                pool.push(buf);
            }
        }
    }
}
