//! A running instance follows its config in etcd: one watch on the config's key, on a thread of
//! its own (blocking IO, off the control runtime), and a reload for each change.
//!
//! The loop: read the key's revision (a *resync*: reload when it differs from the one last
//! applied or tried), then watch the key from the revision after that read, reloading on each
//! event, until the watch is lost; then read again and watch again. A watch is lost when etcd
//! cancels it (a compaction passed the revision it was to start from), when the stream ends or
//! breaks, or when a resync shows a change the watch did not deliver. While nothing arrives the
//! key is read again every [`RESYNC`] (etcd sends nothing on an idle watch, so this is how a
//! silently dead connection is noticed, and it bounds how late a change can be). Comparing
//! revisions misses no change (however many happened in between, or whatever etcd compacted)
//! and rebuilds nothing when nothing changed. While etcd cannot be reached, the running config
//! stays; that is logged once, and its return too, and the loop tries again after a backoff of
//! [`BACKOFF_MIN`] doubling up to [`BACKOFF_MAX`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::client::number;
use super::stream::StreamEnd;
use super::Etcd;
use crate::publisher::{ReloadOutcome, ReloadRequest};

/// How long a watch may stay silent before the key is read again to compare.
pub const RESYNC: Duration = Duration::from_secs(3);
/// The first wait before trying etcd again.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait before trying etcd again.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Follows the config in etcd from revision `applied` (the one the instance started with),
/// sending a reload request to `reloads` for each change: the same compile-and-swap path as SIGHUP, where a
/// bad config is refused and the running one stays. `reachable` says whether etcd answered the
/// last read. The thread ends when the control loop stops taking reload requests.
pub fn follow(
    store: Arc<Etcd>,
    applied: i64,
    reachable: Arc<AtomicBool>,
    reloads: UnboundedSender<ReloadRequest>,
) -> std::io::Result<()> {
    let follower = Follower {
        store,
        tried: applied,
        reachable,
        reloads,
        unreachable: false,
        backoff: BACKOFF_MIN,
    };
    std::thread::Builder::new()
        .name("etcd-watch".into())
        .spawn(move || follower.run())
        .map(drop)
}

/// The control loop stopped taking reload requests: the process is stopping.
struct Stopped;

/// How a watch was lost.
enum Lost {
    /// etcd compacted past the revision the watch was to start from.
    Compacted(i64),
    /// A resync found a change the watch had not delivered.
    Missed,
    /// Canceled by etcd, ended, broken or unreadable: why.
    Broken(String),
}

struct Follower {
    store: Arc<Etcd>,
    /// The revision last applied, or last tried (a refused config is not tried again until the
    /// key changes).
    tried: i64,
    reachable: Arc<AtomicBool>,
    reloads: UnboundedSender<ReloadRequest>,
    /// Whether etcd's absence was logged (and its return is to be).
    unreachable: bool,
    backoff: Duration,
}

impl Follower {
    fn run(mut self) {
        loop {
            let Ok(since) = self.resync() else { return };
            let Some(since) = since else {
                self.wait();
                continue;
            };
            let started = Instant::now();
            let lost = match self.watch(since + 1) {
                Ok(lost) => lost,
                Err(Stopped) => return,
            };
            match lost {
                Lost::Compacted(revision) => {
                    tracing::info!(
                        "etcd: the watch started behind a compaction (revision {revision}); reading the key again"
                    );
                }
                Lost::Missed => tracing::info!("etcd: the watch missed a change; watching again"),
                Lost::Broken(why) => {
                    tracing::debug!("{why}; watching again");
                    // A watch that breaks soon after it started (a proxy in between cutting it,
                    // etcd refusing it) is not made again at full speed.
                    if started.elapsed() < BACKOFF_MAX {
                        self.wait();
                    } else {
                        self.backoff = BACKOFF_MIN;
                    }
                }
            }
        }
    }

    /// Reads the key's revision and reloads when it changed: the store's revision then, or
    /// `None` when etcd could not be read.
    fn resync(&mut self) -> Result<Option<i64>, Stopped> {
        match self.store.read_revisions() {
            Ok((changed, now)) => {
                self.reached();
                self.changed(changed)?;
                Ok(Some(now))
            }
            Err(e) => {
                self.unreached(&e);
                Ok(None)
            }
        }
    }

