//! gRPC end-to-end harness: the real `rampart` binary started with a config file in a temp dir,
//! readiness taken from its own "listening" log line (never from sleeping), tonic echo backends
//! on 127.0.0.1:0 and tonic clients.
#![allow(dead_code)]

pub mod backend;
pub mod echo;
pub mod raw;
pub mod tls;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// How long any wait in these tests may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// The `rampart` binary of the same profile as this test: tests live in `target/<profile>/deps/`
/// and the binary in `target/<profile>/` (`RAMPART_BIN` overrides). A test in another crate has
/// no `CARGO_BIN_EXE_rampart`; `cargo test --workspace` builds the binary first.
pub fn rampart_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("RAMPART_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps/");
    let bin = profile_dir.join("rampart");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p rampart` first (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// A port that was free a moment ago, for a server a test starts on it (the proxy binds one
/// socket per worker, so port 0 won't do). Taken below the kernel's ephemeral range (32768 and
/// up), so no socket the kernel numbers itself (an outgoing connection, a bind to port 0) can
/// take it before the server binds it, and never the same twice in one test process.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Each test process starts at a place of its own, so two running at once rarely meet.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(613) % COUNT,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % COUNT) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// An address where nothing listens (bound, then closed).
pub fn dead_target() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// Writes a file into `dir` and returns its path as a string.
pub fn write_file(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}

/// `["a", "b"]` as a TOML array of strings.
pub fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|t| format!("\"{t}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A config with HTTP listener `grpc` on `port` and upstream `echo` of `targets`:
/// `listener_extra` lines go into the listener's table (before any subtable), `upstream_extra`
/// into the upstream's, and `tail` after both (subtables such as routes or TLS).
pub fn grpc_config(port: u16, targets: &[String], listener_extra: &str, upstream_extra: &str, tail: &str) -> String {
    format!(
        "[listeners.grpc]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n{listener_extra}\n\n\
         [upstreams.echo]\ntargets = {}\n{upstream_extra}\n\n{tail}\n",
        toml_list(targets)
    )
}

/// A running `rampart` process whose stderr is watched line by line; killed on drop.
pub struct Rampart {
    child: Option<Child>,
    lines: Receiver<String>,
    pub log: Vec<String>,
    /// The temp dir holding the config (and any certificates); removed on drop.
    pub dir: tempfile::TempDir,
}

impl Rampart {
    /// Writes `config` to `rampart.toml` in `dir`, runs `rampart run -c` on it with one worker,
    /// logging at debug level, and waits for its "listening" line.
    pub fn start_in(dir: tempfile::TempDir, config: &str) -> Rampart {
        let path = write_file(dir.path(), "rampart.toml", config);
        let mut child = Command::new(rampart_bin())
            .args(["run", "-c", &path, "--workers", "1"])
            .current_dir(dir.path())
            .env_remove("RUST_LOG")
            .env("RAMPART_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rampart");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut rampart = Rampart {
            child: Some(child),
            lines: rx,
            log: Vec::new(),
            dir,
        };
        rampart.wait_for("listening:");
        rampart
    }

    /// As [`Rampart::start_in`], in a new temp dir.
    pub fn start(config: &str) -> Rampart {
        Rampart::start_in(tempfile::tempdir().unwrap(), config)
    }

    /// Waits for a log line containing `needle` (one not seen by an earlier wait) and returns it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                // The log is printed when the panic drops `self`.
                Err(RecvTimeoutError::Timeout) => panic!("no log line containing {needle:?} within {WAIT:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("rampart exited before logging {needle:?}"),
            }
        }
    }

    /// Everything logged so far (lines not yet read are taken now, without waiting).
    pub fn log_so_far(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
        self.log.join("\n")
    }
}

impl Drop for Rampart {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!("--- rampart log ---\n{}\n--- end of rampart log ---", self.log_so_far());
        }
    }
}

/// Rampart with HTTP listener `grpc` sending everything (catch-all `upstream = "echo"`) to the
/// echo backends at `targets` over h2c, plus `upstream_extra` lines in the upstream; returns
/// the proxy and its port.
pub fn h2c_proxy(targets: &[String], upstream_extra: &str) -> (Rampart, u16) {
    let port = free_port();
    let upstream = format!("protocol = \"h2c\"\n{upstream_extra}");
    let config = grpc_config(port, targets, "upstream = \"echo\"", &upstream, "");
    (Rampart::start(&config), port)
}

/// Asserts that `status` is a real gRPC answer with `code`: sent as a `grpc-status` (tonic
/// otherwise maps a bare HTTP status, 404 to UNIMPLEMENTED and 502/503/504 to UNAVAILABLE, and
/// says so in the message).
pub fn assert_grpc_status(status: &tonic::Status, code: tonic::Code) {
    assert_eq!(status.code(), code, "unexpected status: {status:?}");
    assert!(
        !status.message().contains("grpc-status header missing"),
        "an HTTP error, not a gRPC answer: {status:?}"
    );
}

/// A payload of `len` bytes in a pattern that shows any reordering or loss.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}
