//! Putting a config in force while serving: a reload (SIGHUP, `POST /api/reload`, `--watch`, a
//! change in etcd) and the targets new DNS answers gave.

use std::sync::Arc;

use rampart_config::LiveState;
use rampart_proxy::session_log::SessionLogWriter;
use rampart_runtime::Engine;

use super::bind_failure::{listener_names, BindFailure};
use super::start_only::StartOnly;
use crate::admin::state::{ConfigFile, RunningConfig};
use crate::admin::{AdminShared, ReloadOutcome};
use crate::cli::EngineArgs;
use crate::discovery::Discovery;
use crate::logger::Logger;
use crate::source::{summary, Source};
use crate::watch::Watching;

/// Loads the source again and applies it (SIGHUP, `POST /api/reload`, or a change `--watch`
/// saw); a load that succeeds gives the watcher its new list of files. A load that changes a
/// setting read at start only (`start_only`, the one in force) is refused, naming it; the admin
/// token is applied.
#[allow(clippy::too_many_arguments)]
pub(super) async fn reload(
    source: &Source,
    live: &mut LiveState,
    engine: &mut Engine,
    discovery: &mut Discovery,
    session_log: &SessionLogWriter,
    admin: &AdminShared,
    logger: &Logger,
    watching: Option<&Watching>,
    start_only: &StartOnly,
    args: &EngineArgs,
) -> ReloadOutcome {
    if !source.reloadable() {
        tracing::info!(
            result = "skipped",
            "reload: the command line is the whole config and names no certificate; nothing to reload"
        );
        return ReloadOutcome::NotReloadable;
    }
    let loaded = match source.load(live) {
        Ok(l) => l,
        Err(errors) => {
            tracing::error!(result = "refused", errors = %errors, "reload failed; the running config stays in force");
            return ReloadOutcome::Refused {
                errors: errors.lines().map(str::to_string).collect(),
            };
        }
    };
    let changed = start_only.changes(&StartOnly::of(&loaded, args));
    if !changed.is_empty() {
        let errors = changed.join("\n");
        tracing::error!(result = "refused", errors = %errors, "reload failed; the running config stays in force");
        return ReloadOutcome::Refused { errors: changed };
    }
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(watching) = watching {
        watching.update(loaded.watch.clone());
    }
    let path = loaded.snapshot.session_log.as_deref().map(std::path::Path::to_path_buf);
    let line = summary(&loaded.snapshot);
    let sha256 = loaded.sha256.clone();
    let revision = loaded.revision;
    let text = loaded.text;
    let log = loaded.log;
    let listeners = listener_names(&loaded.snapshot);
    // `--admin` (no token) wins over the config's `[admin]`.
    let token = match args.admin {
        Some(_) => None,
        None => loaded.admin.as_ref().and_then(|a| a.token.clone()),
    };
    let snapshot = discovery.complete(loaded.snapshot, live).await;
    if let Err(e) = engine.apply(snapshot) {
        // The questions stay those of the config in force.
        discovery.follow(&engine.current());
        if let Some(failure) = BindFailure::of(&listeners, &e) {
            failure.log();
        }
        tracing::error!(result = "refused", errors = %e, "reload failed; the running config stays in force");
        return ReloadOutcome::Refused {
            errors: vec![e.to_string()],
        };
    }
    // Reopening also serves log rotation: move the file away, then SIGHUP.
    if let Err(e) = session_log.reopen(path.clone()) {
        tracing::error!("cannot open session log {path:?}: {e}; records go to the previous file");
    }
    // The new level is in force from the "reloaded" line on.
    logger.reload(log);
    if admin.token.load().as_deref() != token.as_ref() {
        tracing::info!(
            "admin: {}",
            if token.is_some() {
                "the token is now required (changed by this reload)"
            } else {
                "the token was removed: the admin API asks for none"
            }
        );
        admin.token.store(token.map(Arc::new));
    }
    tracing::info!(
        result = "applied",
        summary = line.as_str(),
        sha256 = sha256.as_deref(),
        "reloaded"
    );
    admin
        .config
        .store(Arc::new(RunningConfig::redacted(source.name(), &text)));
    admin.snapshot.store(engine.current());
    ReloadOutcome::Applied {
        summary: line,
        sha256,
        revision,
    }
}

/// Puts in force `next`: the snapshot in force with the targets new DNS answers gave.
pub(super) fn publish_targets(next: rampart_model::Snapshot, engine: &mut Engine, admin: &AdminShared) {
    let line = summary(&next);
    match engine.apply(next) {
        Ok(()) => {
            tracing::debug!(summary = line.as_str(), "dns: targets published");
            admin.snapshot.store(engine.current());
        }
        // Only binding can fail, and a publish binds nothing new.
        Err(e) => tracing::error!("dns: the new targets could not be put in force: {e}"),
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

/// The etcd revision a reload applied.
pub(super) fn live_revision(outcome: &ReloadOutcome) -> Option<i64> {
    match outcome {
        ReloadOutcome::Applied { revision, .. } => *revision,
        _ => None,
    }
}

/// The hash of the text a reload applied.
pub(super) fn live_sha256(outcome: &ReloadOutcome) -> Option<String> {
    match outcome {
        ReloadOutcome::Applied { sha256, .. } => sha256.clone(),
        _ => None,
    }
}