    /// Watches the key from revision `from` until the watch is lost.
    fn watch(&mut self, from: i64) -> Result<Lost, Stopped> {
        let mut stream = match self.store.watch(from) {
            Ok(stream) => stream,
            Err(e) => {
                self.unreached(&e);
                return Ok(Lost::Broken(format!("{e:#}")));
            }
        };
        let mut last_read = Instant::now();
        loop {
            let wait = RESYNC.saturating_sub(last_read.elapsed());
            let message = match stream.next(wait) {
                Ok(message) => message,
                Err(StreamEnd::Idle) => {
                    last_read = Instant::now();
                    match self.store.read_revisions() {
                        Ok((changed, _)) => {
                            self.reached();
                            if changed != 0 && changed != self.tried {
                                self.changed(changed)?;
                                return Ok(Lost::Missed);
                            }
                            continue;
                        }
                        Err(e) => {
                            self.unreached(&e);
                            return Ok(Lost::Broken(format!("{e:#}")));
                        }
                    }
                }
                Err(StreamEnd::Lost(why)) => return Ok(Lost::Broken(format!("etcd at {}: {why}", stream.endpoint()))),
            };
            let result = &message["result"];
            if result.is_null() {
                let error = message["error"]["message"].as_str().or(message["error"].as_str());
                return Ok(Lost::Broken(format!(
                    "etcd: the watch failed: {}",
                    error.unwrap_or("no message")
                )));
            }
            if result["canceled"].as_bool() == Some(true) {
                let compacted = number(&result["compact_revision"]);
                if compacted > 0 {
                    return Ok(Lost::Compacted(compacted));
                }
                let reason = result["cancel_reason"].as_str().unwrap_or("no reason given");
                if reason.contains("auth token") {
                    self.store.forget_token();
                }
                return Ok(Lost::Broken(format!("etcd canceled the watch: {reason}")));
            }
            if result["created"].as_bool() == Some(true) {
                tracing::debug!("etcd: watching {} from revision {from}", self.store.config_key());
                self.backoff = BACKOFF_MIN;
            }
            last_read = Instant::now();
            self.reached();
            for event in result["events"].as_array().into_iter().flatten() {
                self.event(event)?;
            }
        }
    }

    /// One event on the key: a change reloads; a deletion leaves the running config in force.
    fn event(&mut self, event: &Value) -> Result<(), Stopped> {
        let revision = number(&event["kv"]["mod_revision"]);
        if event["type"].as_str() == Some("DELETE") {
            tracing::warn!(
                "etcd: {} was deleted (revision {revision}); the running config stays",
                self.store.config_key()
            );
            return Ok(());
        }
        self.changed(revision)
    }

    /// The key was last changed at `revision` (0: it is not there): reload unless that revision
    /// was applied or tried already.
    fn changed(&mut self, revision: i64) -> Result<(), Stopped> {
        if revision == 0 || revision == self.tried {
            return Ok(());
        }
        tracing::debug!(
            "etcd: {} changed at revision {revision}; reloading",
            self.store.config_key()
        );
        let (reply, outcome) = tokio::sync::oneshot::channel();
        self.reloads.send(reply).map_err(|_| Stopped)?;
        self.tried = match outcome.blocking_recv().map_err(|_| Stopped)? {
            // The reload reads the key itself, and may have found a later revision.
            ReloadOutcome::Applied {
                revision: Some(applied),
                ..
            } => applied.max(revision),
            _ => revision,
        };
        Ok(())
    }

    fn reached(&mut self) {
        self.reachable.store(true, Ordering::Relaxed);
        if self.unreachable {
            tracing::info!("etcd: reachable again");
            self.unreachable = false;
        }
    }

    fn unreached(&mut self, error: &anyhow::Error) {
        self.reachable.store(false, Ordering::Relaxed);
        if !self.unreachable {
            tracing::warn!("etcd: {error:#}; the running config stays");
            self.unreachable = true;
        }
    }

    /// Waits the backoff, and doubles it for next time.
    fn wait(&mut self) {
        std::thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }
}
