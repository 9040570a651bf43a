//! Naming the listener that could not be bound, in the exit line and in a JSON log.

use std::net::SocketAddr;

use rampart_runtime::EngineError;

/// Each listener's name and address, to name the listener a bind error is about.
pub fn listener_names(snapshot: &rampart_model::Snapshot) -> Vec<(String, SocketAddr)> {
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
    /// The listener `error` is about, when it is a bind error.
    pub fn of(listeners: &[(String, SocketAddr)], error: &EngineError) -> Option<BindFailure> {
        let (address, reason) = match error {
            EngineError::InUse { addr, .. } => (*addr, "already in use by another process".to_string()),
            EngineError::Bind { addr, error, .. } => (*addr, error.to_string()),
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

    /// Logs it as an error event with the listener's fields.
    pub fn log(&self) {
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
