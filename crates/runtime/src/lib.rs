//! Rampart's thread-per-core engine.
//!
//! [`Engine::start`] spawns N worker threads. Each runs a single-threaded tokio runtime, is
//! optionally pinned to a core, and owns a [`WorkerContext`] (buffers, pipes, balancer state,
//! counters). For every socket of every listener (TCP; UDP for HTTP/3 beside it, or for a UDP
//! listener) the control plane binds one SO_REUSEPORT socket per worker and hands it over, so the
//! kernel spreads new connections (and clients' datagrams) across workers and a bind error
//! surfaces in the control plane, where a reload can still be refused. Workers read the current snapshot
//! from an `ArcSwap` at accept time; [`Engine::apply`] swaps in a new one.

mod listener;
mod panics;
mod worker;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rampart_model::net::binds_overlap;
use rampart_model::{Snapshot, Transport};
use rampart_proxy::session_log::SessionLogSink;
use rampart_proxy::worker::WorkerCounters;
use tokio::sync::mpsc;

pub use listener::{bind_reuseport, bind_socket, bind_udp_reuseport, probe_unused, BoundSocket, InheritedSockets};
pub use panics::worker_panics;
use worker::{Command, WorkerSetup};

/// Why the engine could not start or apply a config.
///
/// Each variant says its reason in its own message and exposes no `source()`, so that printing
/// the error chain (anyhow's `{:#}`) does not repeat the reason.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{addr}{}: already in use by another process", udp_suffix(*.transport))]
    InUse { transport: Transport, addr: SocketAddr },
    #[error("cannot listen on {addr}{}: {error}", udp_suffix(*.transport))]
    Bind {
        transport: Transport,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot start worker thread: {0}")]
    Spawn(std::io::Error),
}

/// How an address's transport is written in errors: TCP as the address alone (what every
/// listener had before UDP), UDP named.
fn udp_suffix(transport: Transport) -> &'static str {
    match transport {
        Transport::Tcp => "",
        Transport::Udp => " (udp)",
    }
}

/// A socket's transport and address: what the engine binds, once per worker.
pub type SocketKey = (Transport, SocketAddr);

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
    listening: HashSet<SocketKey>,
    /// A duplicate of each listening socket, by transport and address, for a binary upgrade.
    handover: HashMap<SocketKey, Vec<BoundSocket>>,
}

impl Engine {
    /// Binds every listener of `snapshot` once per worker, then starts the workers. Sockets in
    /// `inherited` (handed over by the process this one replaces, by address) are used first for
    /// their addresses and never bound again; what `snapshot` does not listen on is closed.
    pub fn start(
        options: EngineOptions,
        snapshot: Snapshot,
        session_log: SessionLogSink,
        mut inherited: InheritedSockets,
    ) -> Result<Engine, EngineError> {
        panics::install_hook();
        let workers = options.workers.max(1);
        let binds: Vec<SocketKey> = snapshot.listeners.iter().flat_map(|l| l.sockets()).collect();
        let sockets = bind_all(&binds, workers, &HashSet::new(), &mut inherited)?;
        let handover = handover_copies(&sockets)?;
        let mut per_worker = deal(sockets, workers);
        let current = Arc::new(ArcSwap::from_pointee(snapshot));
        let cores = available_cores();
        let mut handles = Vec::with_capacity(workers);
        for (id, sockets) in per_worker.drain(..).enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            let counters = Arc::new(WorkerCounters::default());
            let setup = WorkerSetup {
                id,
                core: options.pin.then(|| cores[id % cores.len()]),
                current: current.clone(),
                counters: counters.clone(),
                session_log: session_log.clone(),
                commands: rx,
                sockets,
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
            handover,
        })
    }

    /// Every listening socket of this process (duplicates of the workers' ones), for handing
    /// over to a new process in a binary upgrade. They stay open while the engine runs.
    pub fn listening_sockets(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.handover.values().flatten().map(BoundSocket::as_fd)
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
        let wanted: HashSet<SocketKey> = snapshot.listeners.iter().flat_map(|l| l.sockets()).collect();
        let added: Vec<SocketKey> = wanted.difference(&self.listening).copied().collect();
        let removed: Vec<SocketKey> = self.listening.difference(&wanted).copied().collect();
        let sockets = bind_all(
            &added,
            self.workers.len(),
            &self.listening,
            &mut InheritedSockets::default(),
        )?;
        let handover = handover_copies(&sockets)?;
        self.current.store(Arc::new(snapshot));
        self.handover.extend(handover);
        for (key, sockets) in sockets {
            for (worker, socket) in self.workers.iter().zip(sockets) {
                let _ = worker.commands.send(Command::Listen(key, socket));
            }
        }
        for key in removed {
            // The copy kept for a handover goes too, or the socket would go on queueing
            // connections that nobody accepts.
            self.handover.remove(&key);
            for worker in &self.workers {
                let _ = worker.commands.send(Command::Unlisten(key));
            }
        }
        self.listening = wanted;
        Ok(())
    }

    /// Stops accepting everywhere, lets open connections finish for up to `drain`, then stops
    /// the workers (closing what is still open). Returns the connections that were cut.
    pub fn shutdown(self, drain: Duration) -> u64 {
        self.stop(drain, false)
    }

    /// [`Engine::shutdown`] after a binary upgrade handed the sockets to a new process: UDP
    /// sockets are no longer read at all (each datagram now belongs to the new process), so the
    /// HTTP/3 connections here are closed at once rather than drained.
    pub fn shutdown_handed_over(self, drain: Duration) -> u64 {
        self.stop(drain, true)
    }

    fn stop(mut self, drain: Duration, handed_over: bool) -> u64 {
        let deadline = Instant::now() + drain;
        // After a binary upgrade the new process holds these sockets; here they only close.
        self.handover.clear();
        for w in &self.workers {
            let _ = w.commands.send(Command::Drain { deadline, handed_over });
        }
        let mut cut = 0;
        for w in self.workers {
            let _ = w.thread.join();
            cut += w.counters.cut_at_drain.load(std::sync::atomic::Ordering::Relaxed);
        }
        cut
    }
}

