//! Where the running config comes from, and how to (re)load it: a config file (with the files it
//! includes), a hosts file, the command line, or etcd. Every source produces the same raw config
//! and goes through the same compiler (`rampart_config`); [`crate::publisher`] puts the result
//! in force.

use std::path::PathBuf;
use std::sync::Arc;

use rampart_config::compile::parse_bind;
use rampart_config::{
    compile_config_env, hosts, simple_l4, AdminSettings, Compiled, LiveState, LoadedConfig, LogSettings, SimpleL4,
    WatchList,
};
use rampart_model::balance::BalancePolicy;
use rampart_model::ListenerProtocol;
use rampart_model::Snapshot;
use rampart_proxy::log_summary::count_of;

/// A config source; SIGHUP loads it again.
#[derive(Debug, Clone)]
pub enum Source {
    /// `rampart run -c FILE` (with the files it includes), and `--session-log` for when the
    /// file names no session log.
    File {
        path: PathBuf,
        session_log: Option<PathBuf>,
        /// `--watch`: a change to any file of the config reloads too.
        watch: bool,
    },
    /// `rampart [ADDR:]PORT`: a listen address plus a hosts file.
    Hosts {
        path: PathBuf,
        bind: String,
        policy: BalancePolicy,
        session_log: Option<PathBuf>,
    },
    /// `rampart tcp`: fixed at start.
    Fixed(Box<SimpleL4>),
    /// `rampart run --etcd URL`: the config stored in etcd under its prefix + `config`, applied
    /// again each time it changes there.
    Etcd {
        /// As given to `--etcd` (for `/api/status`).
        url: String,
        /// The client (shared with the watch: one login per process).
        store: Arc<crate::etcd::Etcd>,
        /// `--ready-requires-etcd`: not ready while etcd cannot be reached.
        ready_requires_etcd: bool,
        /// Where the last config applied from etcd is kept (`--state-dir`).
        state_dir: Option<PathBuf>,
        session_log: Option<PathBuf>,
    },
}

/// Why a source could not be loaded. The message is ready to print: one `file:line:col:
/// message` per line where the problem has a place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(String);

impl LoadError {
    /// Each problem, one per line of the message.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.0.lines()
    }
}

impl From<String> for LoadError {
    fn from(message: String) -> LoadError {
        LoadError(message)
    }
}

/// A loaded config.
pub struct Loaded {
    pub snapshot: Snapshot,
    /// `[global] workers` as written.
    pub workers: Option<usize>,
    pub pin: bool,
    /// `file:line:col: message` lines that do not stop the load (a certificate near expiry).
    pub warnings: Vec<String>,
    /// `[admin]` of a config file.
    pub admin: Option<AdminSettings>,
    /// `[global] log_level` and `log_format` (defaults for the command-line sources).
    pub log: LogSettings,
    /// The SHA-256 of the config file's text, in hex (config files only).
    pub sha256: Option<String>,
    /// The TOML the snapshot was compiled from (the file's text, each file's after a
    /// `# file: NAME` line when it includes others, or what the command line stands for).
    pub text: String,
    /// The files a change of which `run --watch` reloads for (config files only).
    pub watch: WatchList,
    /// The etcd revision that last changed the config (configs from etcd only).
    pub revision: Option<i64>,
}

impl Loaded {
    fn from(compiled: Compiled) -> Loaded {
        Loaded {
            snapshot: compiled.snapshot,
            workers: compiled.workers,
            pin: compiled.pin,
            warnings: compiled.warnings.iter().map(ToString::to_string).collect(),
            admin: compiled.admin,
            log: compiled.log,
            sha256: None,
            text: String::new(),
            watch: WatchList::default(),
            revision: None,
        }
    }
}

impl Source {
    /// Reads and compiles the source. The error is ready to print: one `file:line:col: message`
    /// per line where the problem has a place.
    pub fn load(&self, live: &mut LiveState) -> Result<Loaded, LoadError> {
        match self {
            Source::File { path, session_log, .. } => {
                let loaded = load_config_file(path, live)?;
                let text = loaded.text();
                let LoadedConfig {
                    mut compiled, watch, ..
                } = loaded;
                if compiled.snapshot.session_log.is_none() {
                    compiled.snapshot.session_log = session_log.as_deref().map(Arc::from);
                }
                Ok(Loaded {
                    sha256: Some(sha256_hex(text.as_bytes())),
                    text,
                    watch,
                    ..Loaded::from(compiled)
                })
            }
            Source::Hosts {
                path,
                bind,
                policy,
                session_log,
            } => {
                let name = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read hosts file: {e}"))?;
                let targets = hosts::parse_hosts(&name, &text).map_err(|e| e.to_string())?;
                let bind = parse_bind(bind)?;
                let spec = SimpleL4 {
                    http: false,
                    udp: false,
                    bind,
                    targets,
                    policy: *policy,
                    session_log: session_log.clone(),
                    tls: Vec::new(),
                    access_log: None,
                    upstream_protocol: None,
                    http3: false,
                    sni: Vec::new(),
                    acme: None,
                    tracing: None,
                };
                load_command_line(&spec, live)
            }
            Source::Fixed(spec) => load_command_line(spec, live),
            Source::Etcd {
                url,
                store,
                state_dir,
                session_log,
                ..
            } => {
                let key = store.config_key();
                let kept = state_dir.as_deref().map(crate::etcd::KeptConfig::in_dir);
                let stored = match store.get() {
                    Ok((Some(stored), _)) => stored,
                    Ok((None, _)) => {
                        return Err(LoadError(format!(
                            "etcd {url}: {key}: no config there (store one with `rampart push`)"
                        )))
                    }
                    // etcd out of reach: the last config applied from it, when one was kept.
                    Err(e) => match kept.as_ref().and_then(|k| k.read()) {
                        Some(stored) => {
                            tracing::warn!(
                                "etcd: {e:#}; starting from the config kept in {} (revision {})",
                                state_dir
                                    .as_deref()
                                    .unwrap_or_else(|| std::path::Path::new(""))
                                    .display(),
                                stored.mod_revision
                            );
                            stored
                        }
                        None => return Err(LoadError(e.to_string())),
                    },
                };
                let name = format!("etcd:{key}");
                let loaded = compile_config_env(&name, &stored.text, live).map_err(|e| e.to_string())?;
                let LoadedConfig { mut compiled, .. } = loaded;
                if compiled.snapshot.session_log.is_none() {
                    compiled.snapshot.session_log = session_log.as_deref().map(Arc::from);
                }
                if let Some(kept) = &kept {
                    if let Err(e) = kept.write(&stored) {
                        tracing::warn!("--state-dir: cannot keep the config: {e}");
                    }
                }
                Ok(Loaded {
                    sha256: Some(sha256_hex(stored.text.as_bytes())),
                    text: stored.text,
                    revision: Some(stored.mod_revision),
                    ..Loaded::from(compiled)
                })
            }
        }
    }

