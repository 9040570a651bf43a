//! The checks' thread: a single-threaded runtime, a `LocalSet`, and a [`WorkerContext`] of its
//! own on which every check runs as a local task. A new round (the start, a reload, new DNS
//! answers) stops every check and starts those of the new snapshot.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_model::Snapshot;
use tokio::sync::mpsc;
use tokio::task::{JoinSet, LocalSet};

use super::{check_target, plan, FirstRound, Planned};
use crate::worker::WorkerContext;

/// How often the checks' context closes stale pooled connections (as a worker's housekeeping).
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// The checks of a snapshot, with their targets.
struct Round {
    snapshot: Arc<Snapshot>,
    planned: Vec<Planned>,
}

/// The handle of the checks' thread. Dropping it stops every check and ends the thread.
pub struct Checks {
    rounds: mpsc::UnboundedSender<Round>,
}

impl Checks {
    /// Starts the checks' thread, its context with worker id `id` (one whose metric cells no
    /// worker writes: the number of workers), and the checks of `snapshot`. With `first_round`,
    /// each target counts there until its first check is done.
    pub fn start(id: usize, snapshot: Arc<Snapshot>, first_round: Option<&FirstRound>) -> std::io::Result<Checks> {
        let (rounds, receiver) = mpsc::unbounded_channel();
        let current = Arc::new(ArcSwap::new(snapshot.clone()));
        let checks = Checks { rounds };
        checks.restart(snapshot, first_round);
        // A thread that cannot start drops the round: its targets count as checked.
        std::thread::Builder::new()
            .name("rampart-checks".into())
            .spawn(move || run(id, current, receiver))?;
        Ok(checks)
    }

    /// Stops every check and starts those of `snapshot` (a reload, new DNS answers).
    pub fn restart(&self, snapshot: Arc<Snapshot>, first_round: Option<&FirstRound>) {
        let planned = plan(&snapshot, first_round);
        // The thread gone (it could not start its runtime), the round is dropped and its
        // targets count as checked.
        let _ = self.rounds.send(Round { snapshot, planned });
    }
}

fn run(id: usize, current: Arc<ArcSwap<Snapshot>>, mut rounds: mpsc::UnboundedReceiver<Round>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("health checks: cannot start their runtime, no target is checked: {e}");
            return;
        }
    };
    let local = LocalSet::new();
    local.block_on(&runtime, async move {
        let ctx = WorkerContext::shared(id, Default::default(), current.clone(), None);
        let mut checks = JoinSet::new();
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                round = rounds.recv() => {
                    let Some(Round { snapshot, planned }) = round else { break };
                    // Dropping the old set stops its checks.
                    drop(std::mem::replace(&mut checks, JoinSet::new()));
                    current.store(snapshot.clone());
                    for p in planned {
                        checks.spawn_local(check_target(ctx.clone(), snapshot.clone(), p));
                    }
                }
                _ = housekeeping.tick() => ctx.housekeeping(),
            }
        }
    });
}
