//! Why the process could not start: in text, the `rampart: reason` line it always wrote; in
//! JSON, an error event (with the listener's fields for a listener that could not be bound).

use std::net::SocketAddr;

use rampart_control::bind_failure::BindFailure;
use rampart_runtime::EngineError;

use crate::logger::Logger;

/// `error` with its listener when it is a bind error (it reads as the engine's error, so the
/// exit line stays `rampart: ADDR: reason`).
pub(super) fn wrap(listeners: &[(String, SocketAddr)], error: EngineError) -> anyhow::Error {
    match BindFailure::of(listeners, &error) {
        Some(failure) => anyhow::Error::new(failure),
        None => error.into(),
    }
}

/// Says why the process could not start.
pub fn log_fatal(logger: &Logger, error: &anyhow::Error) {
    if !logger.is_json() {
        eprintln!("rampart: {error:#}");
    } else if let Some(failure) = error.downcast_ref::<BindFailure>() {
        failure.log();
    } else {
        tracing::error!("rampart: {error:#}");
    }
}
