//! Tracing and log shipping against real receivers (issue 41): Jaeger all-in-one, built from its
//! Go module, takes Rampart's spans over OTLP (HTTP/protobuf and gRPC) and a traced backend's,
//! and the tests read the traces back from its query API (parent and child links, attributes,
//! sampling, tail decisions, retries, refused requests, TCP sessions); rsyslogd takes access logs
//! and session records over UDP and TCP; Jaeger's collector takes OTLP log records. A dead
//! collector or syslog server loses spans or lines, counted, and never a request.

use std::net::TcpStream;
use std::path::{Path, PathBuf};

use crate::common::http::send;
use crate::common::scrape::scrape;
use crate::common::{free_port, write_file, Rampart};

mod logs;
mod spans;
mod traced_backend;

/// A Rampart with an admin listener and one HTTP listener `web` (JSON access log at
/// `access.log`, unless `listener_extra` says where) to the upstream `app` of `targets`.
pub struct Gateway {
    pub rampart: Rampart,
    pub port: u16,
    pub admin: u16,
    pub dir: tempfile::TempDir,
}

impl Gateway {
    /// `tracing` is the `[tracing]` table (or nothing); `listener_extra` goes in the listener's
    /// table, `upstream_extra` in the upstream's, `more` at the end (more listeners, routes).
    pub fn start(tracing: &str, listener_extra: &str, targets: &[String], upstream_extra: &str, more: &str) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let access = if listener_extra.contains("access_log") {
            String::new()
        } else {
            format!(
                "access_log = {{ path = \"{}\", format = \"json\" }}\n",
                dir.path().join("access.log").display()
            )
        };
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let text = format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n{tracing}\n\n\
             [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n{access}{listener_extra}\n\n\
             [upstreams.app]\ntargets = [{}]\n{upstream_extra}\n\n{more}\n",
            targets.join(", ")
        );
        let path = write_file(dir.path(), "rampart.toml", &text);
        let rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
        Gateway {
            rampart,
            port,
            admin,
            dir,
        }
    }

    pub fn access_log(&self) -> PathBuf {
        self.dir.path().join("access.log")
    }

    /// One HTTP/1.1 request for `path` with `fields`: the status.
    pub fn get(&self, path: &str, fields: &[(&str, &str)]) -> u16 {
        request(self.port, path, fields)
    }

    /// The sum of the samples of metric `name` whose labels include `labels`.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        scrape(self.admin)
            .into_iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
            .map(|(_, _, v)| v)
            .sum()
    }
}

/// One HTTP/1.1 request to `port` (its connection closed after): the status.
pub fn request(port: u16, path: &str, fields: &[(&str, &str)]) -> u16 {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: gw.test\r\nUser-Agent: otel-test\r\nConnection: close\r\n");
    for (n, v) in fields {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    send(&mut conn, req.as_bytes()).0
}

/// The `[tracing]` table for a collector at `endpoint` over `protocol`, with `extra` keys.
pub fn tracing_table(endpoint: &str, protocol: &str, extra: &str) -> String {
    format!(
        "[tracing]\nendpoint = \"{endpoint}\"\nprotocol = \"{protocol}\"\nservice_name = \"rampart-test\"\n\
         interval = \"50ms\"\n{extra}\n"
    )
}

/// The JSON access log's lines once there are `n`.
pub fn access_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    crate::common::json_log_lines(path, n)
}
