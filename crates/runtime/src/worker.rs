//! One worker thread: its runtime, its listeners' accept loops, and its connections.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rampart_model::{ListenerKey, Transport};
use rampart_proxy::conn::{self, BoundListener};
use rampart_proxy::http::h3::QuicListener;
use rampart_proxy::session_log::SessionLogSink;
use rampart_proxy::worker::{WorkerContext, WorkerCounters};
use rampart_proxy::Snapshot;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::{BoundSocket, SocketKey};

/// Threads of a worker's blocking pool. It runs the slow work that must not hold the worker's
/// thread: password hash checks (`basic_auth`, which also bounds how many it queues) and host
/// name lookups (a `forward_auth` service named by host). A hash check keeps a core busy for
/// tens of milliseconds, so a few threads per worker are enough, and a flood of checks cannot
/// take every core away from the workers (tokio's default is 512).
const BLOCKING_THREADS: usize = 2;

/// How often a worker does its housekeeping (log lines to the writer, pool sweeps, expiries).
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// Messages from the control plane.
pub(crate) enum Command {
    Listen(SocketKey, BoundSocket),
    Unlisten(SocketKey),
    /// Stop accepting; exit once open connections finish or the deadline passes. `handed_over`:
    /// a new process has the sockets (UDP ones are no longer read here).
    Drain {
        deadline: Instant,
        handed_over: bool,
    },
}

pub(crate) struct WorkerSetup {
    pub id: usize,
    pub core: Option<usize>,
    pub current: Arc<ArcSwap<Snapshot>>,
    pub counters: Arc<WorkerCounters>,
    pub session_log: SessionLogSink,
    pub commands: mpsc::UnboundedReceiver<Command>,
    pub sockets: Vec<(SocketKey, BoundSocket)>,
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
    // Blocking threads are started from the worker's thread and would inherit its pinning: they
    // get every core the process may use back, so a hash check never competes with its worker.
    crate::panics::on_worker(setup.id);
    let cores = crate::available_cores();
    if let Some(core) = setup.core {
        if let Err(e) = crate::pin_current_thread(core) {
            tracing::warn!("worker {}: cannot pin to core {core}: {e}", setup.id);
        }
    }
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().max_blocking_threads(BLOCKING_THREADS);
    if setup.core.is_some() {
        builder.on_thread_start(move || {
            let _ = crate::set_current_thread_affinity(&cores);
        });
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("worker {}: cannot start its runtime: {e}", setup.id);
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(setup));
}

async fn serve(mut setup: WorkerSetup) {
    let ctx = WorkerContext::shared(
        setup.id,
        setup.counters.clone(),
        setup.current.clone(),
        Some(setup.session_log.clone()),
    );
    let live = Rc::new(LiveTasks::default());
    // An address may have more than one socket in a worker (more were handed over in an upgrade
    // than there are workers now).
    let mut loops = Loops::default();
    for (key, socket) in std::mem::take(&mut setup.sockets) {
        listen(&mut loops, &ctx, &live, key, socket);
    }
    let housekeeper = {
        let (ctx, live) = (ctx.clone(), live.clone());
        tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(HOUSEKEEPING_INTERVAL).await;
                ctx.housekeeping();
                // After a burst (many connections served at once, now closed or parked) the
                // allocator keeps the freed memory resident; hand it back.
                let ended = live.peak.get().saturating_sub(live.count.get());
                live.peak.set(live.count.get());
                if ended >= TRIM_AFTER_ENDED_TASKS {
                    crate::return_free_memory();
                }
            }
        })
    };
    let waker = tokio::task::spawn_local(wake_parked(ctx.clone(), live.clone()));
    let deadline = loop {
        match setup.commands.recv().await {
            Some(Command::Listen(key, socket)) => listen(&mut loops, &ctx, &live, key, socket),
            Some(Command::Unlisten(key)) => {
                for task in loops.tasks.remove(&key).unwrap_or_default() {
                    task.abort();
                }
                loops.quic.remove(&key);
                for stop in loops.udp.remove(&key).unwrap_or_default() {
                    stop.stop();
                }
            }
            Some(Command::Drain { deadline, handed_over }) => {
                if handed_over {
                    for quic in loops.quic.values().flatten() {
                        quic.hand_over();
                    }
                }
                break deadline;
            }
            None => break Instant::now(),
        }
    };
    for task in loops.tasks.drain().flat_map(|(_, tasks)| tasks) {
        task.abort();
    }
    drop(loops);
    // Idle keep-alive connections close now; busy ones close after their current request.
    waker.abort();
    ctx.begin_drain();
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
        let open = ctx.counters.open.load(std::sync::atomic::Ordering::Relaxed);
        rampart_proxy::worker::bump(&ctx.counters.cut_at_drain, open);
        tracing::warn!(
            "worker {}: drain deadline passed with {open} connection(s) open; closing them",
            ctx.id,
        );
    }
    housekeeper.abort();
    ctx.flush_log_lines();
    // The spans and log records of the last requests, to the collector (a dead one costs the
    // exit this long at most).
    rampart_proxy::telemetry::Telemetry::last_export(&ctx, LAST_EXPORT).await;
}

