//! The control plane's context: a thread of its own (`rampart-checks`), a single-threaded runtime,
//! a `LocalSet` and a [`WorkerContext`] of its own, on which the requests Rampart makes for no
//! worker run as local tasks through the internal client: the active health checks
//! ([`crate::checker`]) and the JWKS fetches ([`crate::filters::auth::jwks_fetch`]). Its worker id
//! is one whose metric cells no worker writes (the number of workers: the config compiler makes
//! one cell more). A new round (the start, a reload, new DNS answers) stops the checks and starts
//! those of the new snapshot; the fetches are restarted at the start and on a reload only (new DNS
//! answers change an upstream's targets in place, and each fetch reads the context's current
//! snapshot).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_model::Snapshot;
use tokio::sync::mpsc;
use tokio::task::{JoinSet, LocalSet};

use crate::checker::{check_target, plan, FirstRound, Planned};
use crate::filters::auth::jwks_fetch::spawn_jwks_fetches;
use crate::worker::WorkerContext;

/// How often the context closes stale pooled connections (as a worker's housekeeping).
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// The checks of a snapshot, with their targets, and whether the fetches start again too.
struct Round {
    snapshot: Arc<Snapshot>,
    planned: Vec<Planned>,
    fetches: bool,
}

/// The handle of the control plane's context. Dropping it stops every check and fetch and ends
/// the thread.
pub struct Background {
    rounds: mpsc::UnboundedSender<Round>,
}

impl Background {
    /// Starts the thread, its context with worker id `id` (one whose metric cells no worker
    /// writes: the number of workers), and the checks and fetches of `snapshot`. With
    /// `first_round`, each checked target counts there until its first check is done.
    pub fn start(id: usize, snapshot: Arc<Snapshot>, first_round: Option<&FirstRound>) -> std::io::Result<Background> {
        let (rounds, receiver) = mpsc::unbounded_channel();
        let current = Arc::new(ArcSwap::new(snapshot.clone()));
        let background = Background { rounds };
        background.send(snapshot, first_round, true);
        // A thread that cannot start drops the round: its targets count as checked.
        std::thread::Builder::new()
            .name("rampart-checks".into())
            .spawn(move || run(id, current, receiver))?;
        Ok(background)
    }

    /// A reload applied `snapshot`: every check and fetch starts again with it.
    pub fn reload(&self, snapshot: Arc<Snapshot>) {
        self.send(snapshot, None, true);
    }

    /// New DNS answers gave `snapshot` other targets: the checks start again with it (the
    /// fetches go on, and use it from their next fetch).
    pub fn targets_changed(&self, snapshot: Arc<Snapshot>) {
        self.send(snapshot, None, false);
    }

    fn send(&self, snapshot: Arc<Snapshot>, first_round: Option<&FirstRound>, fetches: bool) {
        let planned = plan(&snapshot, first_round);
        // The thread gone (it could not start its runtime), the round is dropped and its
        // targets count as checked.
        let _ = self.rounds.send(Round {
            snapshot,
            planned,
            fetches,
        });
    }
}

fn run(id: usize, current: Arc<ArcSwap<Snapshot>>, mut rounds: mpsc::UnboundedReceiver<Round>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("health checks and JWKS fetches: cannot start their runtime: {e}");
            return;
        }
    };
    let local = LocalSet::new();
    local.block_on(&runtime, async move {
        let ctx = WorkerContext::shared(id, Default::default(), current.clone(), None);
        let mut checks = JoinSet::new();
        let mut fetches = JoinSet::new();
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                round = rounds.recv() => {
                    let Some(round) = round else { break };
                    // Dropping the old sets stops their tasks.
                    drop(std::mem::replace(&mut checks, JoinSet::new()));
                    current.store(round.snapshot.clone());
                    if round.fetches {
                        drop(std::mem::replace(&mut fetches, spawn_jwks_fetches(&ctx, &round.snapshot)));
                    }
                    for p in round.planned {
                        checks.spawn_local(check_target(ctx.clone(), round.snapshot.clone(), p));
                    }
                }
                _ = housekeeping.tick() => ctx.housekeeping(),
            }
        }
    });
}
