//! End-to-end test harness: the real `rampart` binary, real backends on 127.0.0.1, readiness
//! taken from the proxy's own log lines (never from sleeping).
#![allow(dead_code)]

pub mod dns;
pub mod h2_tls;
pub mod h3;
pub mod http;
pub mod load;
pub mod netns;
pub mod pebble;
pub mod scrape;
pub mod servers;
pub mod telemetry;
pub mod tls;
mod wait;

#[allow(unused_imports)]
pub use wait::{wait_bounded, Bounded, INSTALL_WAIT, TOOL_WAIT};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How long any wait in these tests may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// Runs `rampart ARGS` in `dir` to completion: exit code, stdout, stderr.
pub fn run_rampart(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rampart"))
        .args(args)
        .current_dir(dir)
        .output_within(WAIT)
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// An address where nothing listens (bound, then closed).
pub fn dead_target() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
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

/// A running `rampart` process whose stderr is watched line by line.
pub struct Rampart {
    child: Option<Child>,
    lines: Receiver<String>,
    pub log: Vec<String>,
    pub dir: PathBuf,
}

impl Rampart {
    /// Starts `rampart ARGS` in `dir` and waits for its "listening" line.
    pub fn start(dir: &Path, args: &[&str]) -> Rampart {
        let mut r = Rampart::spawn(dir, args);
        r.wait_for("listening:");
        r
    }

    /// Starts `rampart ARGS` logging at `level` (`RAMPART_LOG`, EnvFilter syntax) and waits for its "listening" line.
    pub fn start_logging(dir: &Path, args: &[&str], level: &str) -> Rampart {
        let mut r = Rampart::spawn_logging(dir, args, level);
        r.wait_for("listening:");
        r
    }

    /// Starts `rampart ARGS` without waiting.
    pub fn spawn(dir: &Path, args: &[&str]) -> Rampart {
        Rampart::spawn_logging(dir, args, "info")
    }

    fn spawn_logging(dir: &Path, args: &[&str], level: &str) -> Rampart {
        Rampart::spawn_with_env(dir, args, &[("RAMPART_LOG", level)])
    }

    /// Starts `rampart ARGS` with only `vars` of the log variables set (neither `RUST_LOG` nor
    /// `RAMPART_LOG` is inherited), so that the config's `log_level` can decide; waits for its
    /// "listening" line.
    pub fn start_with_env(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Rampart {
        let mut r = Rampart::spawn_with_env(dir, args, vars);
        r.wait_for("listening:");
        r
    }

    fn spawn_with_env(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Rampart {
        Rampart::spawn_program(Path::new(env!("CARGO_BIN_EXE_rampart")), dir, args, vars)
    }

    /// Starts `program ARGS` (a copy of the binary elsewhere) with `vars`, without waiting.
    pub fn spawn_program(program: &Path, dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Rampart {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .env_remove("RAMPART_LOG")
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
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
        Rampart {
            child: Some(child),
            lines: rx,
            log: Vec::new(),
            dir: dir.to_path_buf(),
        }
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
                Err(_) => panic!(
                    "no log line containing {needle:?} within {WAIT:?}; log so far:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Sends SIGHUP and waits for the outcome line ("reloaded" or "reload failed").
    pub fn reload(&mut self) -> String {
        self.signal(libc::SIGHUP);
        let deadline = Instant::now() + WAIT;
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("reload outcome");
            self.log.push(line.clone());
            if line.contains("reloaded") || line.contains("reload failed") {
                let mut all = line;
                // A failed reload's errors follow on the next lines.
                while let Ok(more) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.log.push(more.clone());
                    all.push('\n');
                    all.push_str(&more);
                }
                return all;
            }
        }
    }

    /// Waits for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self) -> i32 {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                    self.log.push(line);
                }
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "rampart did not exit; log:\n{}",
                self.log.join("\n")
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then the exit code.
    pub fn stop(&mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    /// SIGTERM, then the exit code and all the process wrote on its standard output (which must
    /// fit a pipe's buffer: it is read after the exit).
    pub fn stop_with_stdout(&mut self) -> (i32, String) {
        let stdout = self.child.as_mut().and_then(|c| c.stdout.take());
        let code = self.stop();
        let mut out = String::new();
        if let Some(mut stdout) = stdout {
            stdout.read_to_string(&mut out).unwrap();
        }
        (code, out)
    }
}

impl Drop for Rampart {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a test backend does with each connection.
#[derive(Clone, Copy)]
pub enum Behavior {
    /// Sends its tag line (`tag\n`), then echoes everything until EOF, then closes.
    TagEcho,
    /// Reads until EOF, then writes its tag and the reversed input, then closes.
    ReverseOnEof,
    /// Reads a PROXY header, answers the source address it names (`ip:port\n`), then echoes.
    ProxyHeader,
}

/// A test backend on 127.0.0.1, serving each connection on its own thread.
pub struct Backend {
    pub addr: SocketAddr,
    pub tag: String,
    stop: Arc<AtomicBool>,
}

impl Backend {
    pub fn start(tag: &str, behavior: Behavior) -> Backend {
        Backend::start_on(tag, behavior, "127.0.0.1:0".parse().unwrap())
    }

    pub fn start_on(tag: &str, behavior: Behavior, addr: SocketAddr) -> Backend {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tag_owned, stop2) = (tag.to_string(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let tag = tag_owned.clone();
                thread::spawn(move || serve(conn, &tag, behavior));
            }
        });
        Backend {
            addr,
            tag: tag.to_string(),
            stop,
        }
    }

    /// Stops accepting and closes the listening socket (connections refused from then on).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag and drops the listener.
        let _ = TcpStream::connect(self.addr);
    }

    /// The address as `ip:port`.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(mut conn: TcpStream, tag: &str, behavior: Behavior) {
    match behavior {
        Behavior::TagEcho => {
            if conn.write_all(format!("{tag}\n").as_bytes()).is_err() {
                return;
            }
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = conn.shutdown(Shutdown::Write);
        }
        Behavior::ReverseOnEof => {
            let mut input = Vec::new();
            if conn.read_to_end(&mut input).is_err() {
                return;
            }
            input.reverse();
            let _ = conn.write_all(format!("{tag}\n").as_bytes());
            let _ = conn.write_all(&input);
        }
        Behavior::ProxyHeader => {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            let (header, used) = loop {
                let n = match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                match rampart_proto::proxy_protocol::decode(&buf) {
                    Ok(Some(found)) => break found,
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = conn.write_all(format!("bad header: {e}\n").as_bytes());
                        return;
                    }
                }
            };
            let source = header
                .addresses
                .map(|a| a.source.to_string())
                .unwrap_or_else(|| "none".into());
            let version = format!("{:?}", header.version);
            let _ = conn.write_all(format!("{version} {source}\n").as_bytes());
            let _ = conn.write_all(&buf[used..]);
            let mut rest = [0u8; 4096];
            while let Ok(n) = conn.read(&mut rest) {
                if n == 0 || conn.write_all(&rest[..n]).is_err() {
                    break;
                }
            }
        }
    }
}

/// Connects to the proxy, optionally from a chosen local address.
/// One [`Behavior::TagEcho`] backend per tag.
pub fn tagged_backends(tags: &[&str]) -> Vec<Backend> {
    tags.iter().map(|t| Backend::start(t, Behavior::TagEcho)).collect()
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to rampart");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Connects from source address `from` (any 127.x.y.z works on Linux loopback).
pub fn connect_from(from: std::net::Ipv4Addr, port: u16) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    socket
        .connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .expect("connect to rampart");
    let s: TcpStream = socket.into();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Reads one `\n`-terminated line byte by byte (so nothing after it is consumed).
pub fn read_line(s: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => line.push(b[0]),
            Err(e) => panic!("reading a line: {e} (got {:?} so far)", String::from_utf8_lossy(&line)),
        }
    }
    String::from_utf8(line).unwrap()
}

