//! Rampart's thread-per-core engine.
//!
//! [`Engine::start`] spawns N worker threads. Each runs a single-threaded tokio runtime, is
//! optionally pinned to a core, and owns a [`WorkerContext`] (buffers, pipes, balancer state,
//! counters). For every listener the control plane binds one SO_REUSEPORT socket per worker and
//! hands it over, so the kernel spreads new connections across workers and a bind error surfaces
//! in the control plane, where a reload can still be refused. Workers read the current snapshot
//! from an `ArcSwap` at accept time; [`Engine::apply`] swaps in a new one.

mod listener;
mod worker;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rampart_model::net::binds_overlap;
use rampart_model::Snapshot;
use rampart_proxy::session_log::SessionLogSink;
use rampart_proxy::worker::WorkerCounters;
use tokio::sync::mpsc;

pub use listener::{bind_reuseport, probe_unused};
use worker::{Command, WorkerSetup};

/// Why the engine could not start or apply a config.
///
/// Each variant says its reason in its own message and exposes no `source()`, so that printing
/// the error chain (anyhow's `{:#}`) does not repeat the reason.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{addr}: already in use by another process")]
    InUse { addr: SocketAddr },
    #[error("cannot listen on {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
    #[error("cannot start worker thread: {0}")]
    Spawn(std::io::Error),
}

/// How many workers, and whether to pin them.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    pub workers: usize,
    pub pin: bool,
}

struct WorkerHandle {
    commands: mpsc::UnboundedSender<Command>,
    thread: JoinHandle<()>,
    counters: Arc<WorkerCounters>,
}

/// The running data plane.
pub struct Engine {
    current: Arc<ArcSwap<Snapshot>>,
    workers: Vec<WorkerHandle>,
    listening: HashSet<SocketAddr>,
}

