//! The control loop: starts the engine, runs health checks, and handles signals (SIGHUP reload,
//! SIGUSR2 binary upgrade, SIGTERM/SIGINT drain and exit). It runs on the main thread's own small
//! runtime; workers never wait on it. Loading, reloading and publishing snapshots is the
//! [`Publisher`]'s (crate `rampart-control`); this module wires it to the signals, the admin API,
//! the logger and binary upgrades.
//!
//! - [`start`]: the first load, the engine, the admin listener, readiness.
//! - [`drain`]: the end: stop accepting, drain, totals.
//! - [`fatal`]: why the process could not start, in text or JSON.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use anyhow::Context;
use rampart_control::{Applied, Publisher, Reload, ReloadRequest};
use rampart_proxy::background::Background;
use tokio::signal::unix::Signal;
use tokio::sync::{mpsc, oneshot};

use crate::admin::state::{RunningConfig, Status};
use crate::admin::{AdminShared, Command};
use crate::cli::EngineArgs;
use crate::logger::Logger;
use crate::notify;
use crate::pid_file::PidFile;
use crate::upgrade::inherit::Handover;
use crate::upgrade::spawn::{Relaunch, UpgradeOutcome};
use rampart_control::Source;

mod drain;
mod fatal;
mod start;

pub use fatal::log_fatal;
use start::config_file;

/// Serves `source` until SIGTERM or SIGINT, or until a binary upgrade hands over to a new
/// process. Returns an error (exit code 1) only when the first load or the start fails.
pub fn serve(source: Source, args: &EngineArgs, logger: &Logger) -> anyhow::Result<()> {
    // Read first: the path of the binary this process runs, before anything could replace it.
    let relaunch = Relaunch::of_this_process();
    let handover = Handover::from_env().context("cannot take over from the previous process")?;
    let runtime = start::runtime(args)?;
    // Signal handlers go in before anything listens, so an early SIGHUP cannot kill the process.
    let _guard = runtime.enter();
    let inherited = Inherited { relaunch, handover };
    let Some(mut control) = Control::start(&runtime, source, args, logger, inherited)? else {
        return Ok(());
    };
    let stop = control.run();
    control.drain(stop);
    Ok(())
}

/// What this process takes from the one that started it.
struct Inherited {
    relaunch: std::io::Result<Relaunch>,
    /// The sockets a binary upgrade handed over (none at a plain start).
    handover: Handover,
}

/// The signals the control loop handles.
struct Signals {
    hangup: Signal,
    terminate: Signal,
    interrupt: Signal,
    user2: Signal,
}

/// What ends the serving loop.
enum Stop {
    Signal(&'static str),
    /// A binary upgrade handed over to this process.
    Upgraded,
}

/// What the control loop reacts to.
enum Event {
    Reload(Option<ReloadRequest>),
    Upgrade(Option<oneshot::Sender<UpgradeOutcome>>),
    /// A DNS question is due or answered (true: the targets may change).
    Dns(bool),
    Stop(&'static str),
}

/// The control loop's state, from the start to the end of the drain.
struct Control<'a> {
    runtime: &'a tokio::runtime::Runtime,
    logger: &'a Logger,
    signals: Signals,
    publisher: Publisher,
    /// The path of the binary this process runs, read before anything could replace it.
    relaunch: std::io::Result<Relaunch>,
    admin: Arc<AdminShared>,
    /// A duplicate of the admin listener, handed over in an upgrade.
    admin_copy: Option<OwnedFd>,
    status: Status,
    /// The active health checks and JWKS fetches, on a thread of their own.
    background: Background,
    /// From the admin API.
    commands: mpsc::UnboundedReceiver<Command>,
    /// From the sources that follow their config (`--watch`, etcd).
    reloads: mpsc::UnboundedReceiver<ReloadRequest>,
    pid_file: Option<PidFile>,
}

impl Control<'_> {
    /// Serves until a stop signal or a binary upgrade that handed over.
    fn run(&mut self) -> Stop {
        let runtime = self.runtime;
        runtime.block_on(async {
            loop {
                match self.next_event().await {
                    Event::Reload(reply) => self.on_reload(reply).await,
                    Event::Upgrade(reply) => {
                        if let Some(stop) = self.on_upgrade(reply).await {
                            break stop;
                        }
                    }
                    Event::Dns(changed) => self.on_dns(changed),
                    Event::Stop(signal) => break Stop::Signal(signal),
                }
            }
        })
    }

