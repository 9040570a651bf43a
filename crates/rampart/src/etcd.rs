//! The config in etcd: what `rampart push` and `rampart pull` need of the etcd v3 API, spoken
//! through its JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`; keys and values base64) over
//! plain HTTP/1.1, so the binary carries no gRPC client for two requests.
//!
//! Key layout: the whole TOML config under `PREFIX` + `config` (by default `/rampart/config`),
//! as the operator wrote it. Files it names (includes, certificates, keys) are read by each
//! instance from its own disk.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rampart_proto::h1::{parse_response, ChunkedDecoder, ChunkedPart, Framing, Limits};
use serde_json::{json, Value};

/// How long one request to etcd may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How often a running instance asks etcd whether its config changed.
pub const POLL: Duration = Duration::from_millis(250);

/// Follows the config in etcd for a running instance: every [`POLL`], one read of the config's
/// key; when its revision differs from the one applied last (`applied` at start), a reload, through
/// the same compile-and-swap path as SIGHUP (a bad config is refused there and the running one
/// stays). Reading again and comparing the revision misses no change (however many happened
/// in between, or whatever etcd compacted) and rebuilds nothing when nothing changed. While etcd
/// cannot be reached, the running config stays; that is logged once, and its return too.
/// `reachable` says whether the last read was answered.
pub fn follow(
    store: Etcd,
    applied: i64,
    reachable: std::sync::Arc<std::sync::atomic::AtomicBool>,
    commands: tokio::sync::mpsc::UnboundedSender<crate::admin::Command>,
) {
    let store = std::sync::Arc::new(store);
    tokio::spawn(async move {
        let mut applied = applied;
        let mut unreachable = false;
        loop {
            tokio::time::sleep(POLL).await;
            let reader = store.clone();
            let read = tokio::task::spawn_blocking(move || reader.get()).await;
            let revision = match read {
                Ok(Ok((stored, _))) => stored.map_or(0, |s| s.mod_revision),
                Ok(Err(e)) => {
                    reachable.store(false, std::sync::atomic::Ordering::Relaxed);
                    if !unreachable {
                        tracing::warn!("etcd: {e:#}; the running config stays");
                        unreachable = true;
                    }
                    continue;
                }
                Err(_) => continue,
            };
            reachable.store(true, std::sync::atomic::Ordering::Relaxed);
            if unreachable {
                tracing::info!("etcd: reachable again");
                unreachable = false;
            }
            if revision == applied || revision == 0 {
                continue;
            }
            applied = revision;
            let (reply, outcome) = tokio::sync::oneshot::channel();
            if commands.send(crate::admin::Command::Reload(reply)).is_err() {
                return;
            }
            let _ = outcome.await;
        }
    });
}

/// One etcd endpoint and the prefix Rampart's keys live under.
pub struct Etcd {
    /// `HOST:PORT`.
    authority: String,
    prefix: String,
}

/// The config as etcd holds it.
pub struct Stored {
    pub text: String,
    /// The revision that last changed the config's key.
    pub mod_revision: i64,
}

/// The last config applied from etcd, kept on disk (`--state-dir`): `etcd-config.toml` and
/// `etcd-revision`, each replaced whole (written aside, then renamed over).
pub struct KeptConfig {
    dir: std::path::PathBuf,
}

impl KeptConfig {
    pub fn in_dir(dir: &std::path::Path) -> KeptConfig {
        KeptConfig { dir: dir.to_path_buf() }
    }

    /// The kept config, if there is one.
    pub fn read(&self) -> Option<Stored> {
        let text = std::fs::read_to_string(self.dir.join("etcd-config.toml")).ok()?;
        let revision = std::fs::read_to_string(self.dir.join("etcd-revision")).ok()?;
        Some(Stored {
            text,
            mod_revision: revision.trim().parse().ok()?,
        })
    }

    /// Keeps `stored` (the revision last, so a kept revision always belongs to its text).
    pub fn write(&self, stored: &Stored) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let replace = |name: &str, bytes: &[u8]| {
            let aside = self.dir.join(format!(".{name}.new"));
            std::fs::write(&aside, bytes)?;
            std::fs::rename(&aside, self.dir.join(name))
        };
        replace("etcd-config.toml", stored.text.as_bytes())?;
        replace("etcd-revision", stored.mod_revision.to_string().as_bytes())
    }
}