impl Engine {
    /// Binds every listener of `snapshot` once per worker, then starts the workers.
    pub fn start(
        options: EngineOptions,
        snapshot: Snapshot,
        session_log: SessionLogSink,
    ) -> Result<Engine, EngineError> {
        let workers = options.workers.max(1);
        let binds: Vec<SocketAddr> = snapshot.listeners.iter().map(|l| l.bind).collect();
        let mut sockets = bind_all(&binds, workers, &HashSet::new())?;
        let current = Arc::new(ArcSwap::from_pointee(snapshot));
        let cores = available_cores();
        let mut handles = Vec::with_capacity(workers);
        for id in 0..workers {
            let (tx, rx) = mpsc::unbounded_channel();
            let counters = Arc::new(WorkerCounters::default());
            let setup = WorkerSetup {
                id,
                core: options.pin.then(|| cores[id % cores.len()]),
                current: current.clone(),
                counters: counters.clone(),
                session_log: session_log.clone(),
                commands: rx,
                sockets: sockets
                    .iter_mut()
                    .map(|(addr, per_worker)| (*addr, per_worker.remove(0)))
                    .collect(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("rampart-worker-{id}"))
                .spawn(move || worker::run(setup))
                .map_err(EngineError::Spawn)?;
            handles.push(WorkerHandle {
                commands: tx,
                thread,
                counters,
            });
        }
        Ok(Engine {
            current,
            workers: handles,
            listening: binds.into_iter().collect(),
        })
    }

    /// The snapshot new connections get now.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The number of worker threads.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Each worker's counters.
    pub fn counters(&self) -> Vec<Arc<WorkerCounters>> {
        self.workers.iter().map(|w| w.counters.clone()).collect()
    }

    /// Makes `snapshot` current for new connections. New listeners are bound first; if any
    /// cannot be bound, nothing changes. Listeners no longer in the config stop accepting;
    /// their open connections go on.
    pub fn apply(&mut self, snapshot: Snapshot) -> Result<(), EngineError> {
        let wanted: HashSet<SocketAddr> = snapshot.listeners.iter().map(|l| l.bind).collect();
        let added: Vec<SocketAddr> = wanted.difference(&self.listening).copied().collect();
        let removed: Vec<SocketAddr> = self.listening.difference(&wanted).copied().collect();
        let mut sockets = bind_all(&added, self.workers.len(), &self.listening)?;
        self.current.store(Arc::new(snapshot));
        for (addr, per_worker) in sockets.iter_mut() {
            for (worker, socket) in self.workers.iter().zip(per_worker.drain(..)) {
                let _ = worker.commands.send(Command::Listen(*addr, socket));
            }
        }
        for addr in removed {
            for worker in &self.workers {
                let _ = worker.commands.send(Command::Unlisten(addr));
            }
        }
        self.listening = wanted;
        Ok(())
    }

    /// Stops accepting everywhere, lets open connections finish for up to `drain`, then stops
    /// the workers (closing what is still open). Returns the connections that were cut.
    pub fn shutdown(self, drain: Duration) -> u64 {
        let deadline = Instant::now() + drain;
        for w in &self.workers {
            let _ = w.commands.send(Command::Drain(deadline));
        }
        let mut cut = 0;
        for w in self.workers {
            let _ = w.thread.join();
            cut += w.counters.cut_at_drain.load(std::sync::atomic::Ordering::Relaxed);
        }
        cut
    }
}

/// Binds `workers` SO_REUSEPORT sockets for each address; all or nothing. `held` are the
/// addresses this process listens on already.
///
/// Each address is first probed without SO_REUSEPORT ([`probe_unused`]), so that an address
/// another process listens on is refused instead of shared. The probe is skipped for an address
/// that overlaps one in `held` (such as `127.0.0.1:P` under our own `0.0.0.0:P` during a reload
/// that moves between them), because our own socket would fail it.
fn bind_all(
    addrs: &[SocketAddr],
    workers: usize,
    held: &HashSet<SocketAddr>,
) -> Result<Vec<(SocketAddr, Vec<std::net::TcpListener>)>, EngineError> {
    for &addr in addrs {
        if held.iter().any(|h| binds_overlap(*h, addr)) {
            continue;
        }
        probe_unused(addr).map_err(|error| match error.kind() {
            std::io::ErrorKind::AddrInUse => EngineError::InUse { addr },
            _ => EngineError::Bind { addr, error },
        })?;
    }
    addrs
        .iter()
        .map(|&addr| {
            let per_worker = (0..workers)
                .map(|_| bind_reuseport(addr).map_err(|error| EngineError::Bind { addr, error }))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((addr, per_worker))
        })
        .collect()
}

/// The cores this process may run on, in order.
fn available_cores() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`, which lives across the call.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    let cores: Vec<usize> = if rc == 0 {
        // SAFETY: CPU_ISSET reads the set filled above with an index below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    } else {
        Vec::new()
    };
    if cores.is_empty() {
        vec![0]
    } else {
        cores
    }
}

/// Pins the calling thread to `core`.
fn pin_current_thread(core: usize) -> std::io::Result<()> {
    // SAFETY: as in `available_cores`: a zeroed set, one bit set below CPU_SETSIZE, a valid pointer.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Hands memory the allocator holds free back to the system. glibc keeps freed memory resident
/// in its arenas (only the top of a heap shrinks by itself), so after a burst of connections a
/// worker's RSS would stay at the burst's peak; `malloc_trim` releases the free pages in the
/// middle of the heaps too. Other allocators return memory by themselves: nothing to do there.
fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_error_says_its_reason_once() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = bind_all(&[addr], 2, &HashSet::new()).unwrap_err();
        assert_eq!(err.to_string(), format!("{addr}: already in use by another process"));
        // Not an address of this machine: the reason is in the message, and no source repeats it.
        let addr: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let err = bind_all(&[addr], 1, &HashSet::new()).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot listen on 192.0.2.1:1: "), "{text}");
        assert!(std::error::Error::source(&err).is_none(), "{text}");
    }
}