    async fn next_event(&mut self) -> Event {
        let signals = &mut self.signals;
        tokio::select! {
            _ = signals.hangup.recv() => Event::Reload(None),
            _ = signals.user2.recv() => Event::Upgrade(None),
            Some(command) = self.commands.recv() => match command {
                Command::Reload(reply) => Event::Reload(Some(reply)),
                Command::Upgrade(reply) => Event::Upgrade(Some(reply)),
            },
            Some(reply) = self.reloads.recv() => Event::Reload(Some(reply)),
            changed = self.publisher.dns_changed() => Event::Dns(changed),
            _ = signals.terminate.recv() => Event::Stop("SIGTERM"),
            _ = signals.interrupt.recv() => Event::Stop("SIGINT"),
        }
    }

    /// SIGHUP, `POST /api/reload`, `--watch` or etcd: load again and apply.
    async fn on_reload(&mut self, reply: Option<ReloadRequest>) {
        notify::reloading();
        let reload = self.publisher.reload().await;
        self.admin.dns.store(Arc::new(self.publisher.dns_status()));
        if let Reload::Applied(applied) = &reload {
            self.applied(applied);
        }
        let outcome = reload.outcome();
        let config = config_file(self.publisher.source(), outcome.sha256(), outcome.revision());
        self.status.record_reload(&outcome, &self.publisher.current(), config);
        self.admin.status.store(Arc::new(self.status.clone()));
        notify::ready("serving");
        if let Some(reply) = reply {
            let _ = reply.send(outcome);
        }
    }

    /// What a reload that applied changes beside the snapshot: the log level, the admin token,
    /// what the admin API shows, the health checks and JWKS fetches.
    fn applied(&mut self, applied: &Applied) {
        // The new level is in force from the "reloaded" line on.
        self.logger.reload(applied.log);
        let token = applied.admin_token.clone();
        if self.admin.token.load().as_deref() != token.as_ref() {
            tracing::info!(
                "admin: {}",
                if token.is_some() {
                    "the token is now required (changed by this reload)"
                } else {
                    "the token was removed: the admin API asks for none"
                }
            );
            self.admin.token.store(token.map(Arc::new));
        }
        tracing::info!(
            result = "applied",
            summary = applied.summary.as_str(),
            sha256 = applied.sha256.as_deref(),
            "reloaded"
        );
        let source = self.publisher.source().name();
        self.admin
            .config
            .store(Arc::new(RunningConfig::redacted(source, &applied.text)));
        let current = self.publisher.current();
        self.admin.snapshot.store(current.clone());
        self.background.reload(current);
    }

    /// New DNS answers: publish the targets they give.
    fn on_dns(&mut self, changed: bool) {
        if changed && self.publisher.publish_dns() {
            let current = self.publisher.current();
            self.admin.snapshot.store(current.clone());
            self.background.targets_changed(current);
        }
        self.admin.dns.store(Arc::new(self.publisher.dns_status()));
    }

    /// SIGUSR2 or `POST /api/upgrade`: start the binary found at this process's path with every
    /// listening socket (the engine's and the admin listener's) and wait for it. `Some` once it
    /// took over.
    async fn on_upgrade(&mut self, reply: Option<oneshot::Sender<UpgradeOutcome>>) -> Option<Stop> {
        let engine = self.publisher.engine();
        let timeout = engine.current().upgrade_timeout;
        let sockets: Vec<BorrowedFd<'_>> = engine
            .listening_sockets()
            .chain(self.admin_copy.as_ref().map(|a| a.as_fd()))
            .collect();
        let outcome = crate::upgrade::hand_over(&self.relaunch, &sockets, timeout).await;
        // The admin listener stops accepting before the caller hears the outcome, so its next
        // connection reaches the new process.
        if matches!(outcome, UpgradeOutcome::Ready { .. }) {
            self.admin.handed_over.notify_one();
        }
        if let Some(reply) = reply {
            let _ = reply.send(outcome.clone());
        }
        if let UpgradeOutcome::Ready { pid } = outcome {
            notify::handed_over(pid);
            return Some(Stop::Upgraded);
        }
        // The new process may have written its PID before it failed.
        if let Some(Err(e)) = self.pid_file.as_ref().map(PidFile::rewrite) {
            tracing::warn!("--pid-file: cannot write it back after the failed upgrade: {e}");
        }
        None
    }
}
