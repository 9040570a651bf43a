//! Naming the listener that could not be bound, in the exit line and in a JSON log.

use std::net::SocketAddr;

use rampart_runtime::EngineError;

use crate::logger::Logger;

/// Each listener's name and address, to name the listener a bind error is about.
pub(super) fn listener_names(snapshot: &rampart_model::Snapshot) -> Vec<(String, SocketAddr)> {
    snapshot
        .listeners
        .iter()
        .filter_map(|l| Some((l.name.clone(), l.bind?)))
        .collect()
}

/// A listener that could not be bound. It reads as the engine's error, so the command line's
/// exit line stays `rampart: ADDR: reason`.
#[derive(Debug)]
pub struct BindFailure {
    listener: String,
    address: SocketAddr,
    reason: String,
    /// The engine's error, as the exit line says it.
    message: String,
}

impl BindFailure {
    /// `error` with its listener when it is a bind error.
    pub(super) fn wrap(listeners: &[(String, SocketAddr)], error: EngineError) -> anyhow::Error {
        match BindFailure::of(listeners, &error) {
            Some(failure) => anyhow::Error::new(failure),
            None => error.into(),
        }
    }

    pub(super) fn of(listeners: &[(String, SocketAddr)], error: &EngineError) -> Option<BindFailure> {
        let (address, reason) = match error {
            EngineError::InUse { addr } => (*addr, "already in use by another process".to_string()),
            EngineError::Bind { addr, error } => (*addr, error.to_string()),
            _ => return None,
        };
        let listener = listeners
            .iter()
            .find(|(_, bind)| *bind == address)
            .map_or_else(String::new, |(name, _)| name.clone());
        Some(BindFailure {
            listener,
            address,
            reason,
            message: error.to_string(),
        })
    }

    pub(super) fn log(&self) {
        tracing::error!(
            listener = self.listener.as_str(),
            address = %self.address,
            error = self.reason.as_str(),
            "cannot bind a listener"
        );
    }
}

impl std::fmt::Display for BindFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BindFailure {}

/// Says why the process could not start: in text, the `rampart: reason` line it always wrote;
/// in JSON, an error event (with the listener's fields for a bind failure).
pub fn log_fatal(logger: &Logger, error: &anyhow::Error) {
    if !logger.is_json() {
        eprintln!("rampart: {error:#}");
    } else if let Some(failure) = error.downcast_ref::<BindFailure>() {
        failure.log();
    } else {
        tracing::error!("rampart: {error:#}");
    }
}
