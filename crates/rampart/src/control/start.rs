//! The start: the first load (and its DNS answers), the engine on its snapshot, the sources that
//! follow their config, the admin listener, the PID file, and "listening".

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use arc_swap::{ArcSwap, ArcSwapOption};
use rampart_config::{AdminAddress, AdminSettings, LiveState};
use rampart_control::discovery::Discovery;
use rampart_control::{summary, CommandLine, Loaded, Publisher, Source, StartOnly, Started};
use rampart_proxy::background::Background;
use rampart_proxy::checker::FirstRound;
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::{Engine, EngineOptions};
use tokio::signal::unix::{signal, SignalKind};

use super::{fatal, Control, Inherited, Signals};
use crate::admin::state::{ConfigFile, RunningConfig, Status};
use crate::admin::{self, AdminShared};
use crate::cli::EngineArgs;
use crate::logger::Logger;
use crate::notify;
use crate::pid_file::PidFile;
use crate::upgrade::inherit::Handover;

/// The control loop's runtime, once the checks that need none passed.
pub(super) fn runtime(args: &EngineArgs) -> anyhow::Result<tokio::runtime::Runtime> {
    if let Some(path) = &args.session_log {
        check_log_file(path).with_context(|| format!("--session-log {}: cannot open", path.display()))?;
    }
    raise_open_files_limit();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start control runtime")
}

impl Signals {
    /// Needs the runtime entered.
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            user2: signal(SignalKind::user_defined2()).context("cannot handle SIGUSR2")?,
        })
    }
}

/// The first load, with the answers to its DNS questions.
struct FirstLoad {
    loaded: Loaded,
    live: LiveState,
    discovery: Discovery,
}

impl<'a> Control<'a> {
    /// Loads the source, starts the engine and the admin listener, and says "listening". `None`
    /// when a stop signal came while the first DNS answers were awaited.
    pub(super) fn start(
        runtime: &'a tokio::runtime::Runtime,
        source: Source,
        args: &'a EngineArgs,
        logger: &'a Logger,
        inherited: Inherited,
    ) -> anyhow::Result<Option<Control<'a>>> {
        let Inherited { relaunch, mut handover } = inherited;
        let mut signals = Signals::install()?;
        let Some(first) = first_load(runtime, &source, args, logger, &mut signals)? else {
            return Ok(None);
        };
        let FirstLoad {
            loaded,
            live,
            discovery,
        } = first;
        let workers = live.workers();
        let background_id = live.control_plane_id();
        let pin = args.pin || loaded.pin;
        let session_log = open_session_log(&loaded)?;
        let admin_settings = admin_settings(args, loaded.admin.clone())?;
        let status = Status::new(
            &loaded.snapshot,
            workers,
            config_file(&source, loaded.sha256.clone(), loaded.revision),
        );
        let line = summary(&loaded.snapshot);
        let running_config = RunningConfig::redacted(source.name(), &loaded.text);
        let listeners = rampart_control::bind_failure::listener_names(&loaded.snapshot);
        let command_line = command_line(args);
        let start_only = StartOnly::of(&loaded, command_line);
        // A TCP admin listener's socket is not a listener's: set it aside before the engine starts.
        let admin_socket = match admin_settings.as_ref().map(|a| &a.listen) {
            Some(AdminAddress::Tcp(addr)) => handover.take_tcp(*addr),
            _ => None,
        };
        let inherited = std::mem::take(&mut handover.sockets);
        let taken_over = handover.socket_count() + inherited.len() + usize::from(admin_socket.is_some());
        let engine = Engine::start(
            EngineOptions { workers, pin },
            loaded.snapshot,
            session_log.sink(),
            inherited,
        )
        .map_err(|e| fatal::wrap(&listeners, e))?;
        let first_round = FirstRound::default();
        let background = Background::start(background_id, engine.current(), Some(&first_round))
            .context("cannot start the thread of the health checks and JWKS fetches")?;
        let mut publisher = Publisher::new(Started {
            source,
            live,
            discovery,
            engine,
            session_log,
            command_line,
            start_only,
            watch: loaded.watch,
            revision: loaded.revision,
        });
        let (commands, command_rx) = tokio::sync::mpsc::unbounded_channel();
        let (reloads, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        let reachable = follow_source(&mut publisher, &reloads)?;
        let settings = admin_settings.as_ref();
        let admin = admin_shared(
            &publisher,
            status.clone(),
            running_config,
            first_round,
            commands,
            settings,
            reachable,
        );
        let admin_copy = start_admin(admin_settings.as_ref(), admin_socket, &admin, &mut handover)?;
        let pid_file = args.pid_file.as_deref().map(write_pid_file).transpose()?;
        // Last: "listening" means every listener, the admin one included, is bound.
        tracing::info!(
            "listening: {line}; {}{}",
            rampart_proxy::log_summary::count_of(workers as u64, "worker"),
            if pin { ", pinned" } else { "" }
        );
        say_ready(handover, taken_over);
        Ok(Some(Control {
            runtime,
            logger,
            signals,
            publisher,
            relaunch,
            admin,
            admin_copy,
            status,
            background,
            commands: command_rx,
            reloads: reload_rx,
            pid_file,
        }))
    }
}

