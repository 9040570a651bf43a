//! systemd's notify protocol (`Type=notify`): what the service manager is told, when
//! `NOTIFY_SOCKET` is set. Without it every call does nothing.

use sd_notify::NotifyState;

/// Started, or a reload ended (applied or refused: the process serves either way).
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload begins.
pub fn reloading() {
    send(&[
        NotifyState::Reloading,
        NotifyState::monotonic_usec_now().unwrap_or(NotifyState::MonotonicUsec(0)),
    ]);
}

/// A binary upgrade handed over to `pid`: that process is the service's main process from now on,
/// and it is ready. This one drains and exits without saying more.
pub fn handed_over(pid: u32) {
    let status = format!("upgraded: PID {pid} serves");
    send(&[
        NotifyState::MainPid(pid),
        NotifyState::Ready,
        NotifyState::Status(&status),
    ]);
}

/// SIGTERM or SIGINT: draining, then exit.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}
