//! Active TCP health checks, run by the control plane: a target is probed with a TCP connect
//! every interval; `fall` consecutive failures take it down, `rise` consecutive successes bring
//! it back. Workers see the verdict through the shared [`TargetHealth`](crate::health::TargetHealth).

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::snapshot::{HealthCheck, Snapshot};

/// Starts one checking task per target of every upstream that has a health check. Dropping (or
/// aborting) the returned set stops them all, as a reload does before starting the new set.
pub fn spawn_checks(snapshot: &Snapshot) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for upstream in &snapshot.upstreams {
        let Some(check) = upstream.health_check else { continue };
        for target in &upstream.targets {
            let health = target.health.clone();
            let label = Arc::new(format!("upstream {} target {}", upstream.name, target.name));
            let addr = target.addr;
            set.spawn(async move { check_target(label, addr, health, check).await });
        }
    }
    set
}

async fn check_target(
    label: Arc<String>,
    addr: std::net::SocketAddr,
    health: Arc<crate::health::TargetHealth>,
    check: HealthCheck,
) {
    let (mut successes, mut failures) = (0u32, 0u32);
    let mut ticker = tokio::time::interval(check.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let result = tokio::time::timeout(check.timeout, TcpStream::connect(addr)).await;
        match result {
            Ok(Ok(_)) => {
                successes += 1;
                failures = 0;
                if successes >= check.rise && health.set_active_up(true) {
                    log::warn!("health check: {label} is up after {successes} successful check(s)");
                }
            }
            failure => {
                failures += 1;
                successes = 0;
                if failures >= check.fall && health.set_active_up(false) {
                    let why = match failure {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {:?}", check.timeout),
                    };
                    log::warn!("health check: {label} is down after {failures} failed check(s): {why}");
                }
            }
        }
    }
}
