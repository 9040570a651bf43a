//! Real telemetry receivers the tests send to, from `scripts/telemetry-servers`, each on ports of
//! the test's own on 127.0.0.1: Jaeger all-in-one (OTLP over gRPC and HTTP, spans kept in memory
//! and read back through its query API) for tracing, and rsyslogd (syslog over UDP and TCP, every
//! message written to files) for log shipping. Readiness is asked of them, never slept for.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, Bounded, INSTALL_WAIT, WAIT};

/// The paths of the `jaeger` binary and of `rsyslogd`, once `scripts/telemetry-servers` has built
/// or installed whatever is missing (run once per test binary). Panics with its output when it fails.
pub fn installed() -> (PathBuf, PathBuf) {
    static INSTALLED: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    let found = INSTALLED.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/telemetry-servers");
        let out = Command::new(script)
            .output_within(INSTALL_WAIT)
            .map_err(|e| format!("cannot run {script}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        match stdout.lines().collect::<Vec<_>>()[..] {
            [jaeger, rsyslogd] if out.status.success() => Ok((jaeger.into(), rsyslogd.into())),
            _ => Err(format!(
                "scripts/telemetry-servers could not provide Jaeger (built with Go) and rsyslogd \
                 (Debian's rsyslog) ({}); this test needs them:\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    match found {
        Ok(paths) => paths.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Jaeger all-in-one (the v2, collector-based binary) on 127.0.0.1: OTLP receivers over gRPC and
/// HTTP, spans in memory (stored as they arrive: no batching), log records written to its log by
/// the collector's `debug` exporter, the query API, a health check, and nothing else listening.
/// Killed when dropped.
pub struct Jaeger {
    child: Option<Child>,
    pub otlp_grpc: u16,
    pub otlp_http: u16,
    /// The query API (`/api/traces/{id}`, `/api/services`, …) and a placeholder UI.
    pub query: u16,
    health: u16,
    dir: tempfile::TempDir,
}

impl Jaeger {
    /// Starts one on free ports and waits until its health check says every part is up.
    pub fn start() -> Jaeger {
        let mut jaeger = Jaeger {
            child: None,
            otlp_grpc: free_port(),
            otlp_http: free_port(),
            query: free_port(),
            health: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        // The query API's gRPC port is not used, but it listens somewhere: on a port of ours.
        let query_grpc = free_port();
        let config = format!(
            "service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces: {{receivers: [otlp], exporters: [jaeger_storage_exporter]}}
    logs: {{receivers: [otlp], exporters: [debug]}}
  telemetry: {{metrics: {{level: none}}, logs: {{level: info}}}}
extensions:
  jaeger_storage: {{backends: {{memstore: {{memory: {{max_traces: 100000}}}}}}}}
  jaeger_query:
    storage: {{traces: memstore}}
    enable_tracing: false
    http: {{endpoint: '127.0.0.1:{}'}}
    grpc: {{endpoint: '127.0.0.1:{query_grpc}'}}
  healthcheckv2: {{use_v2: true, http: {{endpoint: '127.0.0.1:{}'}}}}
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{}'}}
      http: {{endpoint: '127.0.0.1:{}'}}
exporters:
  jaeger_storage_exporter: {{trace_storage: memstore}}
  debug: {{verbosity: detailed}}
",
            jaeger.query, jaeger.health, jaeger.otlp_grpc, jaeger.otlp_http
        );
        std::fs::write(jaeger.dir.path().join("jaeger.yaml"), config).unwrap();
        jaeger.restart();
        jaeger
    }

    /// Starts it (again, after [`Jaeger::kill`]: empty, memory is all it keeps) on its ports and
    /// waits until its health check answers 200 (503 "StatusStarting" until every receiver and
    /// extension has started).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let (config, log) = (self.dir.path().join("jaeger.yaml"), self.dir.path().join("jaeger.log"));
        let child = self.child.insert(spawn(
            &installed().0,
            &[OsStr::new("--config"), config.as_os_str()],
            &log,
        ));
        let health = self.health;
        poll(Duration::from_millis(10), || {
            let exited = child.try_wait().unwrap();
            assert!(exited.is_none(), "Jaeger exited ({exited:?}):\n{}", log_tail(&log));
            match http_get(health, "/status") {
                Some((200, _)) => Ok(()),
                answer => Err(format!("Jaeger not healthy ({answer:?}):\n{}", log_tail(&log))),
            }
        });
    }

    /// Kills it (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        kill(&mut self.child);
    }

    /// The OTLP/HTTP endpoint's base: spans are `POST`ed to `/v1/traces` under it.
    pub fn otlp_http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_http)
    }

    /// The OTLP/gRPC endpoint (HTTP/2 in clear).
    pub fn otlp_grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_grpc)
    }

    /// `GET path` of the query API: the status and the JSON answer (`Null` when not JSON).
    pub fn get(&self, path: &str) -> (u16, Value) {
        http_get(self.query, path).unwrap_or_else(|| panic!("Jaeger's query API did not answer GET {path}"))
    }

    /// The trace `trace_id` (32 hex digits, as sent) once it has at least `spans_at_least` spans,
    /// polled until [`WAIT`]: `{"traceID", "spans": [{"traceID", "spanID", "operationName",
    /// "references": [{"refType": "CHILD_OF", "traceID", "spanID"}], "startTime" and "duration"
    /// (µs), "tags": [{"key", "type", "value"}], "logs" (events), "processID", "warnings"}],
    /// "processes": {"p1": {"serviceName", "tags"}}}`. The span kind and status are the tags
    /// `span.kind` ("server", "client", …) and `otel.status_code`; a parent it has no span of
    /// gives that span a warning. A trace ID whose first 16 digits are zeros is written as its
    /// last 16 only.
    pub fn trace(&self, trace_id: &str, spans_at_least: usize) -> Value {
        poll(Duration::from_millis(20), || {
            let (status, mut answer) = self.get(&format!("/api/traces/{trace_id}"));
            match answer["data"][0]["spans"].as_array().map_or(0, Vec::len) {
                n if n >= spans_at_least => Ok(answer["data"][0].take()),
                n => Err(format!(
                    "trace {trace_id} has {n} spans in Jaeger, not {spans_at_least}: {status} {answer}\nits log:\n{}",
                    self.log()
                )),
            }
        })
    }

    /// The services it has spans of, sorted.
    pub fn services(&self) -> Vec<String> {
        let mut services: Vec<String> =
            serde_json::from_value(self.get("/api/services").1["data"].take()).unwrap_or_default();
        services.sort();
        services
    }

    /// The traces of `service` (a name of URL-safe characters) with a span in the last two days,
    /// newest first, 1000 at most, each as [`Jaeger::trace`] returns one. Answers at once.
    pub fn traces_of(&self, service: &str) -> Vec<Value> {
        let (_, answer) = self.get(&format!("/api/traces?service={service}&limit=1000"));
        answer["data"].as_array().cloned().unwrap_or_default()
    }

    /// [`Jaeger::traces_of`] once there are at least `count`, polled until [`WAIT`].
    pub fn traces_of_at_least(&self, service: &str, count: usize) -> Vec<Value> {
        poll(Duration::from_millis(20), || match self.traces_of(service) {
            traces if traces.len() >= count => Ok(traces),
            traces => Err(format!(
                "{} traces of {service:?} in Jaeger, not {count}; its services: {:?}",
                traces.len(),
                self.services()
            )),
        })
    }

    /// Its log once it holds `needle`, polled until [`WAIT`]: OTLP log records it received are
    /// written there (its `debug` exporter, each record's `Body`, `Trace ID`, `Span ID` and
    /// attributes on lines of their own).
    pub fn log_once_it_holds(&self, needle: &str) -> String {
        let path = self.dir.path().join("jaeger.log");
        poll(Duration::from_millis(20), || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            match text.contains(needle) {
                true => Ok(text),
                false => Err(format!("Jaeger's log does not hold {needle:?}:\n{}", log_tail(&path))),
            }
        })
    }

    /// The last lines of its log.
    pub fn log(&self) -> String {
        log_tail(&self.dir.path().join("jaeger.log"))
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of the tag `key` of a span (or of a process) of a [`Jaeger::trace`] answer.
pub fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// An `rsyslogd` on 127.0.0.1 (imudp, and imtcp, which takes octet-counted framing, RFC 6587, as
/// well as LF-delimited) and on a unix datagram socket of its own (imuxsock), writing each message it receives as one line to two files: the message
/// as received (`%rawmsg%`; control characters are written `#ooo`: a line feed is `#012`) and
/// rsyslog's parse of it as JSON (`%jsonmesg%`). No /dev/log, no pid file, no system file (it runs
/// unprivileged as well); killed when dropped.
pub struct Rsyslog {
    child: Option<Child>,
    pub udp_port: u16,
    pub tcp_port: u16,
    dir: tempfile::TempDir,
}

impl Rsyslog {
    /// Starts one on two free ports (a sender that mixes up UDP and TCP fails) and waits until
    /// both are bound.
    pub fn start() -> Rsyslog {
        // free_port() tries TCP only, and rsyslog's UDP socket would share a port (SO_REUSEADDR).
        let udp_port = std::iter::repeat_with(free_port)
            .find(|&port| UdpSocket::bind(("127.0.0.1", port)).is_ok())
            .unwrap();
        let mut server = Rsyslog {
            child: None,
            udp_port,
            tcp_port: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        let dir = server.dir.path().display();
        let config = format!(
            r#"global(workDirectory="{dir}" maxMessageSize="64k" net.enableDNS="off")
module(load="imudp")
module(load="imtcp")
template(name="raw" type="string" string="%rawmsg%\n")
template(name="json" type="string" string="%jsonmesg%\n")
ruleset(name="received") {{
    action(type="omfile" file="{dir}/raw.log" template="raw")
    action(type="omfile" file="{dir}/parsed.jsonl" template="json")
}}
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="{dir}/log.sock" UseSpecialParser="off" ParseHostname="on" Ruleset="received")
input(type="imudp" address="127.0.0.1" port="{}" ruleset="received")
input(type="imtcp" address="127.0.0.1" port="{}" ruleset="received")
"#,
            server.udp_port, server.tcp_port
        );
        std::fs::write(server.dir.path().join("rsyslog.conf"), config).unwrap();
        server.start_again();
        server
    }

    /// Starts it (again, after [`Rsyslog::stop`]) on its ports, appending to the same files, and
    /// waits until the TCP port takes connections and the UDP port is bound.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "already running");
        let (config, log) = (
            self.dir.path().join("rsyslog.conf"),
            self.dir.path().join("rsyslogd.log"),
        );
        let (tcp_addr, udp_port, unix) = (self.tcp_addr(), self.udp_port, self.unix_path());
        let _ = std::fs::remove_file(&unix);
        let args = [
            OsStr::new("-n"),
            OsStr::new("-iNONE"),
            OsStr::new("-f"),
            config.as_os_str(),
        ];
        let child = self.child.insert(spawn(&installed().1, &args, &log));
        poll(Duration::from_millis(10), || {
            let exited = child.try_wait().unwrap();
            assert!(exited.is_none(), "rsyslogd exited ({exited:?}):\n{}", log_tail(&log));
            if TcpStream::connect(&tcp_addr).is_ok() && udp_bound(udp_port) && unix.exists() {
                Ok(())
            } else {
                Err(format!("rsyslogd not listening:\n{}", log_tail(&log)))
            }
        });
    }

    /// Kills it (SIGKILL) and waits until it is gone: its ports refuse from then on.
    pub fn stop(&mut self) {
        kill(&mut self.child);
    }

    /// Its unix datagram socket (imuxsock, parsing RFC 5424 as the network inputs do).
    pub fn unix_path(&self) -> PathBuf {
        self.dir.path().join("log.sock")
    }

    pub fn udp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.udp_port)
    }

    pub fn tcp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.tcp_port)
    }

    /// The file of messages as received (one a line).
    pub fn raw_log_path(&self) -> PathBuf {
        self.dir.path().join("raw.log")
    }

    /// Every message received so far, as received (no framing, no trailing line feed), once there
    /// are at least `at_least`, polled until [`WAIT`].
    pub fn lines(&self, at_least: usize) -> Vec<String> {
        self.read("raw.log", at_least)
    }

    /// rsyslog's parse of every message received so far, once there are at least `at_least`:
    /// objects of strings: "rawmsg", "pri", "syslogfacility", "syslogseverity", "protocol-version"
    /// ("1" for RFC 5424, "0" where it fell back to RFC 3164), "timereported", "hostname",
    /// "app-name", "procid", "msgid", "structured-data", "msg" (which keeps a leading BOM),
    /// "inputname" ("imudp", "imtcp"), …; a nil field is "-".
    pub fn parsed(&self, at_least: usize) -> Vec<Value> {
        let lines = self.read("parsed.jsonl", at_least);
        lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("rsyslogd wrote {l:?}: {e}")))
            .collect()
    }

    fn read(&self, file: &str, at_least: usize) -> Vec<String> {
        let path = self.dir.path().join(file);
        poll(Duration::from_millis(10), || {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
            // Whole lines only: a write may be under way.
            let lines: Vec<String> = text
                .split_inclusive('\n')
                .filter_map(|l| l.strip_suffix('\n'))
                .map(String::from)
                .collect();
            if lines.len() >= at_least {
                return Ok(lines);
            }
            let log = log_tail(&self.dir.path().join("rsyslogd.log"));
            Err(format!(
                "rsyslogd received {} messages, not {at_least}:\n{text}\nits log:\n{log}",
                lines.len()
            ))
        })
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Calls `attempt` every `every` until it succeeds; past [`WAIT`] fails the test with its last error.
fn poll<T>(every: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match attempt() {
            Ok(found) => return found,
            Err(why) if Instant::now() >= deadline => panic!("{why}\n(waited {WAIT:?})"),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// Starts `program ARGS`, its output appended to `log`.
fn spawn(program: &Path, args: &[&OsStr], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()))
}

fn kill(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The last 40 lines of a log file.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Whether a UDP socket is bound to `port` on some local address (/proc/net/udp).
fn udp_bound(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let suffix = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|local| local.ends_with(&suffix))
    })
}

/// `GET path` over HTTP/1.0 (so that Go answers unchunked and closes): the status and the body as
/// JSON (`Null` when not JSON); `None` when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, Value)> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(WAIT)).ok()?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}