    /// What `GET /api/config` names as the config's origin.
    pub fn name(&self) -> String {
        match self {
            Source::File { path, .. } => path.display().to_string(),
            Source::Hosts { path, .. } => format!("hosts file {}", path.display()),
            Source::Fixed(_) => "command line".to_string(),
            Source::Etcd { url, store, .. } => format!("etcd {url} {}", store.config_key()),
        }
    }

    /// Whether `/readyz` needs the source reachable (`run --etcd --ready-requires-etcd`).
    pub fn ready_requires_source(&self) -> bool {
        matches!(
            self,
            Source::Etcd {
                ready_requires_etcd: true,
                ..
            }
        )
    }

    /// Whether SIGHUP has anything to read again: a file, or certificates named on the command
    /// line (renewed in place).
    pub fn reloadable(&self) -> bool {
        match self {
            Source::Fixed(spec) => !spec.tls.is_empty(),
            _ => true,
        }
    }
}

/// Reads and compiles a config file with the files it includes (`rampart run` and `rampart
/// check`). The error is ready to print, one `file:line:col: message` per line.
pub fn load_config_file(path: &std::path::Path, live: &mut LiveState) -> Result<LoadedConfig, LoadError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    compile_config_env(&name, &text, live).map_err(|e| LoadError(e.to_string()))
}

/// Compiles the config a command line stands for; its `[global]` start settings do not apply
/// (the command line's own flags do).
fn load_command_line(spec: &SimpleL4, live: &mut LiveState) -> Result<Loaded, LoadError> {
    let compiled = simple_l4(spec, live).map_err(|e| e.to_string())?;
    Ok(Loaded {
        text: spec.to_toml(),
        ..Loaded::from(Compiled { pin: false, ..compiled })
    })
}

/// `3 targets`, or with targets written by name `1 target, 2 names from DNS` (their addresses
/// count once answered; `rampart check` asks none).
fn targets_of(targets: usize, names: usize) -> String {
    let targets = count_of(targets as u64, "target");
    match names {
        0 => targets,
        n => format!("{targets}, {} from DNS", count_of(n as u64, "name")),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// One line describing a snapshot, for logs and `rampart check`.
pub fn summary(snapshot: &Snapshot) -> String {
    let targets: usize = snapshot.upstreams.iter().map(|u| u.targets.len()).sum();
    let names: usize = snapshot.upstreams.iter().map(|u| u.lookups.len()).sum();
    let listeners: Vec<String> = snapshot
        .listeners
        .iter()
        .map(|l| {
            let bind = l.bind.map_or("hand-over only".to_string(), |b| b.to_string());
            (l, bind)
        })
        .map(|(l, bind)| match &l.protocol {
            ListenerProtocol::Tcp { upstream, routing } => {
                let routes = routing.as_ref().map_or(String::new(), |r| {
                    format!(", {}", count_of(r.routes.len() as u64, "route"))
                });
                let default = match upstream {
                    Some(u) => {
                        let u = &snapshot.upstreams[*u];
                        format!("{} ({})", u.name, targets_of(u.targets.len(), u.lookups.len()))
                    }
                    None => "close".to_string(),
                };
                format!(
                    "{} on {bind} (tcp{}{routes}) -> {default}",
                    l.name,
                    if l.tls.is_some() { ", tls" } else { "" },
                )
            }
            ListenerProtocol::Udp { upstream, .. } => {
                let u = &snapshot.upstreams[*upstream];
                let targets = targets_of(u.targets.len(), u.lookups.len());
                format!("{} on {bind} (udp) -> {} ({targets})", l.name, u.name)
            }
            ListenerProtocol::Http(h) => format!(
                "{} on {bind} (http{}{}, {})",
                l.name,
                if l.tls.is_some() { ", tls" } else { "" },
                if h.http3.is_some() { ", http3 on udp" } else { "" },
                count_of(h.routes.len() as u64, "route")
            ),
        })
        .collect();
    format!(
        "{}, {}, {}: {}",
        count_of(snapshot.listeners.len() as u64, "listener"),
        count_of(snapshot.upstreams.len() as u64, "upstream"),
        targets_of(targets, names),
        listeners.join("; ")
    )
}