/// How a conditioned write ended.
pub enum Written {
    /// The new revision.
    Done(i64),
    /// The key had changed since the expected revision: its revision now (0: no key).
    Conflict(i64),
}

impl Etcd {
    /// The endpoint `url` (`http://HOST:PORT`; TLS to etcd is not supported yet), keys under
    /// `prefix`.
    pub fn new(url: &str, prefix: &str) -> anyhow::Result<Etcd> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("--etcd {url}: give the endpoint as http://HOST:PORT (https is not supported yet)");
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            bail!("--etcd {url}: give the endpoint as http://HOST:PORT");
        }
        Ok(Etcd {
            authority: authority.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The key of the config.
    pub fn config_key(&self) -> String {
        format!("{}config", self.prefix)
    }

    /// The config, if etcd has one, and the store's current revision.
    pub fn get(&self) -> anyhow::Result<(Option<Stored>, i64)> {
        let reply = self.call("/v3/kv/range", &json!({ "key": STANDARD.encode(self.config_key()) }))?;
        let revision = number(&reply["header"]["revision"]);
        let Some(kv) = reply["kvs"].as_array().and_then(|kvs| kvs.first()) else {
            return Ok((None, revision));
        };
        let value = STANDARD
            .decode(kv["value"].as_str().unwrap_or_default())
            .context("etcd sent a value that is not base64")?;
        let text = String::from_utf8(value).context("the config in etcd is not UTF-8")?;
        let stored = Stored {
            text,
            mod_revision: number(&kv["mod_revision"]),
        };
        Ok((Some(stored), revision))
    }

    /// Writes `text` as the config if its key was last changed at `expected` (0: if there is no
    /// key), in one transaction.
    pub fn put_if(&self, text: &str, expected: i64) -> anyhow::Result<Written> {
        let key = STANDARD.encode(self.config_key());
        let request = json!({
            "compare": [{ "key": key, "target": "MOD", "result": "EQUAL", "mod_revision": expected.to_string() }],
            "success": [{ "request_put": { "key": key, "value": STANDARD.encode(text) } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let reply = self.call("/v3/kv/txn", &request)?;
        if reply["succeeded"].as_bool() == Some(true) {
            return Ok(Written::Done(number(&reply["header"]["revision"])));
        }
        let current = reply["responses"][0]["response_range"]["kvs"][0]["mod_revision"].clone();
        Ok(Written::Conflict(number(&current)))
    }

    /// One JSON request to the gateway; its JSON answer.
    fn call(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let body = body.to_string();
        let mut conn = TcpStream::connect(&self.authority).with_context(|| format!("etcd at {}", self.authority))?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        conn.set_write_timeout(Some(TIMEOUT))?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            self.authority,
            body.len()
        );
        conn.write_all(head.as_bytes())?;
        conn.write_all(body.as_bytes())?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw)
            .with_context(|| format!("etcd at {}", self.authority))?;
        let (status, answer) =
            response_body(&raw).ok_or_else(|| anyhow!("etcd at {}: a malformed answer", self.authority))?;
        let json: Value = serde_json::from_slice(&answer)
            .with_context(|| format!("etcd at {}: an answer that is not JSON", self.authority))?;
        if status != 200 {
            let message = json["message"]
                .as_str()
                .or(json["error"].as_str())
                .unwrap_or("no message");
            bail!("etcd at {}: {status}: {message}", self.authority);
        }
        Ok(json)
    }
}

/// The status and body of the HTTP/1.1 response in `raw` (its body by length, chunks or close).
fn response_body(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut fields = Vec::new();
    let head = parse_response(raw, &Limits::default(), false, &mut fields).ok()??;
    let rest = &raw[head.len..];
    let body = match head.framing {
        Framing::None => Vec::new(),
        Framing::Length(n) => rest.get(..n as usize)?.to_vec(),
        Framing::UntilClose => rest.to_vec(),
        Framing::Chunked => {
            let mut body = Vec::new();
            ChunkedDecoder::new()
                .decode(rest, |part| {
                    if let ChunkedPart::Data(data) = part {
                        body.extend_from_slice(data);
                    }
                })
                .ok()?;
            body
        }
    };
    Some((head.status, body))
}

/// An etcd number, which the gateway writes as a string (int64 in JSON); 0 when absent.
fn number(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}
