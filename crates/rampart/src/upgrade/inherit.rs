//! The new process's side of an upgrade: the sockets it was handed, and saying it is ready.

use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use anyhow::Context;
use rampart_runtime::InheritedSockets;

use super::{FDS_VAR, READY, READY_FD_VAR};

/// What the process this one replaces handed over; empty for a process started by hand.
#[derive(Debug, Default)]
pub struct Handover {
    /// IP sockets, by transport and address (the listeners' TCP and UDP ones, and a TCP admin
    /// listener's).
    pub sockets: InheritedSockets,
    /// Unix listening sockets (an admin listener on `unix:PATH`).
    unix: Vec<(std::path::PathBuf, std::os::unix::net::UnixListener)>,
    /// The pipe to say `READY` on.
    ready: Option<std::fs::File>,
}

impl Handover {
    /// Reads the handover from the environment the old process set. The descriptors are made
    /// close-on-exec again, so that they go to no process but the next upgrade's.
    pub fn from_env() -> anyhow::Result<Handover> {
        let mut handover = Handover::default();
        let Some(ready) = std::env::var_os(READY_FD_VAR) else {
            return Ok(handover);
        };
        let ready = parse_fd(&ready.to_string_lossy()).context(READY_FD_VAR)?;
        // SAFETY: the old process opened this descriptor for us (the write end of its pipe) and
        // nothing else in this process knows it.
        handover.ready = Some(std::fs::File::from(unsafe { owned(ready)? }));
        let list = std::env::var(FDS_VAR).unwrap_or_default();
        for item in list.split(',').filter(|s| !s.is_empty()) {
            let fd = parse_fd(item).context(FDS_VAR)?;
            // SAFETY: as above: a listening socket the old process handed over for us alone.
            let socket = socket2::Socket::from(unsafe { owned(fd)? });
            let local = socket
                .local_addr()
                .with_context(|| format!("{FDS_VAR}: descriptor {fd} is not a socket"))?;
            if let Some(addr) = local.as_socket() {
                let (transport, _) = handover.sockets.add(socket)?;
                tracing::debug!("took over the {transport:?} socket {addr} (descriptor {fd})");
            } else if let Some(path) = local.as_pathname() {
                let path = path.to_path_buf();
                handover.unix.push((path, OwnedFd::from(socket).into()));
            }
        }
        Ok(handover)
    }

    /// Whether this process was started by an upgrade.
    pub fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// How many listening sockets were handed over (all kinds).
    pub fn socket_count(&self) -> usize {
        self.sockets.len() + self.unix.len()
    }

    /// The handed-over TCP socket bound to `addr`, if any (the admin listener's).
    pub fn take_tcp(&mut self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        self.sockets.take_tcp(addr)
    }

    /// The handed-over unix socket bound to `path`, if any.
    pub fn take_unix(&mut self, path: &Path) -> Option<std::os::unix::net::UnixListener> {
        let at = self.unix.iter().position(|(p, _)| p == path)?;
        Some(self.unix.remove(at).1)
    }

    /// Tells the old process this one serves (it then stops accepting and drains). Closes the
    /// pipe: nothing more is said on it.
    pub fn say_ready(&mut self) -> std::io::Result<()> {
        match self.ready.take() {
            Some(mut pipe) => pipe.write_all(READY),
            None => Ok(()),
        }
    }
}

fn parse_fd(text: &str) -> anyhow::Result<RawFd> {
    let fd: RawFd = text
        .trim()
        .parse()
        .with_context(|| format!("{text:?} is not a descriptor number"))?;
    anyhow::ensure!(fd > 2, "descriptor {fd} is stdin, stdout or stderr");
    Ok(fd)
}

/// Takes `fd` over, checked open, and close-on-exec again.
///
/// # Safety
/// `fd` must be owned by nothing else in this process.
unsafe fn owned(fd: RawFd) -> anyhow::Result<OwnedFd> {
    // SAFETY: fcntl on any integer is harmless; it fails on a descriptor that is not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("descriptor {fd}"));
    }
    // SAFETY: open (checked above) and, by the caller's promise, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
