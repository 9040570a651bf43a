//! The publisher of snapshots: it holds the engine and the source, and puts a config in force
//! while serving: a reload (SIGHUP, `POST /api/reload`, `--watch`, a change in etcd), the targets
//! new DNS answers gave, and the names ACME is to obtain for the snapshot in force.
//!
//! A reload loads the source, refuses a config that changes a setting read at start only
//! ([`StartOnly`]) or that cannot be bound, and otherwise swaps the new snapshot in. What the
//! binary does beside (the log level, the admin API's state) it takes from [`Applied`].

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rampart_config::{LiveState, LogSettings, WatchList};
use rampart_model::Snapshot;
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::Engine;
use tokio::sync::{mpsc, oneshot};

use crate::acme::{Acme, AcmeStatus};
use crate::bind_failure::{listener_names, BindFailure};
use crate::discovery::{Discovery, DnsStatus};
use crate::source::{summary, Source};
use crate::start_only::{CommandLine, StartOnly};
use crate::watch::Watching;

/// How a reload went.
#[derive(Debug, Clone)]
pub enum ReloadOutcome {
    /// Applied; `sha256` is the config file's hash (file sources).
    Applied {
        summary: String,
        sha256: Option<String>,
        /// The etcd revision applied (configs from etcd).
        revision: Option<i64>,
    },
    /// The running config stays; one `file:line:col: message` (or other reason) per entry.
    Refused { errors: Vec<String> },
    /// The source has nothing to read again (`rampart http` without certificates).
    NotReloadable,
}

impl ReloadOutcome {
    /// The hash of the text a reload applied.
    pub fn sha256(&self) -> Option<String> {
        match self {
            ReloadOutcome::Applied { sha256, .. } => sha256.clone(),
            _ => None,
        }
    }

    /// The etcd revision a reload applied.
    pub fn revision(&self) -> Option<i64> {
        match self {
            ReloadOutcome::Applied { revision, .. } => *revision,
            _ => None,
        }
    }
}

/// A source that follows its config (`--watch`, etcd) asks the control loop for a reload with
/// one of these, and hears the outcome on it.
pub type ReloadRequest = oneshot::Sender<ReloadOutcome>;

/// What a reload that applied put in force, for the binary to apply beside the snapshot.
#[derive(Debug, Clone)]
pub struct Applied {
    /// [`summary`] of the new snapshot.
    pub summary: String,
    pub sha256: Option<String>,
    pub revision: Option<i64>,
    /// The TOML the snapshot was compiled from.
    pub text: String,
    /// `[global] log_level` and `log_format` of the new config.
    pub log: LogSettings,
    /// The admin token the new config asks for (none when the command line fixes the admin
    /// listener: `--admin` takes no token).
    pub admin_token: Option<String>,
}

/// How [`Publisher::reload`] went.
#[derive(Debug, Clone)]
pub enum Reload {
    Applied(Box<Applied>),
    /// The running config stays; one reason per entry.
    Refused(Vec<String>),
    /// The source has nothing to read again.
    NotReloadable,
}

impl Reload {
    /// What the admin API and the sources hear.
    pub fn outcome(&self) -> ReloadOutcome {
        match self {
            Reload::Applied(a) => ReloadOutcome::Applied {
                summary: a.summary.clone(),
                sha256: a.sha256.clone(),
                revision: a.revision,
            },
            Reload::Refused(errors) => ReloadOutcome::Refused { errors: errors.clone() },
            Reload::NotReloadable => ReloadOutcome::NotReloadable,
        }
    }
}

/// What the first load left for the publisher, once the engine runs its snapshot.
pub struct Started {
    pub source: Source,
    pub live: LiveState,
    /// The questions of the first load, asked already.
    pub discovery: Discovery,
    pub engine: Engine,
    pub session_log: SessionLogWriter,
    /// Which start-only settings the command line fixes.
    pub command_line: CommandLine,
    /// The start-only settings of the first load ([`StartOnly::of`]).
    pub start_only: StartOnly,
    /// The files the first load read (for `--watch`).
    pub watch: WatchList,
    /// The etcd revision of the first load (configs from etcd).
    pub revision: Option<i64>,
}

/// The config in force and what keeps it current.
pub struct Publisher {
    source: Source,
    live: LiveState,
    engine: Engine,
    discovery: Discovery,
    session_log: SessionLogWriter,
    acme: Acme,
    command_line: CommandLine,
    start_only: StartOnly,
    watching: Option<Watching>,
    /// The first load's files and etcd revision, until [`Publisher::follow_source`] starts.
    first: Option<(WatchList, Option<i64>)>,
}

impl Publisher {
    /// Takes over from the first load; ACME starts on the snapshot in force (needs a runtime).
    pub fn new(started: Started) -> Publisher {
        let etcd = match &started.source {
            Source::Etcd { store, .. } => Some(store.clone()),
            _ => None,
        };
        let mut acme = Acme::new(started.live.acme(), etcd);
        acme.follow(&started.engine.current());
        Publisher {
            source: started.source,
            live: started.live,
            engine: started.engine,
            discovery: started.discovery,
            session_log: started.session_log,
            acme,
            command_line: started.command_line,
            start_only: started.start_only,
            watching: None,
            first: Some((started.watch, started.revision)),
        }
    }

