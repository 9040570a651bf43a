//! Connections that close without a relay or an HTTP session (refused by the connection stage,
//! closed by a TCP listener's routes): their session records.

use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use rampart_model::{Listener, Snapshot};

use crate::session_log::{RoutedView, SessionRecord};
use crate::worker::WorkerContext;

/// A connection that closes without a relay or an HTTP session: what its session record says.
pub struct Refused<'a> {
    pub client: SocketAddr,
    pub accepted: (Instant, SystemTime),
    /// Why (`connection_limit`, `rejected`, ...).
    pub close: &'static str,
    /// On a TCP listener with routes: what peeking found.
    pub routed: Option<RoutedView<'a>>,
}

/// The session record of a connection refused in the stage, or closed by a TCP listener's routes.
pub fn record_refusal(ctx: &WorkerContext, snapshot: &Snapshot, listener: &Listener, refused: Refused<'_>) {
    let Some(path) = &snapshot.session_log else { return };
    let Refused {
        client,
        accepted: (accepted, accepted_wall),
        close,
        routed,
    } = refused;
    let upstream = listener
        .tcp_upstream()
        .and_then(|u| snapshot.upstreams.get(u))
        .map(|u| u.name.as_str());
    let record = SessionRecord {
        client,
        listener: &listener.name,
        upstream,
        target: None,
        accepted,
        accepted_wall,
        connected: None,
        first_byte_up: None,
        first_byte_down: None,
        bytes_up: 0,
        bytes_down: 0,
        close,
        tls: None,
        routed,
    };
    ctx.push_log_line(path, |out| record.write(out));
}
