//! Log files written off the hot path: session records (one JSON line per L4 connection) and
//! HTTP access logs. Workers buffer lines per file and hand batches to one writer thread, which
//! opens each file on first use and reopens all of them on request (reload, log rotation). A
//! path of `-` or `/dev/stdout` ([`rampart_model::is_stdout_path`]) is the process's standard
//! output, never a file of that name; a `syslog+udp://`, `syslog+tcp://` or `syslog+unix://`
//! destination ([`rampart_model::log_target::LogTarget`]) is a syslog server ([`crate::syslog`]).
//! The queue to the writer is bounded ([`QUEUE_BATCHES`]): a writer that falls behind (a slow
//! disk, a syslog server that stalls) loses batches, counted in [`LogLineCounts`], and never
//! holds a worker.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

enum Command {
    Records(Arc<Path>, Vec<u8>),
    Reopen(Option<PathBuf>, mpsc::Sender<io::Result<()>>),
    Flush(mpsc::Sender<()>),
}

/// Batches (up to 32 KiB of lines each, from each worker) waiting for the writer; past them, a
/// worker's batch is dropped.
pub const QUEUE_BATCHES: usize = 1024;

/// Log lines lost, by reason (process-wide, read by the metrics).
pub struct LogLineCounts;

static SYSLOG_UNREACHABLE: AtomicU64 = AtomicU64::new(0);
static QUEUE_FULL: AtomicU64 = AtomicU64::new(0);

impl LogLineCounts {
    /// `(reason, lines)`: `syslog_unreachable`, `queue_full`.
    pub fn dropped() -> [(&'static str, u64); 2] {
        [
            ("syslog_unreachable", SYSLOG_UNREACHABLE.load(Relaxed)),
            ("queue_full", QUEUE_FULL.load(Relaxed)),
        ]
    }
}

fn lines_in(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// A worker's handle to the writer thread.
#[derive(Clone)]
pub struct SessionLogSink(mpsc::SyncSender<Command>);

impl SessionLogSink {
    pub(crate) fn send(&self, path: Arc<Path>, records: Vec<u8>) {
        // Never waits: a full queue loses the batch. The writer only goes away at process exit;
        // records sent after that are dropped.
        if let Err(mpsc::TrySendError::Full(Command::Records(_, lost))) =
            self.0.try_send(Command::Records(path, records))
        {
            QUEUE_FULL.fetch_add(lines_in(&lost), Relaxed);
        }
    }
}

/// The thread that owns the session log file.
pub struct SessionLogWriter {
    tx: mpsc::SyncSender<Command>,
    thread: Option<JoinHandle<()>>,
}

impl SessionLogWriter {
    /// Starts the writer. `path`, the session log, is opened now so that a bad path fails the
    /// start; other files (access logs) are opened when first written.
    pub fn start(path: Option<PathBuf>) -> io::Result<SessionLogWriter> {
        let mut files = HashMap::new();
        if let Some(p) = path {
            let f = open(&p)?;
            files.insert(p, f);
        }
        let (tx, rx) = mpsc::sync_channel(QUEUE_BATCHES);
        let thread = std::thread::Builder::new()
            .name("rampart-logs".into())
            .spawn(move || write_loop(files, rx))?;
        Ok(SessionLogWriter {
            tx,
            thread: Some(thread),
        })
    }

    pub fn sink(&self) -> SessionLogSink {
        SessionLogSink(self.tx.clone())
    }

    /// Closes every open file, so that each is opened again by path on its next line (log
    /// rotation, and files a reload no longer uses), and checks that `path` (the session log of
    /// the new config) can be opened.
    pub fn reopen(&self, path: Option<PathBuf>) -> io::Result<()> {
        let (done_tx, done_rx) = mpsc::channel();
        self.tx
            .send(Command::Reopen(path, done_tx))
            .map_err(|_| io::Error::other("session log writer stopped"))?;
        done_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("session log writer stopped")))
    }

