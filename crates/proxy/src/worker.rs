//! What one worker owns, split by concern: relay buffers and pipes, balancer state, log buffers
//! and counters here; everything HTTP in [`HttpWorkerState`]. A worker is one thread running a
//! single-threaded runtime, so its context is shared among its own tasks through `Rc` and mutated
//! through short `RefCell` borrows that are never held across an `.await`.
//!
//! The runtime sees only [`WorkerContext::new`], [`crate::conn::serve`] for each accepted or
//! woken connection, [`WorkerContext::housekeeping`] once a second, and
//! [`WorkerContext::begin_drain`]: it knows no protocol.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use std::rc::{Rc, Weak};

use arc_swap::ArcSwap;

pub use crate::counters::{bump, drop_by, WorkerCounters};
use crate::log_summary::LogSummary;

use crate::balance::{BalancerState, Tried};
use crate::free_list::FreeList;
use crate::http::HttpWorkerState;
use crate::pipes::Pipe;
use crate::session_log::SessionLogSink;
use rampart_model::Snapshot;

/// Pooled buffers and pipes beyond this many are freed rather than kept (and those unused for a
/// housekeeping period are freed too, see [`WorkerContext::trim_pools`]).
const POOL_MAX: usize = 1024;
/// Session records are handed to the writer thread once a worker has this many bytes of them.
const SESSION_LOG_BATCH: usize = 32 * 1024;

/// A worker's private state.
pub struct WorkerContext {
    pub id: usize,
    pub counters: Arc<WorkerCounters>,
    /// Whether bulk transfers may switch to splice(2).
    pub splice: bool,
    buffers: FreeList<Box<[u8]>>,
    pipes: FreeList<Pipe>,
    /// The current snapshot as this worker last saw it.
    snapshots: SnapshotCache,
    /// Upstream pools, parked connections and HTTP buffers.
    pub http: HttpWorkerState,
    balancers: RefCell<Balancers>,
    session_log: Option<SessionLogSink>,
    /// Lines waiting to be handed to the writer, one buffer per file.
    log_buffers: RefCell<Vec<(Arc<std::path::Path>, Vec<u8>)>>,
    /// Repeated warnings (outages), summarised.
    pub log_summary: LogSummary,
    /// Spans and log records waiting for the OTLP collector.
    pub telemetry: crate::telemetry::Telemetry,
    /// This context itself, when it was made shared ([`WorkerContext::shared`]): what a task
    /// spawned on the worker holds it by ([`WorkerContext::handle`]).
    me: Weak<WorkerContext>,
}

struct Balancers {
    generation: u64,
    states: Vec<BalancerState>,
}

impl WorkerContext {
    pub fn new(
        id: usize,
        counters: Arc<WorkerCounters>,
        current: Arc<ArcSwap<Snapshot>>,
        session_log: Option<SessionLogSink>,
    ) -> Self {
        WorkerContext {
            id,
            counters,
            splice: cfg!(target_os = "linux"),
            buffers: FreeList::new(POOL_MAX),
            pipes: FreeList::new(POOL_MAX),
            snapshots: SnapshotCache::new(current),
            http: HttpWorkerState::new(id, POOL_MAX),
            balancers: RefCell::new(Balancers {
                generation: u64::MAX,
                states: Vec::new(),
            }),
            session_log,
            log_buffers: RefCell::new(Vec::new()),
            log_summary: LogSummary::default(),
            telemetry: Default::default(),
            me: Weak::new(),
        }
    }

    /// A context shared by the worker's tasks, which knows its own handle: work that outlives the
    /// request that started it (a mirror's copy, a background request of the internal client)
    /// runs on a task of its own that holds the context through [`WorkerContext::handle`].
    pub fn shared(
        id: usize,
        counters: Arc<WorkerCounters>,
        current: Arc<ArcSwap<Snapshot>>,
        session_log: Option<SessionLogSink>,
    ) -> Rc<Self> {
        Rc::new_cyclic(|me| WorkerContext {
            me: me.clone(),
            ..WorkerContext::new(id, counters, current, session_log)
        })
    }

    /// This context, to hold in a task of its own (`None` for one not made by
    /// [`WorkerContext::shared`]).
    pub fn handle(&self) -> Option<Rc<WorkerContext>> {
        self.me.upgrade()
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

    /// Chooses a target of `upstream`; `key` is the consistent-hashing key, `first` says the pick
    /// is a request's (or connection's) first (see [`BalancerState::pick`]).
    pub fn pick(&self, snapshot: &Snapshot, upstream: usize, key: u64, tried: &Tried, first: bool) -> Option<usize> {
        let up = snapshot.upstreams.get(upstream)?;
        self.with_balancer(snapshot, upstream, |b| b.pick(up, key, tried, first))
            .flatten()
    }

    /// `target` of `upstream` just failed a request: this worker's first picks pass it over for
    /// a while.
    pub fn pass_over(&self, snapshot: &Snapshot, upstream: usize, target: usize) {
        let Some(up) = snapshot.upstreams.get(upstream) else {
            return;
        };
        let time = up.http.retry_pass_over;
        self.with_balancer(snapshot, upstream, |b| b.pass_over(target, time));
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
            match b.states.get_mut(upstream) {
                Some(state) if open => state.opened(target),
                Some(state) => state.closed(target),
                None => {}
            }
        }
    }

