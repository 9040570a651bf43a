//! The old process's side of an upgrade: start the new binary with the listening sockets and
//! wait until it is ready, exits, or runs out of time.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::{FDS_VAR, READY, READY_FD_VAR};

/// How an upgrade ended.
#[derive(Debug, Clone)]
pub enum UpgradeOutcome {
    /// The new process serves; this one is to drain and exit.
    Ready { pid: u32 },
    /// This process keeps serving; why the new one did not take over.
    Failed { reason: String },
}

/// The binary to start and its arguments: this process's own, as it was started. The path is
/// the one the process was started by (argv[0], made absolute, or found in PATH), not the file
/// it resolved to, so that a binary replaced since, by a new file renamed over the old one (as
/// packages do) or by a symlink pointed at another version, is the one an upgrade starts.
#[derive(Debug, Clone)]
pub struct Relaunch {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Relaunch {
    /// This process's binary path and arguments.
    pub fn of_this_process() -> std::io::Result<Relaunch> {
        let mut args = std::env::args_os();
        let started_as = args.next().map(PathBuf::from);
        let program = match started_as.and_then(|p| started_by(&p)) {
            Some(path) => path,
            None => std::env::current_exe()?,
        };
        Ok(Relaunch {
            program,
            args: args.collect(),
        })
    }

    /// The binary an upgrade starts.
    pub fn program(&self) -> &Path {
        &self.program
    }
}

/// The file `argv0` names: relative to the working directory when it holds a slash, else the
/// first executable of that name in PATH, as the shell found it.
fn started_by(argv0: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if argv0.components().count() > 1 {
        Some(std::env::current_dir().ok()?.join(argv0))
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(argv0))
            .find(|p| executable(p))
    };
    found.filter(|p| executable(p))
}

/// Starts the new process with `sockets` and waits for it: ready, exited, or `timeout` passed
/// (then it is killed). Never fails the running process: every error is an outcome.
pub async fn upgrade(relaunch: &Relaunch, sockets: &[BorrowedFd<'_>], timeout: Duration) -> UpgradeOutcome {
    let (ready_read, ready_write) = match pipe() {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot make the readiness pipe: {e}")),
    };
    let mut child = match start(relaunch, sockets, &ready_write) {
        Ok(c) => c,
        Err(e) => {
            return failed(format!("cannot start {}: {e}", relaunch.program.display()));
        }
    };
    // Only the child holds the write end now: its exit is an end of file here.
    drop(ready_write);
    let pid = child.id();
    let mut said = Vec::new();
    let read = async {
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(ready_read)?;
        let mut chunk = [0u8; 64];
        loop {
            let n = pipe.read(&mut chunk).await?;
            said.extend_from_slice(&chunk[..n]);
            if n == 0 || said.contains(&b'\n') {
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) if said.starts_with(READY) => UpgradeOutcome::Ready { pid },
        Ok(_) => {
            let status = exit_status(&mut child).await;
            failed(format!("the new process (PID {pid}) {status} before it was ready"))
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            failed(format!(
                "the new process (PID {pid}) was not ready within {timeout:?} (upgrade_timeout); killed it"
            ))
        }
    }
}

fn failed(reason: String) -> UpgradeOutcome {
    UpgradeOutcome::Failed { reason }
}

/// The exit of a child that closed the readiness pipe without saying ready: it is normally
/// exiting already; one that is not within a second is killed.
async fn exit_status(child: &mut Child) -> String {
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return format!("exited ({status})");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    "closed the readiness pipe without saying ready (killed it)".to_string()
}

/// Starts the new binary. The sockets and the pipe's write end are made inheritable in the child
/// only (between fork and exec), so no other process this one starts could get them.
fn start(relaunch: &Relaunch, sockets: &[BorrowedFd<'_>], ready: &OwnedFd) -> std::io::Result<Child> {
    let mut keep: Vec<RawFd> = sockets.iter().map(|s| s.as_raw_fd()).collect();
    let list = keep.iter().map(|fd| fd.to_string()).collect::<Vec<_>>().join(",");
    keep.push(ready.as_raw_fd());
    let mut command = Command::new(&relaunch.program);
    command
        .args(&relaunch.args)
        .env(FDS_VAR, list)
        .env(READY_FD_VAR, ready.as_raw_fd().to_string());
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, on descriptors that are
    // open in the parent (borrowed for the duration of this call) and so in the forked child.
    unsafe {
        command.pre_exec(move || {
            for &fd in &keep {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// A pipe, both ends close-on-exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
