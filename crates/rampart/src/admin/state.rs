//! What the control loop shares with the admin listener: a status it republishes after every
//! load, readiness, and a channel for commands that change the running process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arc_swap::{ArcSwap, ArcSwapOption};
use rampart_model::Snapshot;
use rampart_proxy::checker::FirstRound;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

pub use rampart_control::ReloadOutcome;

/// Shared between the control loop (writer) and the admin thread (reader).
pub struct AdminShared {
    pub status: ArcSwap<Status>,
    /// The snapshot in force (the engine's), for target health.
    pub snapshot: ArcSwap<Snapshot>,
    /// The config as loaded (TOML; the admin token redacted), and where it came from.
    pub config: ArcSwap<RunningConfig>,
    /// The first round of active health checks after start.
    pub first_round: FirstRound,
    /// Set when SIGTERM/SIGINT started the drain.
    pub draining: AtomicBool,
    pub commands: mpsc::UnboundedSender<Command>,
    /// `Authorization: Bearer` value every request needs, if set.
    pub token: ArcSwapOption<String>,
    pub started: Instant,
    /// The last 15 minutes of traffic readings.
    pub history: super::history::History,
    /// Woken when a binary upgrade handed the admin listener to the new process: this one stops
    /// accepting on it (and leaves a unix socket's file to the new one).
    pub handed_over: tokio::sync::Notify,
    /// Whether the config's source answered its last read (a config from etcd only).
    pub source_reachable: Option<Arc<AtomicBool>>,
    /// The DNS questions of targets written by name, and what they answered.
    pub dns: ArcSwap<rampart_control::discovery::DnsStatus>,
    /// The certificates ACME obtains, name by name.
    pub acme: Arc<ArcSwap<rampart_control::acme::AcmeStatus>>,
    /// `run --ready-requires-etcd`: not ready while the config's source cannot be reached.
    pub ready_requires_source: bool,
}

impl AdminShared {
    /// Ready for traffic: every listener bound (true once this exists), the first health round
    /// done, every `jwt` filter's JWKS fetched once, not draining, and (when asked for) the
    /// config's source reachable. `Err` says why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        let source_down = self.ready_requires_source
            && self
                .source_reachable
                .as_ref()
                .is_some_and(|up| !up.load(Ordering::Relaxed));
        if self.draining.load(Ordering::Acquire) {
            Err("draining")
        } else if source_down {
            Err("etcd, the config's source, cannot be reached (serving the last config applied)")
        } else if !self.first_round.is_done() {
            Err("first health check round not finished")
        } else if awaits_jwks(&self.snapshot.load()) {
            Err("a JWKS key set not fetched yet")
        } else {
            Ok(())
        }
    }
}

/// Whether a `jwt` filter of `snapshot` has a JWKS URL from which no key set was fetched yet.
fn awaits_jwks(snapshot: &rampart_model::Snapshot) -> bool {
    snapshot
        .http_filters()
        .any(|f| matches!(f, rampart_model::filter::Filter::Jwt(j) if j.jwks.is_some() && j.keys.generation() == 0))
}

/// The running config's text and source (`GET /api/config`).
#[derive(Debug, Clone, Serialize)]
pub struct RunningConfig {
    /// The config file, or `command line`.
    pub source: String,
    pub text: String,
}

impl RunningConfig {
    /// `text` loaded from `source`, with the value of every `token = "..."` line replaced.
    pub fn redacted(source: String, text: &str) -> RunningConfig {
        let text = text
            .lines()
            .map(|line| {
                let key = line.split('=').next().unwrap_or("").trim();
                if key == "token" && line.contains('=') {
                    let indent = &line[..line.len() - line.trim_start().len()];
                    format!("{indent}token = \"<redacted>\"")
                } else {
                    line.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        RunningConfig { source, text }
    }
}

/// A request from the admin listener to the control loop.
pub enum Command {
    /// Load the config again, as SIGHUP does, and say how it went.
    Reload(oneshot::Sender<ReloadOutcome>),
    /// Start the binary found at this process's path and hand over to it, as SIGUSR2 does.
    Upgrade(oneshot::Sender<crate::upgrade::spawn::UpgradeOutcome>),
}

/// What `GET /api/status` shows (besides uptime, computed per request).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub workers: usize,
    /// The config file and the SHA-256 of the text last loaded from it (none for command-line
    /// modes).
    pub config: Option<ConfigFile>,
    /// The most recent reload, if there was one.
    pub last_reload: Option<LastReload>,
    /// When the config in force was loaded (the start, or the last reload that applied), in
    /// Unix seconds.
    pub loaded_at: u64,
    pub reloads: ReloadCounts,
    pub listeners: Vec<ListenerStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigFile {
    /// The file, or `etcd URL KEY` for a config from etcd.
    pub path: String,
    pub sha256: String,
    /// The etcd revision of the config applied (configs from etcd only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastReload {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub result: &'static str,
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadCounts {
    pub succeeded: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ListenerStatus {
    pub name: String,
    pub bind: String,
    pub protocol: &'static str,
    pub tls: bool,
}

impl Status {
    /// The status after the first load.
    pub fn new(snapshot: &Snapshot, workers: usize, config: Option<ConfigFile>) -> Status {
        Status {
            version: env!("CARGO_PKG_VERSION"),
            workers,
            config,
            last_reload: None,
            loaded_at: unix_now(),
            reloads: ReloadCounts::default(),
            listeners: listeners(snapshot),
        }
    }

    /// Records a reload's outcome; `running` is the snapshot in force after it, `config` the
    /// file it came from (kept as it was when the reload did not apply).
    pub fn record_reload(&mut self, outcome: &ReloadOutcome, running: &Snapshot, config: Option<ConfigFile>) {
        let at = unix_now();
        let (result, errors) = match outcome {
            ReloadOutcome::Applied { .. } => {
                self.reloads.succeeded += 1;
                self.loaded_at = at;
                if config.is_some() {
                    self.config = config;
                }
                ("ok", Vec::new())
            }
            ReloadOutcome::Refused { errors } => {
                self.reloads.failed += 1;
                ("failed", errors.clone())
            }
            ReloadOutcome::NotReloadable => ("nothing_to_reload", Vec::new()),
        };
        self.last_reload = Some(LastReload { at, result, errors });
        self.listeners = listeners(running);
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn listeners(snapshot: &Snapshot) -> Vec<ListenerStatus> {
    snapshot
        .listeners
        .iter()
        .map(|l| ListenerStatus {
            name: l.name.clone(),
            bind: l.bind.map_or(String::new(), |b| b.to_string()),
            protocol: listener_protocol(l),
            tls: l.tls.is_some(),
        })
        .collect()
}

/// A listener's protocol as the admin API and the metrics name it: `http`, `tcp` or `udp`.
pub(crate) fn listener_protocol(l: &rampart_model::Listener) -> &'static str {
    match l.protocol {
        rampart_model::ListenerProtocol::Http(_) => "http",
        rampart_model::ListenerProtocol::Tcp { .. } => "tcp",
        rampart_model::ListenerProtocol::Udp { .. } => "udp",
    }
}