    fn with_balancer<R>(
        &self,
        snapshot: &Snapshot,
        upstream: usize,
        f: impl FnOnce(&mut BalancerState) -> R,
    ) -> Option<R> {
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
        b.states.get_mut(upstream).map(f)
    }

    /// The snapshot current now. Cheap enough for every request: it compares one pointer with
    /// the shared one and clones an `Rc`, writing no shared memory.
    pub fn snapshot(&self) -> Rc<SharedSnapshot> {
        self.snapshots.current()
    }

    /// Once a second: gives the retry budgets their floor back, hands buffered log lines to the writer,
    /// closes stale pooled upstream connections (and those to targets a reload removed), closes
    /// parked connections whose keep-alive time is over, and frees pooled buffers and pipes that
    /// went unused.
    pub fn housekeeping(&self) {
        self.flush_log_lines();
        let snapshot = self.snapshot();
        // The retry budgets' floor comes back.
        for up in snapshot.upstreams.iter() {
            up.metrics.worker(self.id).retry_tokens.next_second();
        }
        self.http.housekeeping(&snapshot);
        self.buffers.trim();
        self.pipes.trim();
    }

    /// Whether the worker drains (see [`WorkerContext::begin_drain`]).
    pub fn draining(&self) -> bool {
        self.http.parking.is_closed()
    }

    /// The worker drains: idle connections close now (busy ones after their current request).
    pub fn begin_drain(&self) {
        self.log_summary.report_all();
        self.telemetry.flush();
        self.http.begin_drain();
    }

    /// Waits until parked connections have something to read and moves them into `woken`, each
    /// to be served again with [`crate::conn::serve_woken`].
    pub async fn wait_woken(&self, woken: &mut Vec<crate::http::park::Parked>) -> std::io::Result<()> {
        self.http.parking.wait_woken(woken).await
    }

    /// Appends one line for the log file `path`; hands a full batch to the writer thread.
    pub fn push_log_line(&self, path: &Arc<std::path::Path>, write: impl FnOnce(&mut Vec<u8>)) {
        self.push_traced_log_line(path, ("session", None), write);
    }

    /// [`WorkerContext::push_log_line`] for a line of log `kind` (`access`, `session`) that may
    /// belong to a span (trace id, span id, flags), which a log sent to `otlp` carries.
    pub fn push_traced_log_line(
        &self,
        path: &Arc<std::path::Path>,
        (kind, trace): (&'static str, Option<crate::telemetry::otlp::SpanRef>),
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        if rampart_model::log_target::LogTarget::is_otlp(path) {
            let snapshot = self.snapshot();
            if let Some(export) = snapshot.tracing.as_ref().and_then(|t| t.export.as_ref()) {
                self.telemetry.record_log_line(self, export, (kind, trace), write);
            }
            return;
        }
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

/// A worker's view of the shared current snapshot: an `Rc` of the `Arc` it last loaded, swapped
/// when the shared one changes, so that taking the current snapshot per request never touches the
/// `Arc`'s reference count, which every worker would contend on.
struct SnapshotCache {
    shared: RefCell<arc_swap::Cache<Arc<ArcSwap<Snapshot>>, Arc<Snapshot>>>,
    seen: RefCell<Rc<SharedSnapshot>>,
}

/// A snapshot as a worker's tasks share it: an `Rc` of this is cloned per request, the `Arc`
/// inside only when the shared snapshot changes (deliberately two pointers deep).
#[derive(Debug)]
pub struct SharedSnapshot(pub Arc<Snapshot>);

impl Deref for SharedSnapshot {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

impl SnapshotCache {
    fn new(shared: Arc<ArcSwap<Snapshot>>) -> Self {
        let seen = RefCell::new(Rc::new(SharedSnapshot(shared.load_full())));
        SnapshotCache {
            shared: RefCell::new(arc_swap::Cache::new(shared)),
            seen,
        }
    }

    fn current(&self) -> Rc<SharedSnapshot> {
        let mut shared = self.shared.borrow_mut();
        let latest = shared.load();
        let mut seen = self.seen.borrow_mut();
        if !Arc::ptr_eq(latest, &seen.0) {
            *seen = Rc::new(SharedSnapshot(Arc::clone(latest)));
        }
        seen.clone()
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