/// Loads the source and asks the DNS questions of its targets written by name, before the first
/// request can need them. `None`: a stop signal came during that wait (stopped before anything
/// is bound).
fn first_load(
    runtime: &tokio::runtime::Runtime,
    source: &Source,
    args: &EngineArgs,
    logger: &Logger,
    signals: &mut Signals,
) -> anyhow::Result<Option<FirstLoad>> {
    // The command line's worker count wins; else the first load fixes it (the config's, or one
    // per CPU). Metric cells are made per worker, so reloads keep it.
    let mut live = LiveState::new(args.workers.map(usize::from));
    let mut loaded = source.load(&mut live)?;
    let mut discovery = Discovery::new();
    let first = runtime.block_on(async {
        tokio::select! {
            snapshot = discovery.complete(loaded.snapshot, &mut live) => Ok(snapshot),
            _ = signals.terminate.recv() => Err("SIGTERM"),
            _ = signals.interrupt.recv() => Err("SIGINT"),
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
            return Ok(None);
        }
    };
    logger.start(loaded.log);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    Ok(Some(FirstLoad {
        loaded,
        live,
        discovery,
    }))
}

/// The session log the first load names (or `--session-log`).
fn open_session_log(loaded: &Loaded) -> anyhow::Result<SessionLogWriter> {
    let session_path = loaded.snapshot.session_log.as_deref().map(Path::to_path_buf);
    SessionLogWriter::start(session_path.clone()).with_context(|| {
        let shown = session_path.as_deref().unwrap_or(Path::new(""));
        format!("cannot open session log {}", shown.display())
    })
}

/// Which start-only settings the command line fixes.
fn command_line(args: &EngineArgs) -> CommandLine {
    CommandLine {
        workers: args.workers.is_some(),
        pin: args.pin,
        admin: args.admin.is_some(),
        log_format: args.log_format.is_some(),
    }
}

/// Starts following the source where it changes by itself (`--watch`, etcd): for etcd, whether
/// it answered its last read.
fn follow_source(
    publisher: &mut Publisher,
    reloads: &tokio::sync::mpsc::UnboundedSender<rampart_control::ReloadRequest>,
) -> anyhow::Result<Option<Arc<AtomicBool>>> {
    let context = match publisher.source() {
        Source::Etcd { .. } => "cannot start following etcd",
        _ => "--watch: cannot watch files",
    };
    publisher.follow_source(reloads).context(context)
}

/// What the admin listener reads, as the start leaves it.
fn admin_shared(
    publisher: &Publisher,
    status: Status,
    running_config: RunningConfig,
    first_round: FirstRound,
    commands: tokio::sync::mpsc::UnboundedSender<admin::Command>,
    settings: Option<&AdminSettings>,
    source_reachable: Option<Arc<AtomicBool>>,
) -> Arc<AdminShared> {
    let token = settings.and_then(|a| a.token.clone());
    Arc::new(AdminShared {
        status: ArcSwap::from_pointee(status),
        snapshot: ArcSwap::new(publisher.current()),
        config: ArcSwap::from_pointee(running_config),
        first_round,
        draining: AtomicBool::new(false),
        commands,
        token: ArcSwapOption::from(token.map(Arc::new)),
        started: Instant::now(),
        history: Default::default(),
        handed_over: Default::default(),
        source_reachable,
        dns: ArcSwap::from_pointee(publisher.dns_status()),
        acme: publisher.acme_status(),
        ready_requires_source: publisher.source().ready_requires_source(),
    })
}

/// Starts the admin listener, if there is one (with its socket from the previous process, in an
/// upgrade): a duplicate of its socket, to hand over in the next upgrade.
fn start_admin(
    settings: Option<&AdminSettings>,
    socket: Option<std::net::TcpListener>,
    admin: &Arc<AdminShared>,
    handover: &mut Handover,
) -> anyhow::Result<Option<std::os::fd::OwnedFd>> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    if let Some(socket) = socket {
        handover.sockets.add(socket.into())?;
    }
    let copy = admin::start(&settings.listen, admin.clone(), handover)?;
    tracing::info!("admin API on {}", settings.listen);
    Ok(Some(copy))
}

/// `--pid-file`: this process's PID, removed at the end.
fn write_pid_file(path: &Path) -> anyhow::Result<PidFile> {
    PidFile::write(path).map_err(|e| anyhow::anyhow!("--pid-file {}: cannot write: {e}", path.display()))
}

/// Tells the service manager (or, in an upgrade, the previous process) that this one is ready.
fn say_ready(mut handover: Handover, taken_over: usize) {
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
}

/// The config file's path and hash, for a file source.
pub(super) fn config_file(source: &Source, sha256: Option<String>, revision: Option<i64>) -> Option<ConfigFile> {
    match (source, sha256) {
        (Source::File { path, .. }, Some(sha256)) => Some(ConfigFile {
            path: path.display().to_string(),
            sha256,
            revision: None,
        }),
        (Source::Etcd { .. }, Some(sha256)) => Some(ConfigFile {
            path: source.name(),
            sha256,
            revision,
        }),
        _ => None,
    }
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
/// Opens a log file the way the writer will; a destination that is no file (standard output,
/// syslog, `otlp`) is checked by the config compiler instead.
fn check_log_file(path: &Path) -> std::io::Result<()> {
    use rampart_model::log_target::LogTarget;
    if !matches!(path.to_str().map(LogTarget::parse), None | Some(Ok(LogTarget::File(_)))) {
        return Ok(());
    }
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