    /// Starts following the source where it changes by itself: `run --watch` watches the
    /// config's files, `run --etcd` watches its key. Each change sends a request to `reloads`.
    /// Returns, for etcd, whether it answered its last read. Once only; later calls do nothing.
    pub fn follow_source(
        &mut self,
        reloads: &mpsc::UnboundedSender<ReloadRequest>,
    ) -> std::io::Result<Option<Arc<AtomicBool>>> {
        let Some((watch, revision)) = self.first.take() else {
            return Ok(None);
        };
        match (&self.source, revision) {
            (Source::File { watch: true, .. }, _) => {
                let (files, patterns) = (watch.files.len(), watch.patterns.len());
                self.watching = Some(Watching::start(watch, reloads.clone())?);
                tracing::info!(
                    files,
                    patterns,
                    "watch: a change to the config's {files} file(s) or {patterns} include pattern(s) reloads it"
                );
                Ok(None)
            }
            (Source::Etcd { store, .. }, Some(revision)) => {
                tracing::info!(
                    "etcd: running from {} at revision {revision}; a change there reloads",
                    store.config_key()
                );
                let reachable = Arc::new(AtomicBool::new(true));
                crate::etcd::follow(store.clone(), revision, reachable.clone(), reloads.clone())?;
                Ok(Some(reachable))
            }
            _ => Ok(None),
        }
    }

    /// Loads the source again and applies it; a load that succeeds gives the watcher its new
    /// list of files. A load that changes a setting read at start only is refused, naming it.
    pub async fn reload(&mut self) -> Reload {
        if !self.source.reloadable() {
            tracing::info!(
                result = "skipped",
                "reload: the command line is the whole config and names no certificate; nothing to reload"
            );
            return Reload::NotReloadable;
        }
        let loaded = match self.source.load(&mut self.live) {
            Ok(l) => l,
            Err(errors) => return refused(errors.lines().map(str::to_string).collect()),
        };
        let changed = self.start_only.changes(&StartOnly::of(&loaded, self.command_line));
        if !changed.is_empty() {
            return refused(changed);
        }
        for warning in &loaded.warnings {
            tracing::warn!("{warning}");
        }
        if let Some(watching) = &self.watching {
            watching.update(loaded.watch.clone());
        }
        let session_path = loaded.snapshot.session_log.as_deref().map(std::path::Path::to_path_buf);
        let listeners = listener_names(&loaded.snapshot);
        let applied = Applied {
            summary: summary(&loaded.snapshot),
            sha256: loaded.sha256.clone(),
            revision: loaded.revision,
            text: loaded.text,
            log: loaded.log,
            // `--admin` (no token) wins over the config's `[admin]`.
            admin_token: match self.command_line.admin {
                true => None,
                false => loaded.admin.as_ref().and_then(|a| a.token.clone()),
            },
        };
        let snapshot = self.discovery.complete(loaded.snapshot, &mut self.live).await;
        if let Err(e) = self.engine.apply(snapshot) {
            // The questions stay those of the config in force.
            self.discovery.follow(&self.engine.current());
            if let Some(failure) = BindFailure::of(&listeners, &e) {
                failure.log();
            }
            return refused(vec![e.to_string()]);
        }
        // Reopening also serves log rotation: move the file away, then SIGHUP.
        if let Err(e) = self.session_log.reopen(session_path.clone()) {
            tracing::error!("cannot open session log {session_path:?}: {e}; records go to the previous file");
        }
        self.acme.follow(&self.engine.current());
        Reload::Applied(Box::new(applied))
    }

    /// Waits until a DNS question is due or answered; true when its answer may change targets
    /// (then [`Publisher::publish_dns`]).
    pub async fn dns_changed(&mut self) -> bool {
        self.discovery.changed().await
    }

    /// Puts in force the snapshot in force with the targets the DNS answers give now, when
    /// that changes them. True when a new snapshot is in force.
    pub fn publish_dns(&mut self) -> bool {
        let Some(next) = self.discovery.publish(&self.engine.current(), &mut self.live) else {
            return false;
        };
        let line = summary(&next);
        match self.engine.apply(next) {
            Ok(()) => {
                tracing::debug!(summary = line.as_str(), "dns: targets published");
                true
            }
            // Only binding can fail, and a publish binds nothing new.
            Err(e) => {
                tracing::error!("dns: the new targets could not be put in force: {e}");
                false
            }
        }
    }

    /// The DNS questions and their answers.
    pub fn dns_status(&self) -> DnsStatus {
        self.discovery.status()
    }

    /// The certificates ACME obtains, kept up to date by its task.
    pub fn acme_status(&self) -> Arc<ArcSwap<AcmeStatus>> {
        self.acme.status()
    }

    /// The snapshot in force.
    pub fn current(&self) -> Arc<Snapshot> {
        self.engine.current()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The engine to drain and the session log to flush at the end; the rest stops here.
    pub fn into_parts(self) -> (Engine, SessionLogWriter) {
        (self.engine, self.session_log)
    }
}

/// Logs a refused reload and says so.
fn refused(errors: Vec<String>) -> Reload {
    let joined = errors.join("\n");
    tracing::error!(result = "refused", errors = %joined, "reload failed; the running config stays in force");
    Reload::Refused(errors)
}