/// The sockets for each address, at least `workers` of them; all or nothing. `held` are the
/// addresses this process listens on already. Sockets in `inherited` are taken first; more are
/// bound (SO_REUSEPORT) until there is one per worker.
///
/// An address with no inherited socket is first probed without SO_REUSEPORT ([`probe_unused`]),
/// so that an address another process listens on is refused instead of shared. The probe is
/// skipped for an address that overlaps one in `held` (such as `127.0.0.1:P` under our own
/// `0.0.0.0:P` during a reload that moves between them), because our own socket would fail it.
fn bind_all(
    keys: &[SocketKey],
    workers: usize,
    held: &HashSet<SocketKey>,
    inherited: &mut InheritedSockets,
) -> Result<Vec<(SocketKey, Vec<BoundSocket>)>, EngineError> {
    for &(transport, addr) in keys {
        let ours = held.iter().any(|&(t, h)| t == transport && binds_overlap(h, addr));
        if inherited.has(transport, addr) || ours {
            continue;
        }
        probe_unused(transport, addr).map_err(|error| match error.kind() {
            std::io::ErrorKind::AddrInUse => EngineError::InUse { transport, addr },
            _ => EngineError::Bind { transport, addr, error },
        })?;
    }
    keys.iter()
        .map(|&(transport, addr)| {
            let mut sockets = inherited.take(transport, addr);
            while sockets.len() < workers {
                let socket =
                    bind_socket(transport, addr).map_err(|error| EngineError::Bind { transport, addr, error })?;
                sockets.push(socket);
            }
            Ok(((transport, addr), sockets))
        })
        .collect()
}

/// A duplicate of every socket, kept by the engine for a later handover.
fn handover_copies(
    sockets: &[(SocketKey, Vec<BoundSocket>)],
) -> Result<HashMap<SocketKey, Vec<BoundSocket>>, EngineError> {
    sockets
        .iter()
        .map(|&((transport, addr), ref list)| {
            let copies = list
                .iter()
                .map(|s| {
                    s.try_clone()
                        .map_err(|error| EngineError::Bind { transport, addr, error })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(((transport, addr), copies))
        })
        .collect()
}

/// Deals the sockets out to `workers` workers: socket i of an address to worker i % workers,
/// so that a worker may accept on more than one socket of an address (when more were inherited
/// than there are workers now; closing the extra ones would drop the connections queued on them).
fn deal(sockets: Vec<(SocketKey, Vec<BoundSocket>)>, workers: usize) -> Vec<Vec<(SocketKey, BoundSocket)>> {
    let mut per_worker: Vec<Vec<_>> = (0..workers).map(|_| Vec::new()).collect();
    for (key, list) in sockets {
        for (i, socket) in list.into_iter().enumerate() {
            per_worker[i % workers].push((key, socket));
        }
    }
    per_worker
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
    set_current_thread_affinity(&[core])
}

/// Lets the calling thread run on `cores` only (indices below CPU_SETSIZE; others are skipped).
fn set_current_thread_affinity(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in `available_cores`: a zeroed set, bits set below CPU_SETSIZE, a valid pointer.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &core in cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(core, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Hands memory the allocator holds free back to the system, after a burst of connections.
///
/// glibc keeps freed memory resident in its arenas (only the top of a heap shrinks by itself), so
/// a worker's RSS would stay at the burst's peak; `malloc_trim` releases the free pages in the
/// middle of the heaps too. The `rampart` binary allocates through jemalloc on Linux/glibc
/// (crates/rampart/src/alloc.rs), whose background thread returns unused pages within about a
/// second of decay by itself, so an explicit purge here would only come a second sooner (the
/// burst measurement in docs/benchmarks.md is taken 3 s after the last answer); glibc's malloc
/// still serves the C code in the process (the TLS library) and builds without jemalloc, and
/// `malloc_trim` keeps covering those. Other allocators return memory by themselves.
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
        let tcp = |addr| [(Transport::Tcp, addr)];
        let err = bind_all(&tcp(addr), 2, &HashSet::new(), &mut InheritedSockets::default()).unwrap_err();
        assert_eq!(err.to_string(), format!("{addr}: already in use by another process"));
        // Not an address of this machine: the reason is in the message, and no source repeats it.
        let addr: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let err = bind_all(&tcp(addr), 1, &HashSet::new(), &mut InheritedSockets::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot listen on 192.0.2.1:1: "), "{text}");
        assert!(std::error::Error::source(&err).is_none(), "{text}");
    }

    #[test]
    fn inherited_sockets_are_used_before_binding_and_skip_the_probe() {
        let held = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = held.local_addr().unwrap();
        let mut inherited = InheritedSockets::default();
        let handed = socket2::Socket::from(held.try_clone().unwrap());
        assert_eq!(inherited.add(handed).unwrap(), (Transport::Tcp, addr));
        // Another socket holds the address (`held`), yet the handed-over one makes it ours: no
        // "already in use", and two more are bound beside it for three workers.
        let sockets = bind_all(&[(Transport::Tcp, addr)], 3, &HashSet::new(), &mut inherited).unwrap();
        assert_eq!(sockets.len(), 1);
        assert_eq!(sockets[0].1.len(), 3);
        assert!(inherited.is_empty());
        // More sockets than workers: each worker takes its share, none is dropped.
        let per_worker = deal(sockets, 2);
        assert_eq!(per_worker.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 1]);
    }
}
