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
