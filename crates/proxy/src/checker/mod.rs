//! Active health checks, run off the workers: every interval, a TCP connect and, for a TLS
//! upstream, a handshake, or for `http` checks a `GET` through the internal client
//! ([`crate::http::client::send`], pinned to the target) whose status must fall in the expected
//! range; `fall` consecutive failures take a target down, `rise` consecutive successes bring it
//! back. Workers see the verdict through the shared
//! [`TargetHealth`](rampart_model::health::TargetHealth).
//!
//! The checks run on the control plane's context ([`crate::background::Background`]): a thread
//! of their own, a single-threaded runtime and a `LocalSet` with a [`WorkerContext`] of their own
//! (its id past the workers', whose metric cells no worker writes), so an HTTP check speaks the
//! upstream's protocol (HTTP/1.1, `h2c`, `h2`, `auto`) with its TLS settings and pooled
//! connections, as a client's request does. [`probe`] is one check of one target.

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rampart_model::Snapshot;

use crate::worker::WorkerContext;

mod dns;
mod probe;

/// Counts the targets whose first check has not finished yet (for readiness: Rampart is ready once
/// every target was checked once). A task that is stopped before its first check counts as done.
#[derive(Debug, Clone, Default)]
pub struct FirstRound(Arc<AtomicUsize>);

impl FirstRound {
    /// Whether every target counted here has been checked once.
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

/// One task's place in a [`FirstRound`], given up after its first check (or when it stops).
struct FirstCheck(Option<Arc<AtomicUsize>>);

impl FirstCheck {
    fn done(&mut self) {
        if let Some(count) = self.0.take() {
            count.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Drop for FirstCheck {
    fn drop(&mut self) {
        self.done();
    }
}

/// One target to check: its upstream's index and its own in the snapshot, and its place in the
/// first round.
pub(crate) struct Planned {
    upstream: usize,
    target: usize,
    first: FirstCheck,
}

/// Every target of every upstream that has a health check; with `first_round`, each counts
/// there (from now) until its first check is done.
pub(crate) fn plan(snapshot: &Snapshot, first_round: Option<&FirstRound>) -> Vec<Planned> {
    let mut planned = Vec::new();
    for (u, upstream) in snapshot.upstreams.iter().enumerate() {
        if upstream.health_check.is_none() {
            continue;
        }
        for target in 0..upstream.targets.len() {
            let first = FirstCheck(first_round.map(|r| {
                r.0.fetch_add(1, Ordering::AcqRel);
                r.0.clone()
            }));
            planned.push(Planned {
                upstream: u,
                target,
                first,
            });
        }
    }
    planned
}

/// Checks one target every interval until the task is stopped, and records the verdicts.
pub(crate) async fn check_target(ctx: Rc<WorkerContext>, snapshot: Arc<Snapshot>, planned: Planned) {
    let Planned {
        upstream,
        target,
        mut first,
    } = planned;
    let Some(up) = snapshot.upstreams.get(upstream) else {
        return;
    };
    let (Some(check), Some(t)) = (&up.health_check, up.targets.get(target)) else {
        return;
    };
    let (upstream_name, target_name, health) = (up.name.as_str(), t.name.as_str(), &t.health);
    let (mut successes, mut failures) = (0u32, 0u32);
    let mut ticker = tokio::time::interval(check.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let probe = probe::probe(&ctx, &snapshot, upstream, target, check);
        let result = match tokio::time::timeout(check.timeout, probe).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        match result {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if successes >= check.rise && health.set_active_up(true) {
                    tracing::warn!(
                        upstream = upstream_name,
                        target = target_name,
                        state = "up",
                        checks = successes,
                        "health check: target is up"
                    );
                }
            }
            Err(why) => {
                failures += 1;
                successes = 0;
                if failures >= check.fall && health.set_active_up(false) {
                    tracing::warn!(
                        upstream = upstream_name,
                        target = target_name,
                        state = "down",
                        reason = why.as_str(),
                        checks = failures,
                        "health check: target is down"
                    );
                }
            }
        }
        first.done();
    }
}
