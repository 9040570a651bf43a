//! One worker thread: its runtime, its listeners' accept loops, and its connections.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rampart_model::ListenerProtocol;
use rampart_proxy::session_log::SessionLogSink;
use rampart_proxy::worker::{WorkerContext, WorkerCounters};
use rampart_proxy::{http, l4, Snapshot};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// How often a worker hands its buffered log lines to the writer and sweeps its upstream pool.
const SESSION_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Messages from the control plane.
pub(crate) enum Command {
    Listen(SocketAddr, std::net::TcpListener),
    Unlisten(SocketAddr),
    /// Stop accepting; exit once open connections finish or the deadline passes.
    Drain(Instant),
}

pub(crate) struct WorkerSetup {
    pub id: usize,
    pub core: Option<usize>,
    pub current: Arc<ArcSwap<Snapshot>>,
    pub counters: Arc<WorkerCounters>,
    pub session_log: SessionLogSink,
    pub commands: mpsc::UnboundedReceiver<Command>,
    pub sockets: Vec<(SocketAddr, std::net::TcpListener)>,
}

/// Counts a worker's live connection tasks and wakes the drain when the last one ends.
#[derive(Default)]
struct LiveTasks {
    count: Cell<usize>,
    /// The most tasks alive at once since the last housekeeping round.
    peak: Cell<usize>,
    idle: Notify,
}

/// Memory is handed back to the system when at least this many connection tasks ended (closed
/// or parked) since the busiest moment of the last housekeeping period.
const TRIM_AFTER_ENDED_TASKS: usize = 256;

struct TaskGuard(Rc<LiveTasks>);

impl TaskGuard {
    fn new(live: &Rc<LiveTasks>) -> Self {
        let n = live.count.get() + 1;
        live.count.set(n);
        live.peak.set(live.peak.get().max(n));
        TaskGuard(live.clone())
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let n = self.0.count.get() - 1;
        self.0.count.set(n);
        if n == 0 {
            self.0.idle.notify_waiters();
        }
    }
}

