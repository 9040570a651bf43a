//! HTTP/3 clients for the end-to-end tests, each a real process: our aioquic client
//! (tests/h3_clients/aioquic_client.py), our quic-go client (tests/h3_clients/go) and ngtcp2's
//! example client (Debian `ngtcp2-client`, whose program is `gtlsclient`). `scripts/quic-clients`
//! installs the three (once per test process, when one is missing) and prints their paths.
//!
//! Our two clients take the same arguments (`URL [--method M] [--data-file F | --data-size N]
//! [--header 'n: v']... [--concurrent N] [--count N] [--insecure | --ca FILE] [--trailers]
//! [--connect HOST:PORT] [--timeout SECS]`; `--connect` and `--trailers` for both, see their
//! headers) and print one JSON line per request, parsed here into [`H3Response`]. `--concurrent N`
//! runs N requests at once as streams of ONE QUIC connection. `--data-size N` sends
//! [`generated_body`]`(N)`.
//!
//! The `*_in` functions and [`ngtcp2`] with a namespace run the client inside a
//! [`LossyNetns`] (common/netns.rs), over a lossy path.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::netns::{run_bounded, LossyNetns};
use super::INSTALL_WAIT;

/// How long one client run may take (its own `--timeout` bounds each request, 30 s by default).
pub const CLIENT_WAIT: Duration = Duration::from_secs(180);

/// One response, as our clients print it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct H3Response {
    pub status: u16,
    /// Lower-case names, without pseudo-headers; aioquic: in the order received, quic-go: sorted.
    pub headers: Vec<(String, String)>,
    pub body_sha256: String,
    pub body_len: u64,
    pub trailers: Vec<(String, String)>,
}

impl H3Response {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Which of our two clients.
#[derive(Clone, Copy, Debug)]
pub enum Client {
    Aioquic,
    QuicGo,
}

/// What one run of a client gave: one entry per request (its response, or the error it
/// printed), its exit code and its stderr.
#[derive(Debug)]
pub struct ClientRun {
    pub results: Vec<Result<H3Response, String>>,
    pub code: i32,
    pub stderr: String,
}

impl ClientRun {
    /// The responses when every request succeeded (and the client exited 0), else what failed.
    pub fn all_ok(self) -> Result<Vec<H3Response>, String> {
        let errors: Vec<&String> = self.results.iter().filter_map(|r| r.as_ref().err()).collect();
        if self.code != 0 || !errors.is_empty() || self.results.is_empty() {
            return Err(format!(
                "exit code {}, {} of {} requests failed: {:?}\nstderr:\n{}",
                self.code,
                errors.len(),
                self.results.len(),
                errors.iter().take(5).collect::<Vec<_>>(),
                tail(&self.stderr, 3000)
            ));
        }
        Ok(self.results.into_iter().map(Result::unwrap).collect())
    }
}

/// The three clients' programs.
pub struct Clients {
    /// ngtcp2's `gtlsclient`.
    pub ngtcp2: PathBuf,
    /// The venv's python3, with aioquic.
    pub aioquic_python: PathBuf,
    pub quic_go: PathBuf,
}

/// The clients, once `scripts/quic-clients` has installed whatever is missing (run once per
/// test process; a second process runs it again, harmlessly). Panics with its output when it fails.
pub fn clients() -> &'static Clients {
    static CLIENTS: OnceLock<Result<Clients, String>> = OnceLock::new();
    let found = CLIENTS.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/quic-clients");
        let out = run_bounded(Command::new(script), INSTALL_WAIT)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let paths: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
        match (out.status.success(), paths.as_slice()) {
            (true, [ngtcp2, python, go]) => Ok(Clients {
                ngtcp2: ngtcp2.clone(),
                aioquic_python: python.clone(),
                quic_go: go.clone(),
            }),
            _ => Err(format!(
                "scripts/quic-clients could not provide the HTTP/3 clients ({}):\n{stdout}\n{}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 4000)
            )),
        }
    });
    match found {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

fn aioquic_script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3_clients/aioquic_client.py")
}

/// Runs our aioquic client with `args`: every response, or what failed.
pub fn aioquic(args: &[&str]) -> Result<Vec<H3Response>, String> {
    run_client(Client::Aioquic, None, args).all_ok()
}

/// Runs our quic-go client with `args`: every response, or what failed.
pub fn quic_go(args: &[&str]) -> Result<Vec<H3Response>, String> {
    run_client(Client::QuicGo, None, args).all_ok()
}

/// [`aioquic`] inside a namespace (to reach a server through its lossy link).
pub fn aioquic_in(ns: &LossyNetns, args: &[&str]) -> Result<Vec<H3Response>, String> {
    run_client(Client::Aioquic, Some(ns), args).all_ok()
}

/// [`quic_go`] inside a namespace.
pub fn quic_go_in(ns: &LossyNetns, args: &[&str]) -> Result<Vec<H3Response>, String> {
    run_client(Client::QuicGo, Some(ns), args).all_ok()
}