/// Opens a connection through the proxy and returns the tag of the backend that answered.
pub fn which_backend(port: u16) -> String {
    let mut s = connect(port);
    read_line(&mut s)
}

/// The lines of a JSON access log once it has at least `n` of them (polled until [`WAIT`]).
pub fn json_log_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "access log has {} of {n} lines", lines.len());
        thread::sleep(Duration::from_millis(20));
    }
}

/// Writes a file into `dir` and returns its path as a string.
pub fn write_file(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}

/// A config with one listener on `port` and one upstream of `targets`; `extra_upstream` lines
/// go into the upstream table, `extra_listener` into the listener's.
pub fn config(port: u16, targets: &[String], extra_listener: &str, extra_upstream: &str) -> String {
    let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[listeners.main]\nbind = \"127.0.0.1:{port}\"\nupstream = \"app\"\n{extra_listener}\n\n[upstreams.app]\ntargets = [{}]\n{extra_upstream}\n",
        list.join(", ")
    )
}

/// A config-file HTTP listener (`web`) proxying everything to upstream `app` over `targets`, with
/// `upstream_extra` lines in the upstream; one worker. Returns the proxy and its port.
pub fn http_gateway(dir: &Path, targets: &[String], upstream_extra: &str) -> (Rampart, u16) {
    let port = free_port();
    let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
         [upstreams.app]\ntargets = [{}]\n{upstream_extra}\n",
        list.join(", ")
    );
    let path = write_file(dir, "gw.toml", &cfg);
    (Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]), port)
}

/// A gateway for filter tests: one `rampart run` with one worker, listener `gw` (HTTP, with
/// `listener_extra` lines and a JSON access log at `log`), the `routes` given (TOML), and
/// upstream `app` on an echoing backend; `files` are written beside the config first.
pub struct FilterGateway {
    pub proxy: Rampart,
    pub port: u16,
    pub backend: http::HttpBackend,
    pub log: PathBuf,
    pub dir: tempfile::TempDir,
}

pub fn filter_gateway(files: &[(&str, &[u8])], listener_extra: &str, routes: &str) -> FilterGateway {
    let backend = http::HttpBackend::start(http::Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    let port = free_port();
    let log = dir.path().join("access.log");
    let cfg = format!(
        "[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         access_log = {{ path = \"{}\", format = \"json\" }}\n{listener_extra}\n\n{routes}\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        log.display(),
        backend.target()
    );
    let path = write_file(dir.path(), "gw.toml", &cfg);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    FilterGateway {
        proxy,
        port,
        backend,
        log,
        dir,
    }
}

/// `METHOD path` to the admin port with an optional token: status and JSON body.
pub fn admin(port: u16, method: &str, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut s = connect(port);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: admin\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a whole response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}