pub(crate) fn run(setup: WorkerSetup) {
    if let Some(core) = setup.core {
        if let Err(e) = crate::pin_current_thread(core) {
            log::warn!("worker {}: cannot pin to core {core}: {e}", setup.id);
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("worker {}: cannot start its runtime: {e}", setup.id);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(setup));
}

async fn serve(mut setup: WorkerSetup) {
    let ctx = Rc::new(WorkerContext::new(
        setup.id,
        setup.counters.clone(),
        Some(setup.session_log.clone()),
    ));
    let live = Rc::new(LiveTasks::default());
    let mut accept_loops: HashMap<SocketAddr, JoinHandle<()>> = HashMap::new();
    for (addr, socket) in std::mem::take(&mut setup.sockets) {
        listen(&mut accept_loops, &ctx, &live, &setup.current, addr, socket);
    }
    let flusher = {
        let (ctx, current, live) = (ctx.clone(), setup.current.clone(), live.clone());
        tokio::task::spawn_local(async move {
            let mut expired = Vec::new();
            loop {
                tokio::time::sleep(SESSION_FLUSH_INTERVAL).await;
                ctx.flush_log_lines();
                // Close pooled upstream connections that went stale or idle too long, and parked
                // client connections whose keep-alive time is over.
                let longest = current.load().upstreams.iter().map(|u| u.http.pool_idle_timeout).max();
                ctx.upstream_pool.borrow_mut().sweep(longest.unwrap_or_default());
                ctx.trim_pools();
                // After a burst (many connections served at once, now closed or parked) the
                // allocator keeps the freed memory resident; hand it back.
                let ended = live.peak.get().saturating_sub(live.count.get());
                live.peak.set(live.count.get());
                if ended >= TRIM_AFTER_ENDED_TASKS {
                    crate::return_free_memory();
                }
                ctx.parking.take_expired(Instant::now(), &mut expired);
                for parked in expired.drain(..) {
                    http::session::close_parked(&ctx, parked);
                }
            }
        })
    };
    let waker = tokio::task::spawn_local(wake_parked(ctx.clone(), live.clone()));
    let deadline = loop {
        match setup.commands.recv().await {
            Some(Command::Listen(addr, socket)) => listen(&mut accept_loops, &ctx, &live, &setup.current, addr, socket),
            Some(Command::Unlisten(addr)) => {
                if let Some(task) = accept_loops.remove(&addr) {
                    task.abort();
                }
            }
            Some(Command::Drain(deadline)) => break deadline,
            None => break Instant::now(),
        }
    };
    for (_, task) in accept_loops.drain() {
        task.abort();
    }
    // Idle keep-alive connections close now; busy ones close after their current request.
    waker.abort();
    let mut parked = Vec::new();
    ctx.parking.close(&mut parked);
    for p in parked {
        http::session::close_parked(&ctx, p);
    }
    let drained = async {
        while live.count.get() > 0 {
            let idle = live.idle.notified();
            if live.count.get() == 0 {
                break;
            }
            idle.await;
        }
    };
    if tokio::time::timeout_at(deadline.into(), drained).await.is_err() {
        log::warn!(
            "worker {}: drain deadline passed with {} connection(s) open; closing them",
            ctx.id,
            live.count.get()
        );
    }
    flusher.abort();
    ctx.flush_log_lines();
}

fn listen(
    loops: &mut HashMap<SocketAddr, JoinHandle<()>>,
    ctx: &Rc<WorkerContext>,
    live: &Rc<LiveTasks>,
    current: &Arc<ArcSwap<Snapshot>>,
    addr: SocketAddr,
    socket: std::net::TcpListener,
) {
    let listener = match TcpListener::from_std(socket) {
        Ok(l) => l,
        Err(e) => {
            log::error!("worker {}: cannot use listening socket {addr}: {e}", ctx.id);
            return;
        }
    };
    let task = tokio::task::spawn_local(accept_loop(ctx.clone(), live.clone(), current.clone(), addr, listener));
    if let Some(old) = loops.insert(addr, task) {
        old.abort();
    }
}

async fn accept_loop(
    ctx: Rc<WorkerContext>,
    live: Rc<LiveTasks>,
    current: Arc<ArcSwap<Snapshot>>,
    bind: SocketAddr,
    listener: TcpListener,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or memory: back off briefly rather than spin.
                log::error!("worker {}: accept on {bind} failed: {e}", ctx.id);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let snapshot = current.load_full();
        let Some(index) = snapshot.listeners.iter().position(|l| l.bind == bind) else {
            // The listener was removed by a reload and is about to close.
            continue;
        };
        let guard = TaskGuard::new(&live);
        let ctx = ctx.clone();
        let is_http = matches!(snapshot.listeners[index].protocol, ListenerProtocol::Http(_));
        // Two spawns, not one future with both paths: a task is as large as its future, and an
        // idle HTTP connection should not pay for the L4 relay's state.
        if is_http {
            tokio::task::spawn_local(async move {
                let _guard = guard;
                http::session::serve(&ctx, snapshot, index, stream, peer).await;
            });
        } else {
            tokio::task::spawn_local(async move {
                let _guard = guard;
                l4::serve(&ctx, snapshot, index, stream, peer).await;
            });
        }
    }
}

/// Gives parked HTTP connections whose clients sent something (or closed) a task again.
async fn wake_parked(ctx: Rc<WorkerContext>, live: Rc<LiveTasks>) {
    let mut woken = Vec::new();
    loop {
        if let Err(e) = ctx.parking.wait_woken(&mut woken).await {
            log::error!("worker {}: parked connections cannot be watched: {e}", ctx.id);
            return;
        }
        for parked in woken.drain(..) {
            let guard = TaskGuard::new(&live);
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move {
                let _guard = guard;
                http::session::resume(&ctx, parked).await;
            });
        }
    }
}