    /// Waits until everything sent so far is written.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::channel();
        if self.tx.send(Command::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for SessionLogWriter {
    fn drop(&mut self) {
        self.flush();
        drop(self.thread.take());
    }
}

/// Where one log's lines go.
enum LogOutput {
    File(File),
    Stdout,
    Syslog(crate::syslog::SyslogOutput),
    /// `otlp`: the workers send its lines to the collector themselves; none come here.
    Nowhere,
}

impl LogOutput {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            LogOutput::File(f) => f.write_all(bytes),
            LogOutput::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            LogOutput::Syslog(s) => {
                let lost = s.send_lines(bytes);
                if lost > 0 {
                    SYSLOG_UNREACHABLE.fetch_add(lost, Relaxed);
                    return Err(io::Error::other(format!(
                        "{lost} lines lost: the server could not be written to"
                    )));
                }
                Ok(())
            }
            LogOutput::Nowhere => Ok(()),
        }
    }
}

fn open(path: &Path) -> io::Result<LogOutput> {
    use rampart_model::log_target::LogTarget;
    match path.to_str().map(LogTarget::parse) {
        Some(Ok(LogTarget::Stdout)) => return Ok(LogOutput::Stdout),
        Some(Ok(LogTarget::Syslog(addr))) => return Ok(LogOutput::Syslog(crate::syslog::SyslogOutput::new(addr))),
        Some(Ok(LogTarget::Otlp)) => return Ok(LogOutput::Nowhere),
        _ => {}
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(LogOutput::File)
}

fn write_loop(mut files: HashMap<PathBuf, LogOutput>, rx: mpsc::Receiver<Command>) {
    let mut failed: HashMap<PathBuf, ()> = HashMap::new();
    let mut failing: std::collections::HashSet<PathBuf> = Default::default();
    while let Ok(command) = rx.recv() {
        match command {
            Command::Records(path, bytes) => {
                if !files.contains_key(&*path) {
                    match open(&path) {
                        Ok(f) => {
                            files.insert(path.to_path_buf(), f);
                        }
                        Err(e) => {
                            if failed.insert(path.to_path_buf(), ()).is_none() {
                                tracing::error!("log file {}: cannot open: {e}", path.display());
                            }
                            continue;
                        }
                    }
                }
                if let Some(f) = files.get_mut(&*path) {
                    // Said once when writes begin to fail, and once when they work again.
                    match f.write_all(&bytes) {
                        Err(e) if failing.insert(path.to_path_buf()) => {
                            tracing::error!("log {}: write failed: {e}", path.display());
                        }
                        Ok(()) if failing.remove(&*path) => {
                            tracing::info!("log {}: writes work again", path.display());
                        }
                        _ => {}
                    }
                }
            }
            Command::Reopen(path, done) => {
                files.clear();
                failed.clear();
                let result = match path {
                    Some(p) => open(&p).map(|f| {
                        files.insert(p, f);
                    }),
                    None => Ok(()),
                };
                let _ = done.send(result);
            }
            Command::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// One connection's session record.
pub struct SessionRecord<'a> {
    pub client: std::net::SocketAddr,
    pub listener: &'a str,
    pub upstream: Option<&'a str>,
    pub target: Option<&'a str>,
    pub accepted: Instant,
    /// The wall-clock time of `accepted`; the other times are derived from it.
    pub accepted_wall: SystemTime,
    pub connected: Option<Instant>,
    pub first_byte_up: Option<Instant>,
    pub first_byte_down: Option<Instant>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Why the connection ended (`completed`, `idle_timeout`, `connection_limit`, ...).
    pub close: &'a str,
    /// What the client connection's TLS handshake negotiated, on a TLS listener.
    pub tls: Option<crate::tls::TlsInfo<'a>>,
    /// What peeking found and which route took the connection, on a listener with routes.
    pub routed: Option<RoutedView<'a>>,
}

/// The routing facts of a connection of a TCP listener with routes.
pub struct RoutedView<'a> {
    /// The protocol detected (`tls`, `http`, ..., `unknown`), or `None` when nothing decided it
    /// in time.
    pub protocol: Option<&'a str>,
    pub sni: Option<&'a str>,
    /// The ALPN protocols the ClientHello offered.
    pub alpn: &'a [Vec<u8>],
    /// The HTTP Host of the first request, when a route asked for it.
    pub http_host: Option<&'a str>,
    /// The route's name; `None`: the listener's default.
    pub route: Option<&'a str>,
    /// From accept to the decision.
    pub peek: Duration,
}

impl RoutedView<'_> {
    /// Appends `,"protocol":…,"sni":…,"alpn":[…],"http_host":…,"route":…,"peek_ms":…`.
    fn write(&self, out: &mut Vec<u8>) {
        let text_or_null = |out: &mut Vec<u8>, v: Option<&str>| match v {
            Some(v) => write_json_str(out, v),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b",\"protocol\":");
        text_or_null(out, self.protocol);
        out.extend_from_slice(b",\"sni\":");
        text_or_null(out, self.sni);
        out.extend_from_slice(b",\"alpn\":[");
        for (i, name) in self.alpn.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_str(out, &String::from_utf8_lossy(name));
        }
        out.extend_from_slice(b"],\"http_host\":");
        text_or_null(out, self.http_host);
        out.extend_from_slice(b",\"route\":");
        text_or_null(out, self.route);
        let _ = write!(out, ",\"peek_ms\":{:.3}", self.peek.as_secs_f64() * 1000.0);
    }
}

