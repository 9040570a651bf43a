//! The end of serving: stop accepting, let open connections finish for up to the drain timeout
//! (a second SIGINT or SIGTERM meanwhile quits at once), and say what happened.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rampart_proxy::log_summary::count_of;
use rampart_proxy::worker::WorkerCounters;

use super::{Control, Stop};
use crate::notify;

impl Control<'_> {
    /// Drains after `stop`, then logs the totals and "stopped".
    pub(super) fn drain(self, stop: Stop) {
        let Control {
            runtime,
            mut signals,
            publisher,
            admin,
            admin_copy,
            commands,
            reloads,
            mut pid_file,
            ..
        } = self;
        // After an upgrade the new process holds the admin listener; this copy only kept it open.
        drop(admin_copy);
        let drain = match stop {
            Stop::Signal(signal) => {
                notify::stopping();
                signal
            }
            Stop::Upgraded => "upgrade",
        };
        admin.draining.store(true, Ordering::Release);
        // The sources that follow their config (etcd's thread, the watcher) stop with these.
        drop(commands);
        drop(reloads);
        let (engine, session_log) = publisher.into_parts();
        let drain_timeout = engine.current().drain_timeout;
        let counters = engine.counters();
        let drain_started = Instant::now();
        tracing::info!(
            signal = drain,
            timeout_ms = drain_timeout.as_millis() as u64,
            "{drain}: no longer accepting; draining open connections for up to {drain_timeout:?}"
        );
        // The drain runs on a blocking thread; a second SIGINT or SIGTERM meanwhile quits at once.
        let cut = runtime.block_on(async {
            let draining = tokio::task::spawn_blocking(move || match stop {
                Stop::Upgraded => engine.shutdown_handed_over(drain_timeout),
                Stop::Signal(_) => engine.shutdown(drain_timeout),
            });
            let again = tokio::select! {
                cut = draining => return cut.unwrap_or(0),
                _ = signals.interrupt.recv() => "SIGINT",
                _ = signals.terminate.recv() => "SIGTERM",
            };
            let open = counters.iter().map(|c| c.open.load(Ordering::Relaxed)).sum::<u64>();
            tracing::warn!(
                signal = again,
                elapsed_ms = drain_started.elapsed().as_millis() as u64,
                cut = open,
                "{again} during the drain: force quit, cutting {}",
                count_of(open, "open connection")
            );
            session_log.flush();
            drop(pid_file.take());
            std::process::exit(1);
        });
        let elapsed_ms = drain_started.elapsed().as_millis() as u64;
        if cut > 0 {
            tracing::warn!(
                signal = drain,
                elapsed_ms,
                cut,
                "drain ended: closed {} still open at the drain deadline",
                count_of(cut, "connection")
            );
        } else {
            tracing::info!(
                signal = drain,
                elapsed_ms,
                cut,
                "drain ended: every connection finished"
            );
        }
        log_totals(&counters);
        session_log.flush();
        drop(pid_file);
        tracing::info!("stopped");
    }
}

/// The requests served and the upstream connections reused, and failed TLS handshakes.
fn log_totals(counters: &[std::sync::Arc<WorkerCounters>]) {
    let sum = |f: fn(&WorkerCounters) -> u64| counters.iter().map(|c| f(c)).sum::<u64>();
    let (requests, opened, reused) = (
        sum(|c| c.http_requests.load(Ordering::Relaxed)),
        sum(|c| c.upstream_connects.load(Ordering::Relaxed)),
        sum(|c| c.upstream_reuses.load(Ordering::Relaxed)),
    );
    if requests > 0 {
        let rate = if opened + reused > 0 {
            100.0 * reused as f64 / (opened + reused) as f64
        } else {
            0.0
        };
        tracing::info!(
            "http: {requests} request(s); upstream connections: {opened} opened, {reused} reuse(s) ({rate:.1}% reused)"
        );
    }
    let failed_handshakes = sum(|c| c.tls_handshake_failures.load(Ordering::Relaxed));
    if failed_handshakes > 0 {
        tracing::info!("tls: {failed_handshakes} handshake(s) failed or timed out (logged at debug level)");
    }
}
