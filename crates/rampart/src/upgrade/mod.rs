//! Binary upgrades without a closed port.
//!
//! On SIGUSR2 (or `POST /api/upgrade`) the running process starts the binary found at its own
//! path, with its own arguments, and hands it every listening socket as an inherited file
//! descriptor: the sockets stay open across the exchange, so no connection is refused and none
//! queued is lost. The new process loads its config, uses the sockets it was handed in place of
//! binding, starts serving, and says it is ready over a pipe. Only then does the old process
//! stop accepting, drain and exit. A new process that exits first, or is not ready in
//! `upgrade_timeout`, is killed and the old one keeps serving.
//!
//! - [`spawn`]: the old process's side.
//! - [`inherit`]: the new process's side.
//! - [`client`]: `rampart upgrade --pid PID`.

pub mod client;
pub mod inherit;
pub mod spawn;

/// The descriptors of the handed-over listening sockets, comma-separated.
const FDS_VAR: &str = "RAMPART_UPGRADE_FDS";
/// The write end of the pipe on which the new process says `READY`.
const READY_FD_VAR: &str = "RAMPART_UPGRADE_READY_FD";
/// What the new process writes on that pipe once it serves.
const READY: &[u8] = b"READY\n";

/// Starts the binary `relaunch` names with `sockets` and waits for it, saying in the log how it
/// went.
pub async fn hand_over(
    relaunch: &std::io::Result<spawn::Relaunch>,
    sockets: &[std::os::fd::BorrowedFd<'_>],
    timeout: std::time::Duration,
) -> spawn::UpgradeOutcome {
    use spawn::UpgradeOutcome;
    let relaunch = match relaunch {
        Ok(r) => r,
        Err(e) => {
            let reason = format!("the path of this binary is unknown: {e}");
            tracing::error!(
                result = "failed",
                reason = reason.as_str(),
                "upgrade failed; this process keeps serving"
            );
            return UpgradeOutcome::Failed { reason };
        }
    };
    let program = relaunch.program().display();
    tracing::info!(
        program = %program,
        sockets = sockets.len(),
        "upgrade: starting {program} with {} listening socket(s)",
        sockets.len()
    );
    let outcome = spawn::upgrade(relaunch, sockets, timeout).await;
    match &outcome {
        UpgradeOutcome::Ready { pid } => tracing::info!(
            result = "ready",
            pid,
            "upgrade: PID {pid} is ready and serves; this process stops accepting"
        ),
        UpgradeOutcome::Failed { reason } => tracing::error!(
            result = "failed",
            reason = reason.as_str(),
            "upgrade failed: {reason}; this process keeps serving"
        ),
    }
    outcome
}