/// Runs `client` with `args` (inside `ns` when given), bounded by [`CLIENT_WAIT`]; each request's
/// outcome, whether it succeeded or not.
pub fn run_client(client: Client, ns: Option<&LossyNetns>, args: &[&str]) -> ClientRun {
    let c = clients();
    let mut argv: Vec<&OsStr> = Vec::new();
    let program = match client {
        Client::Aioquic => {
            argv.push(OsStr::new(aioquic_script()));
            c.aioquic_python.as_os_str()
        }
        Client::QuicGo => c.quic_go.as_os_str(),
    };
    argv.extend(args.iter().map(OsStr::new));
    let mut cmd = match ns {
        Some(ns) => ns.command(program),
        None => Command::new(program),
    };
    cmd.args(argv);
    match run_bounded(cmd, CLIENT_WAIT) {
        Ok(out) => ClientRun {
            results: String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(parse_line)
                .collect(),
            code: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Err(e) => ClientRun {
            results: vec![Err(e.clone())],
            code: -1,
            stderr: e,
        },
    }
}

/// One JSON line of our clients.
pub fn parse_line(line: &str) -> Result<H3Response, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    if let Some(e) = v.get("error") {
        return Err(e.as_str().map_or_else(|| e.to_string(), str::to_string));
    }
    let pairs = |key: &str| -> Result<Vec<(String, String)>, String> {
        v.get(key)
            .and_then(|p| p.as_array())
            .ok_or_else(|| format!("no {key} in {line}"))?
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([n, v]) => Ok((
                    n.as_str().unwrap_or("").to_string(),
                    v.as_str().unwrap_or("").to_string(),
                )),
                _ => Err(format!("bad {key} entry {p} in {line}")),
            })
            .collect()
    };
    Ok(H3Response {
        status: v["status"].as_u64().ok_or_else(|| format!("no status in {line}"))? as u16,
        headers: pairs("headers")?,
        body_sha256: v["body_sha256"]
            .as_str()
            .ok_or_else(|| format!("no body_sha256 in {line}"))?
            .to_string(),
        body_len: v["body_len"].as_u64().ok_or_else(|| format!("no body_len in {line}"))?,
        trailers: pairs("trailers")?,
    })
}

/// The body `--data-size N` sends: N bytes, byte i = i mod 251.
pub fn generated_body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// Lower-case hex SHA-256, to compare with [`H3Response::body_sha256`].
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// What [`ngtcp2`] got.
#[derive(Debug)]
pub struct Ngtcp2Response {
    pub status: u16,
    /// As printed, pseudo-headers left out (trailers, should there be any, come last).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A GET with ngtcp2's client: status and body. It does not verify the server's certificate
/// (gtlsclient 0.12 has no option for a CA).
pub fn ngtcp2_get(url: &str) -> Result<(u16, Vec<u8>), String> {
    ngtcp2(None, url, &[]).map(|r| (r.status, r.body))
}

/// ngtcp2's client (inside `ns` when given) on `url` with `extra` options (`-m POST`,
/// `-d FILE`...): status, response headers (pseudo-headers left out) and body. It prints the
/// response's header fields on stderr (`http: stream 0x0 [name: value]`) and writes the body into
/// a directory of its own (`--download`); `--exit-on-all-streams-close` ends it after the response.
pub fn ngtcp2(ns: Option<&LossyNetns>, url: &str, extra: &[&str]) -> Result<Ngtcp2Response, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("not an https URL: {url}"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    // host, host:port, [v6] or [v6]:port
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']').ok_or_else(|| format!("bad authority in {url}"))?;
            (h, after.strip_prefix(':').unwrap_or("443"))
        }
        None => authority.split_once(':').unwrap_or((authority, "443")),
    };
    let download = tempfile::tempdir().map_err(|e| e.to_string())?;
    let program = &clients().ngtcp2;
    let mut cmd = match ns {
        Some(ns) => ns.command(program),
        None => Command::new(program),
    };
    cmd.args([
        "--no-quic-dump",
        "--no-http-dump",
        "--exit-on-all-streams-close",
        "--timeout=10s",
    ])
    .arg(format!("--download={}", download.path().display()))
    .args(extra)
    .args([host, port, url]);
    let out = run_bounded(cmd, CLIENT_WAIT)?;
    let log = String::from_utf8_lossy(&out.stderr);
    let mut status = None;
    let mut headers = Vec::new();
    for line in log.lines() {
        // "http: stream 0x0 [:status: 200]"
        let Some(field) = line
            .strip_prefix("http: stream 0x0 [")
            .and_then(|l| l.strip_suffix(']'))
        else {
            continue;
        };
        if let Some(s) = field.strip_prefix(":status: ") {
            status = s.trim().parse::<u16>().ok().filter(|s| *s >= 200).or(status);
        } else if !field.starts_with(':') {
            if let Some((n, v)) = field.split_once(": ") {
                headers.push((n.to_string(), v.to_string()));
            }
        }
    }
    let status = status.ok_or_else(|| {
        format!(
            "gtlsclient got no response (exit {}):\n{}",
            out.status,
            tail(&log, 3000)
        )
    })?;
    let mut body = Vec::new();
    for entry in std::fs::read_dir(download.path()).map_err(|e| e.to_string())? {
        body = std::fs::read(entry.map_err(|e| e.to_string())?.path()).map_err(|e| e.to_string())?;
    }
    Ok(Ngtcp2Response { status, headers, body })
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
