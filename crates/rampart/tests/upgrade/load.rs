//! A bounded steady load for the reload and upgrade tests: HTTP over keep-alive connections and
//! over a new connection per request, and TCP with a new connection per exchange, each in its
//! own thread until stopped. Every answer is checked; nothing is retried except what any HTTP
//! client retries (RFC 9112 section 9.3.1): a request on a reused keep-alive connection that the
//! server closed before sending any byte of a response.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one answer may take before it counts as failed.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the load saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: u64,
    /// Requests or exchanges that got a wrong answer, an error, or none.
    pub failed: u64,
    /// Connections the kernel refused (a closed port).
    pub refused: u64,
    /// Requests sent again on a new connection after a keep-alive connection closed first.
    pub retried: u64,
    /// The first few failures, said.
    pub errors: Vec<String>,
}

impl Tally {
    /// Fails the test unless nothing failed or was refused and at least `least` answers came;
    /// `log` is shown when it fails.
    pub fn assert_clean(&self, least: u64, log: &[String]) {
        assert_eq!(
            (self.failed, self.refused),
            (0, 0),
            "{self:?}\nlog:\n{}",
            log.join("\n")
        );
        assert!(self.ok >= least, "too little load to show anything: {self:?}");
    }

    fn fail(&mut self, what: String) {
        self.failed += 1;
        if self.errors.len() < 10 {
            self.errors.push(what);
        }
    }

    fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.refused += other.refused;
        self.retried += other.retried;
        self.errors.extend(other.errors);
    }
}

/// The running load.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Tally>>,
}

impl Load {
    /// HTTP GETs of `path` to `http_port` (two keep-alive clients, one closing), and TCP
    /// exchanges with a tag-and-echo backend through `tcp_port`.
    pub fn start(http_port: u16, path: &'static str, tcp_port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for keep_alive in [true, true, false] {
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                http_client(http_port, path, keep_alive, &stop)
            }));
        }
        let s = stop.clone();
        threads.push(std::thread::spawn(move || tcp_client(tcp_port, &s)));
        Load { stop, threads }
    }

    /// Stops the clients and adds up what they saw.
    pub fn stop(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let mut total = Tally::default();
        for t in self.threads {
            total.add(t.join().expect("a load thread panicked"));
        }
        total
    }
}

/// A connection or its failure; a refused one is counted apart.
fn connect(port: u16, tally: &mut Tally) -> Option<TcpStream> {
    match TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => {
            s.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
            s.set_nodelay(true).unwrap();
            Some(s)
        }
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            tally.refused += 1;
            None
        }
        Err(e) => {
            tally.fail(format!("connect: {e}"));
            None
        }
    }
}

fn http_client(port: u16, path: &str, keep_alive: bool, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    let request = if keep_alive {
        format!("GET {path} HTTP/1.1\r\nHost: load.test\r\n\r\n")
    } else {
        format!("GET {path} HTTP/1.1\r\nHost: load.test\r\nConnection: close\r\n\r\n")
    };
    let mut conn: Option<(TcpStream, bool)> = None; // the connection and whether it was used
    while !stop.load(Ordering::SeqCst) {
        let (mut stream, reused) = match conn.take() {
            Some((s, _)) => (s, true),
            None => match connect(port, &mut tally) {
                Some(s) => (s, false),
                None => continue,
            },
        };
        match exchange(&mut stream, request.as_bytes()) {
            Ok((200, close)) => {
                tally.ok += 1;
                if keep_alive && !close {
                    conn = Some((stream, true));
                }
            }
            Ok((status, _)) => tally.fail(format!("HTTP status {status}")),
            Err(Answer::NoneBeforeClose) if reused => tally.retried += 1,
            Err(Answer::NoneBeforeClose) => tally.fail("closed before any answer on a new connection".into()),
            Err(Answer::Broken(e)) => tally.fail(e),
        }
    }
    tally
}

enum Answer {
    /// The server closed (or reset) the connection before any byte of a response.
    NoneBeforeClose,
    Broken(String),
}

/// Sends one request and reads its response: the status, and whether the server closes after it.
fn exchange(stream: &mut TcpStream, request: &[u8]) -> Result<(u16, bool), Answer> {
    let closed = |e: &std::io::Error| matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe);
    if let Err(e) = stream.write_all(request) {
        return Err(if closed(&e) {
            Answer::NoneBeforeClose
        } else {
            Answer::Broken(format!("write: {e}"))
        });
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err(Answer::NoneBeforeClose),
            Err(e) if buf.is_empty() && closed(&e) => return Err(Answer::NoneBeforeClose),
            Ok(0) => return Err(Answer::Broken("closed mid-head".into())),
            Err(e) => return Err(Answer::Broken(format!("read: {e}"))),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Answer::Broken(format!("no content-length in {head:?}")))?;
    while buf.len() < head_end + length {
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Answer::Broken("closed mid-body".into())),
            Err(e) => return Err(Answer::Broken(format!("read body: {e}"))),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Ok((status, head.contains("\r\nconnection: close")))
}

/// One connection per exchange: the backend's tag line, then `ping` echoed.
fn tcp_client(port: u16, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    while !stop.load(Ordering::SeqCst) {
        let Some(mut stream) = connect(port, &mut tally) else {
            continue;
        };
        match tcp_exchange(&mut stream) {
            Ok(()) => tally.ok += 1,
            Err(e) => tally.fail(format!("tcp: {e}")),
        }
    }
    tally
}

fn tcp_exchange(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"ping\n")?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    // The tag line, then the echo.
    while got.iter().filter(|&&b| b == b'\n').count() < 2 {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("closed after {got:?}"),
            ));
        }
        got.extend_from_slice(&chunk[..n]);
    }
    if got.ends_with(b"\nping\n") {
        Ok(())
    } else {
        Err(std::io::Error::new(ErrorKind::InvalidData, format!("got {got:?}")))
    }
}
