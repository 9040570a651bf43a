//! Waiting on child processes with a bound: past it the child is killed and the test fails with
//! what it printed, instead of hanging the suite (a script whose signal trap never fires, a tool
//! that waits on the network).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The bound for a tool that does real work (a client run, a scan, a Go build); installs of
/// Debian packages get more.
pub const TOOL_WAIT: Duration = Duration::from_secs(300);

/// The bound for the scripts that install Debian packages or build a Go tool the first time.
pub const INSTALL_WAIT: Duration = Duration::from_secs(1200);

/// `Command::output` and `Command::status` with a bound.
pub trait Bounded {
    /// Runs the command with stdout and stderr captured (stdin empty) and waits for it up to
    /// `limit`; past that it is killed and the test fails.
    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output>;
    /// Runs the command with inherited output and waits for it up to `limit`.
    fn status_within(&mut self, limit: Duration) -> std::io::Result<ExitStatus>;
}

impl Bounded for Command {
    fn output_within(&mut self, limit: Duration) -> std::io::Result<Output> {
        let mut child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let reader = |pipe: Option<Box<dyn Read + Send>>| {
            thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let stderr = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let status = wait_bounded(&mut child, limit, &format!("{self:?}"));
        Ok(Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        })
    }

    fn status_within(&mut self, limit: Duration) -> std::io::Result<ExitStatus> {
        let mut child = self.spawn()?;
        Ok(wait_bounded(&mut child, limit, &format!("{self:?}")))
    }
}

/// Waits for `child` up to `limit`; past that kills it (and its process group, when it leads
/// one) and fails the test naming `what`.
pub fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait on a child process") {
            return status;
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) on the group the child may lead; harmless when it leads none.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?}: killed");
        }
        thread::sleep(Duration::from_millis(10));
    }
}