impl SessionRecord<'_> {
    /// Appends the record as one JSON line; `closed` is now.
    pub fn write(&self, out: &mut Vec<u8>) {
        let closed = Instant::now();
        let wall = |t: Instant| self.accepted_wall + t.saturating_duration_since(self.accepted);
        let text_or_null = |out: &mut Vec<u8>, v: Option<&str>| match v {
            Some(v) => write_json_str(out, v),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b"{\"client\":");
        write_json_str(out, &self.client.to_string());
        out.extend_from_slice(b",\"listener\":");
        write_json_str(out, self.listener);
        out.extend_from_slice(b",\"upstream\":");
        text_or_null(out, self.upstream);
        out.extend_from_slice(b",\"target\":");
        text_or_null(out, self.target);
        let times = [
            ("accepted", Some(self.accepted)),
            ("connected", self.connected),
            ("first_byte_up", self.first_byte_up),
            ("first_byte_down", self.first_byte_down),
            ("closed", Some(closed)),
        ];
        for (name, t) in times {
            let _ = write!(out, ",\"{name}\":");
            match t {
                Some(t) => {
                    out.push(b'"');
                    write_timestamp(out, wall(t));
                    out.push(b'"');
                }
                None => out.extend_from_slice(b"null"),
            }
        }
        let _ = write!(
            out,
            ",\"bytes_up\":{},\"bytes_down\":{},\"close\":\"{}\"",
            self.bytes_up, self.bytes_down, self.close
        );
        write_tls_json(out, self.tls.as_ref());
        if let Some(routed) = &self.routed {
            routed.write(out);
        }
        out.extend_from_slice(b"}\n");
    }
}

/// Appends `,"tls_version":…,"tls_cipher":…,"tls_sni":…,"tls_alpn":…` (nulls when absent).
pub fn write_tls_json(out: &mut Vec<u8>, tls: Option<&crate::tls::TlsInfo<'_>>) {
    let text_or_null = |out: &mut Vec<u8>, v: Option<&str>| match v {
        Some(v) => write_json_str(out, v),
        None => out.extend_from_slice(b"null"),
    };
    out.extend_from_slice(b",\"tls_version\":");
    text_or_null(out, tls.and_then(|t| t.version));
    out.extend_from_slice(b",\"tls_cipher\":");
    text_or_null(out, tls.and_then(|t| t.cipher));
    out.extend_from_slice(b",\"tls_sni\":");
    text_or_null(out, tls.and_then(|t| t.sni));
    out.extend_from_slice(b",\"tls_alpn\":");
    let alpn = tls.and_then(|t| t.alpn).map(String::from_utf8_lossy);
    text_or_null(out, alpn.as_deref());
}

/// Writes `t` as RFC 3339 UTC with microseconds, e.g. `2026-11-22T06:10:00.123456Z`.
pub fn write_timestamp(out: &mut Vec<u8>, t: SystemTime) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    );
}

/// Writes `s` as a JSON string (quotes included).
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut tmp = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        let mut out = Vec::new();
        write_timestamp(&mut out, UNIX_EPOCH + Duration::new(1_795_327_200, 123_456_000));
        assert_eq!(String::from_utf8(out).unwrap(), "2026-11-22T06:00:00.123456Z");
        let mut out = Vec::new();
        write_timestamp(&mut out, UNIX_EPOCH + Duration::from_secs(951_782_400));
        assert_eq!(String::from_utf8(out).unwrap(), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\nd");
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\u000ad""#);
    }
}
