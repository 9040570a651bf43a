//! Real servers the tests start: the Debian packages `scripts/servers` installs (PostgreSQL,
//! Redis, OpenSSH, curl) and a `redis-server` on a port of the test's own.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use super::{free_port, Bounded, INSTALL_WAIT, WAIT};

/// The directory holding PostgreSQL's `initdb` and `postgres`, once `scripts/servers` has
/// installed whatever is missing (run once per test binary: concurrent apt-get runs would fight
/// over its lock). Panics with the script's output when it fails.
pub fn installed() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = INSTALLED.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/servers");
        let out = Command::new(script)
            .stdin(Stdio::null())
            .output_within(INSTALL_WAIT)
            .map_err(|e| format!("cannot run {script}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || stdout.is_empty() {
            return Err(format!(
                "scripts/servers could not provide PostgreSQL, Redis, OpenSSH and curl ({}); this \
                 test needs them (Debian packages postgresql, postgresql-client, redis-server, \
                 redis-tools, openssh-server, openssh-client, curl):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(PathBuf::from(stdout))
    });
    match found {
        Ok(dir) => dir.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A `redis-server` on 127.0.0.1 (no persistence), killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        installed();
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        server.restart();
        server
    }

    /// Starts it again on its port (after [`RedisServer::kill`]) and waits for `PING`.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("redis-server starts (scripts/servers installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        while !self.answers_ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server not answering PING:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Kills it (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis-cli ARGS` against it: its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output_within(WAIT)
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn answers_ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An `etcd` (Debian's `etcd-server`) on 127.0.0.1, one member, its data in a directory of its
/// own; killed when dropped.
pub struct EtcdServer {
    child: Option<Child>,
    pub port: u16,
    peer: u16,
    dir: tempfile::TempDir,
    /// `--cert-file`, `--key-file`, `--trusted-ca-file`: clients speak TLS and show a
    /// certificate that CA signed.
    tls: Option<[String; 3]>,
}

impl EtcdServer {
    /// Starts one on free ports and waits until its JSON gateway answers a read.
    pub fn start() -> EtcdServer {
        EtcdServer::start_with(None)
    }

    /// One whose clients speak TLS (its certificate and key, PEM files) and show a client
    /// certificate signed by `ca`. Waits only until it takes connections: its readiness is for
    /// a TLS client to see.
    pub fn start_tls(cert: &str, key: &str, ca: &str) -> EtcdServer {
        EtcdServer::start_with(Some([cert, key, ca].map(String::from)))
    }

    fn start_with(tls: Option<[String; 3]>) -> EtcdServer {
        installed();
        let mut server = EtcdServer {
            child: None,
            port: free_port(),
            peer: free_port(),
            // In memory where the machine has /dev/shm: etcd syncs its log to disk before it
            // answers a write, and on a CI disk busy with a build that took past etcd's own
            // 7-second request timeout (`etcdserver: request timed out`).
            dir: tempfile::tempdir_in("/dev/shm")
                .or_else(|_| tempfile::tempdir())
                .unwrap(),
            tls,
        };
        server.restart();
        server
    }

    /// Starts it (again, after [`EtcdServer::kill`]) on its ports with its data, and waits until
    /// its JSON gateway answers a read (with auth enabled: until it answers at all).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let client = self.url();
        let peer_url = format!("http://127.0.0.1:{}", self.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let child = Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            .args(self.tls.iter().flat_map(|[cert, key, ca]| {
                [
                    format!("--cert-file={cert}"),
                    format!("--key-file={key}"),
                    format!("--trusted-ca-file={ca}"),
                    "--client-cert-auth".to_string(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd starts (scripts/servers installs etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        while !self.answers() {
            assert!(Instant::now() < deadline, "etcd not answering on {client}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills it (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// `POST path` with a JSON body to its JSON gateway in clear (with an auth token, if
    /// given): the status and the JSON answer.
    pub fn call(&self, path: &str, body: &serde_json::Value, token: Option<&str>) -> (u16, serde_json::Value) {
        use std::io::{Read, Write};
        let body = body.to_string();
        let authorization = token.map_or(String::new(), |t| format!("authorization: {t}\r\n"));
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\ncontent-length: {}\r\n{authorization}connection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let (head, rest) = answer.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        // A chunked answer (etcd's errors): the JSON object is on the chunk's line.
        let json = rest
            .lines()
            .find_map(|l| serde_json::from_str(l.trim()).ok())
            .unwrap_or_else(|| panic!("no JSON in {answer}"));
        (status, json)
    }

    /// Writes `text` at `key` straight through the gateway (as another tool would, with no
    /// validation): the new revision.
    pub fn put(&self, key: &str, text: &str) -> i64 {
        let body = serde_json::json!({ "key": b64(key), "value": b64(text) });
        let (status, answer) = self.call("/v3/kv/put", &body, None);
        assert_eq!(status, 200, "{answer}");
        answer["header"]["revision"].as_str().unwrap().parse().unwrap()
    }

    /// Whether its JSON gateway answers a read: with 200, or with the 400 of a store that wants
    /// a user (auth enabled).
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut conn) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.tls.is_some() {
            return true;
        }
        let body = r#"{"key":"AA=="}"#;
        let request = format!(
            "POST /v3/kv/range HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut answer = String::new();
        conn.write_all(request.as_bytes()).is_ok()
            && conn.read_to_string(&mut answer).is_ok()
            && (answer.starts_with("HTTP/1.1 200") || answer.contains("user name is empty"))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Base64, as etcd's JSON gateway takes keys and values.
pub fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Serves `listener` (bound by the test, set non-blocking here) on a thread of its own with a
/// tokio runtime: each accepted connection runs `each` as a task. For the tests' own HTTP/2
/// servers (h2c, h2 over TLS).
pub fn serve_tokio<F, Fut>(listener: std::net::TcpListener, each: F)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(each(tcp));
            }
        });
    });
}