/// How long a worker's end waits for its last export to the OTLP collector.
const LAST_EXPORT: std::time::Duration = std::time::Duration::from_secs(2);

/// A worker's accept loops by socket, and its QUIC endpoints (told apart for a handover).
#[derive(Default)]
struct Loops {
    tasks: HashMap<SocketKey, Vec<JoinHandle<()>>>,
    quic: HashMap<SocketKey, Vec<Rc<QuicListener>>>,
    /// UDP listeners' relays, stopped rather than aborted (their sessions finish).
    udp: HashMap<SocketKey, Vec<Rc<rampart_proxy::udp::Stop>>>,
}

fn listen(loops: &mut Loops, ctx: &Rc<WorkerContext>, live: &Rc<LiveTasks>, key: SocketKey, socket: BoundSocket) {
    let addr = key.1;
    let socket = match socket {
        BoundSocket::Tcp(socket) => socket,
        BoundSocket::Udp(socket)
            if ctx
                .snapshot()
                .listener_index(&ListenerKey::Bound(Transport::Udp, addr))
                .is_some() =>
        {
            // A UDP listener: one task relays this socket's datagrams and all its sessions. It
            // is not aborted: stopped, it stops reading and ends when its sessions have.
            let stop = Rc::new(rampart_proxy::udp::Stop::default());
            let guard = TaskGuard::new(live);
            let (ctx, task_stop) = (ctx.clone(), stop.clone());
            tokio::task::spawn_local(async move {
                let _guard = guard;
                rampart_proxy::udp::serve(&ctx, addr, socket, &task_stop).await;
            });
            loops.udp.entry(key).or_default().push(stop);
            return;
        }
        BoundSocket::Udp(socket) => {
            // HTTP/3: QUIC for the HTTP listener on the same address.
            match QuicListener::new(ctx, addr, socket) {
                Ok(quic) => {
                    let quic = Rc::new(quic);
                    let task = tokio::task::spawn_local(quic_accept_loop(ctx.clone(), live.clone(), quic.clone()));
                    loops.tasks.entry(key).or_default().push(task);
                    loops.quic.entry(key).or_default().push(quic);
                }
                Err(e) => tracing::error!("worker {}: HTTP/3 on {addr}: {e}", ctx.id),
            }
            return;
        }
    };
    let Some(bound) = BoundListener::new(&ctx.counters, &ctx.snapshot(), Transport::Tcp, addr) else {
        tracing::error!("worker {}: no listener for {addr} in the current config", ctx.id);
        return;
    };
    let listener = match TcpListener::from_std(socket) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("worker {}: cannot use listening socket {addr}: {e}", ctx.id);
            return;
        }
    };
    let task = tokio::task::spawn_local(accept_loop(ctx.clone(), live.clone(), bound, listener));
    loops.tasks.entry(key).or_default().push(task);
}

/// Takes QUIC connections on one UDP socket and serves each in its own task. Aborting the loop
/// drops the listener, which refuses new connections; open ones go on.
async fn quic_accept_loop(ctx: Rc<WorkerContext>, live: Rc<LiveTasks>, quic: Rc<QuicListener>) {
    while let Some(incoming) = quic.accept(&ctx).await {
        let guard = TaskGuard::new(&live);
        let (ctx, quic) = (ctx.clone(), quic.clone());
        tokio::task::spawn_local(async move {
            let _guard = guard;
            quic.serve(&ctx, incoming).await;
        });
    }
}

async fn accept_loop(ctx: Rc<WorkerContext>, live: Rc<LiveTasks>, bound: Rc<BoundListener>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or memory: back off briefly rather than spin.
                tracing::error!("worker {}: accept on {} failed: {e}", ctx.id, bound.bind);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let guard = TaskGuard::new(&live);
        let (ctx, bound) = (ctx.clone(), bound.clone());
        tokio::task::spawn_local(async move {
            let _guard = guard;
            conn::serve(&ctx, bound, stream, peer).await;
        });
    }
}

/// Gives parked connections whose clients sent something (or closed) a task again.
async fn wake_parked(ctx: Rc<WorkerContext>, live: Rc<LiveTasks>) {
    let mut woken = Vec::new();
    loop {
        if let Err(e) = ctx.wait_woken(&mut woken).await {
            tracing::error!("worker {}: parked connections cannot be watched: {e}", ctx.id);
            return;
        }
        for parked in woken.drain(..) {
            let guard = TaskGuard::new(&live);
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move {
                let _guard = guard;
                conn::serve_woken(&ctx, parked).await;
            });
        }
    }
}
