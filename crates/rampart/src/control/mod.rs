//! The control plane: starts the engine, runs health checks, and handles signals (SIGHUP reload,
//! SIGUSR2 binary upgrade, SIGTERM/SIGINT drain and exit). It runs on the main thread's own small
//! runtime; workers never wait on it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use anyhow::Context;
use rampart_config::LiveState;
use rampart_proxy::checker::spawn_checks;
use rampart_proxy::filters::auth::jwks_fetch::spawn_jwks_fetches;
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::{Engine, EngineOptions};
use tokio::signal::unix::{signal, SignalKind};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use rampart_config::{AdminAddress, AdminSettings};
use rampart_proxy::checker::FirstRound;

use crate::acme::Acme;
use crate::admin::state::{RunningConfig, Status};
use crate::admin::{self, AdminShared, Command, ReloadOutcome};
use crate::cli::EngineArgs;
use crate::discovery::Discovery;
use crate::logger::Logger;
use crate::notify;
use crate::source::{summary, Source};
use crate::upgrade::inherit::Handover;
use crate::upgrade::spawn::{Relaunch, UpgradeOutcome};
use crate::watch::Watching;

mod bind_failure;
mod reload;
mod start_only;

pub use bind_failure::log_fatal;
use bind_failure::{listener_names, BindFailure};
use reload::{config_file, live_revision, live_sha256, publish_targets, reload};

/// What ends the serving loop.
enum Stop {
    Signal(&'static str),
    /// A binary upgrade handed over to this process.
    Upgraded,
}

/// Serves `source` until SIGTERM or SIGINT, or until a binary upgrade hands over to a new
/// process. Returns an error (exit code 1) only when the first load or the start fails.
pub fn serve(source: Source, args: &EngineArgs, logger: &Logger) -> anyhow::Result<()> {
    // Read first: the path of the binary this process runs, before anything could replace it.
    let relaunch = Relaunch::of_this_process();
    let mut handover = Handover::from_env().context("cannot take over from the previous process")?;
    if let Some(path) = &args.session_log {
        check_log_file(path).with_context(|| format!("--session-log {}: cannot open", path.display()))?;
    }
    raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start control runtime")?;
    // Signal handlers go in before anything listens, so an early SIGHUP cannot kill the process.
    let _guard = runtime.enter();
    let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut user2 = signal(SignalKind::user_defined2()).context("cannot handle SIGUSR2")?;

    // The command line's worker count wins; else the first load fixes it (the config's, or one
    // per CPU). Metric cells are made per worker, so reloads keep it.
    let mut live = LiveState::new(args.workers.map(usize::from));
    let mut loaded = source.load(&mut live).map_err(anyhow::Error::msg)?;
    // Targets written by name are asked before the first request can need them.
    let mut discovery = Discovery::new();
    // A stop signal during that wait stops here, before anything is bound.
    let first = runtime.block_on(async {
        tokio::select! {
            snapshot = discovery.complete(loaded.snapshot, &mut live) => Ok(snapshot),
            _ = terminate.recv() => Err("SIGTERM"),
            _ = interrupt.recv() => Err("SIGINT"),
        }
    });
    loaded.snapshot = match first {
        Ok(snapshot) => snapshot,
        Err(signal) => {
            logger.start(loaded.log);
            tracing::info!(
                signal,
                "{signal} while waiting for the first DNS answers: stopped before listening"
            );
            return Ok(());
        }
    };
    logger.start(loaded.log);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let workers = live.workers();
    let pin = args.pin || loaded.pin;
    let session_path = loaded.snapshot.session_log.as_deref().map(Path::to_path_buf);
    let session_log = SessionLogWriter::start(session_path.clone()).with_context(|| {
        let shown = session_path.as_deref().unwrap_or(Path::new(""));
        format!("cannot open session log {}", shown.display())
    })?;
    let admin_settings = admin_settings(args, loaded.admin.clone())?;
    let mut status = Status::new(
        &loaded.snapshot,
        workers,
        config_file(&source, loaded.sha256.clone(), loaded.revision),
    );
    let line = summary(&loaded.snapshot);
    let running_config = RunningConfig::redacted(source.name(), &loaded.text);
    let listeners = listener_names(&loaded.snapshot);
    let start_only = start_only::StartOnly::of(&loaded, args);
    let watch_list = loaded.watch.clone();
    let etcd_revision = loaded.revision;
    // A TCP admin listener's socket is not a listener's: set it aside before the engine starts.
    let admin_socket = match admin_settings.as_ref().map(|a| &a.listen) {
        Some(AdminAddress::Tcp(addr)) => handover.take_tcp(*addr),
        _ => None,
    };
    let inherited = std::mem::take(&mut handover.sockets);
    let taken_over = handover.socket_count() + inherited.len() + usize::from(admin_socket.is_some());
    let mut engine = Engine::start(
        EngineOptions { workers, pin },
        loaded.snapshot,
        session_log.sink(),
        inherited,
    )
    .map_err(|e| BindFailure::wrap(&listeners, e))?;
    let first_round = FirstRound::default();
    let mut checks = spawn_checks(&engine.current(), Some(&first_round));
    let mut jwks_fetches = spawn_jwks_fetches(&engine.current());
    let config_etcd = match &source {
        Source::Etcd { store, .. } => Some(store.clone()),
        _ => None,
    };
    let mut acme = Acme::new(live.acme(), config_etcd);
    acme.follow(&engine.current());
    let (commands, mut command_rx) = tokio::sync::mpsc::unbounded_channel();
    let watching = match &source {
        Source::File { watch: true, .. } => {
            let (files, patterns) = (watch_list.files.len(), watch_list.patterns.len());
            let watching = Watching::start(watch_list, commands.clone()).context("--watch: cannot watch files")?;
            tracing::info!(
                files,
                patterns,
                "watch: a change to the config's {files} file(s) or {patterns} include pattern(s) reloads it"
            );
            Some(watching)
        }
        _ => None,
    };
    let mut source_reachable = None;
    if let (Source::Etcd { store, .. }, Some(revision)) = (&source, etcd_revision) {
        tracing::info!(
            "etcd: running from {} at revision {revision}; a change there reloads",
            store.config_key()
        );
        let reachable = Arc::new(AtomicBool::new(true));
        crate::etcd::follow(store.clone(), revision, reachable.clone(), commands.clone())
            .context("cannot start following etcd")?;
        source_reachable = Some(reachable);
    }
    let admin = Arc::new(AdminShared {
        status: ArcSwap::from_pointee(status.clone()),
        snapshot: ArcSwap::new(engine.current()),
        config: ArcSwap::from_pointee(running_config),
        first_round,
        draining: AtomicBool::new(false),
        commands,
        token: ArcSwapOption::from(admin_settings.as_ref().and_then(|a| a.token.clone()).map(Arc::new)),
        started: Instant::now(),
        history: Default::default(),
        handed_over: Default::default(),
        source_reachable,
        dns: ArcSwap::from_pointee(discovery.status()),
        acme: acme.status(),
        ready_requires_source: source.ready_requires_source(),
    });
    let mut admin_copy = None;
    if let Some(settings) = &admin_settings {
        if let Some(socket) = admin_socket {
            handover.sockets.add(socket)?;
        }
        admin_copy = Some(admin::start(&settings.listen, admin.clone(), &mut handover)?);
        tracing::info!("admin API on {}", settings.listen);
    }
    let mut pid_file = match &args.pid_file {
        Some(path) => Some(
            crate::pid_file::PidFile::write(path)
                .map_err(|e| anyhow::anyhow!("--pid-file {}: cannot write: {e}", path.display()))?,
        ),
        None => None,
    };
    // Last: "listening" means every listener, the admin one included, is bound.
    tracing::info!(
        "listening: {line}; {}{}",
        rampart_proxy::log_summary::count_of(workers as u64, "worker"),
        if pin { ", pinned" } else { "" }
    );
    if handover.is_upgrade() {
        // The previous process tells the service manager, once it has stopped accepting.
        tracing::info!(
            sockets = taken_over,
            "upgrade: took over {taken_over} listening socket(s) from PID {}; ready",
            std::os::unix::process::parent_id()
        );
        if let Err(e) = handover.say_ready() {
            tracing::warn!("upgrade: cannot tell the previous process this one is ready: {e}");
        }
    } else {
        notify::ready("serving");
    }
    drop(handover);

    let stop = runtime.block_on(async {
        loop {
            let event = tokio::select! {
                _ = hangup.recv() => Event::Reload(None),
                _ = user2.recv() => Event::Upgrade(None),
                Some(command) = command_rx.recv() => match command {
                    Command::Reload(reply) => Event::Reload(Some(reply)),
                    Command::Upgrade(reply) => Event::Upgrade(Some(reply)),
                },
                changed = discovery.changed() => {
                    if changed {
                        if let Some(next) = discovery.publish(&engine.current(), &mut live) {
                            publish_targets(next, &mut engine, &admin);
                            checks.abort_all();
                            checks = spawn_checks(&engine.current(), None);
                        }
                    }
                    admin.dns.store(Arc::new(discovery.status()));
                    continue;
                }
                _ = terminate.recv() => break Stop::Signal("SIGTERM"),
                _ = interrupt.recv() => break Stop::Signal("SIGINT"),
            };
            match event {
                Event::Reload(reply) => {
                    notify::reloading();
                    let outcome = reload(
                        &source,
                        &mut live,
                        &mut engine,
                        &mut discovery,
                        &session_log,
                        &admin,
                        logger,
                        watching.as_ref(),
                        &start_only,
                        args,
                    )
                    .await;
                    admin.dns.store(Arc::new(discovery.status()));
                    if matches!(outcome, ReloadOutcome::Applied { .. }) {
                        checks.abort_all();
                        checks = spawn_checks(&engine.current(), None);
                        jwks_fetches.abort_all();
                        jwks_fetches = spawn_jwks_fetches(&engine.current());
                        acme.follow(&engine.current());
                    }
                    status.record_reload(
                        &outcome,
                        &engine.current(),
                        config_file(&source, live_sha256(&outcome), live_revision(&outcome)),
                    );
                    admin.status.store(Arc::new(status.clone()));
                    notify::ready("serving");
                    if let Some(reply) = reply {
                        let _ = reply.send(outcome);
                    }
                }
                Event::Upgrade(reply) => {
                    let outcome = upgrade(
                        &relaunch,
                        &engine,
                        admin_copy.as_ref(),
                        engine.current().upgrade_timeout,
                    )
                    .await;
                    // The admin listener stops accepting before the caller hears the outcome,
                    // so its next connection reaches the new process.
                    if matches!(outcome, UpgradeOutcome::Ready { .. }) {
                        admin.handed_over.notify_one();
                    }
                    if let Some(reply) = reply {
                        let _ = reply.send(outcome.clone());
                    }
                    if let UpgradeOutcome::Ready { pid } = outcome {
                        notify::handed_over(pid);
                        break Stop::Upgraded;
                    }
                    // The new process may have written its PID before it failed.
                    if let Some(Err(e)) = pid_file.as_ref().map(crate::pid_file::PidFile::rewrite) {
                        tracing::warn!("--pid-file: cannot write it back after the failed upgrade: {e}");
                    }
                }
            }
        }
    });
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
    drop(command_rx);
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
        let draining = tokio::task::spawn_blocking(move || engine.shutdown(drain_timeout));
        let again = tokio::select! {
            cut = draining => return cut.unwrap_or(0),
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        let open = counters
            .iter()
            .map(|c| c.open.load(std::sync::atomic::Ordering::Relaxed))
            .sum::<u64>();
        tracing::warn!(
            signal = again,
            elapsed_ms = drain_started.elapsed().as_millis() as u64,
            cut = open,
            "{again} during the drain: force quit, cutting {}",
            rampart_proxy::log_summary::count_of(open, "open connection")
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
            rampart_proxy::log_summary::count_of(cut, "connection")
        );
    } else {
        tracing::info!(
            signal = drain,
            elapsed_ms,
            cut,
            "drain ended: every connection finished"
        );
    }
    let sum = |f: fn(&rampart_proxy::worker::WorkerCounters) -> u64| counters.iter().map(|c| f(c)).sum::<u64>();
    let (requests, opened, reused) = (
        sum(|c| c.http_requests.load(std::sync::atomic::Ordering::Relaxed)),
        sum(|c| c.upstream_connects.load(std::sync::atomic::Ordering::Relaxed)),
        sum(|c| c.upstream_reuses.load(std::sync::atomic::Ordering::Relaxed)),
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
    let failed_handshakes = sum(|c| c.tls_handshake_failures.load(std::sync::atomic::Ordering::Relaxed));
    if failed_handshakes > 0 {
        tracing::info!("tls: {failed_handshakes} handshake(s) failed or timed out (logged at debug level)");
    }
    session_log.flush();
    drop(pid_file);
    tracing::info!("stopped");
    Ok(())
}

/// A request to the serving loop.
enum Event {
    Reload(Option<tokio::sync::oneshot::Sender<ReloadOutcome>>),
    Upgrade(Option<tokio::sync::oneshot::Sender<UpgradeOutcome>>),
}

/// Starts the binary found at this process's path with every listening socket (the engine's and
/// the admin listener's) and waits for it (SIGUSR2, or `POST /api/upgrade`).
async fn upgrade(
    relaunch: &std::io::Result<Relaunch>,
    engine: &Engine,
    admin: Option<&OwnedFd>,
    timeout: std::time::Duration,
) -> UpgradeOutcome {
    let sockets: Vec<BorrowedFd<'_>> = engine.listening_sockets().chain(admin.map(|a| a.as_fd())).collect();
    crate::upgrade::hand_over(relaunch, &sockets, timeout).await
}

/// The admin listener to serve: `--admin` (loopback or a unix socket, no token) wins over the
/// config's `[admin]`.
fn admin_settings(args: &EngineArgs, from_config: Option<AdminSettings>) -> anyhow::Result<Option<AdminSettings>> {
    let Some(listen) = &args.admin else {
        return Ok(from_config);
    };
    let listen = AdminAddress::parse(listen).map_err(|e| anyhow::anyhow!("--admin: {e}"))?;
    anyhow::ensure!(
        listen.is_local(),
        "--admin {listen}: only a loopback address or a unix socket; serve it wider with [admin] and a token in a config file"
    );
    Ok(Some(AdminSettings { listen, token: None }))
}

/// Opens a log file the way the log writer does (append, create), to refuse a bad path at once.
fn check_log_file(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
}

/// Each connection takes two descriptors; take the hard limit rather than the usual 1024.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass, which outlives the calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
