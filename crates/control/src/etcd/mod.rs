//! The config in etcd: what `rampart push`, `rampart pull` and `rampart run --etcd` need of the
//! etcd v3 API, spoken through its JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`,
//! `/v3/watch`, `/v3/auth/authenticate`; keys and values base64) over plain HTTP/1.1, so the
//! binary carries no gRPC client for four requests.
//!
//! Key layout: the whole TOML config under `PREFIX` + `config` (by default `/rampart/config`),
//! as the operator wrote it. Files it names (includes, certificates, keys) are read by each
//! instance from its own disk.
//!
//! - [`client`]: one request per connection, endpoints tried in turn (the one that answered
//!   last first), and the head of the watch's streaming answer.
//! - [`stream`]: the watch's body, a chunked stream of JSON messages.
//! - [`follow`]: a running instance's watch and the reloads it sends.
//! - [`tls`]: trust roots and client certificate for `https://` endpoints.
//!
//! With credentials (`--etcd-user`), the first request authenticates and the token etcd gives
//! is sent as `Authorization` on each request until etcd refuses it (it expired, or etcd
//! restarted); then it authenticates again, once per refused request.

mod client;
mod follow;
mod kv;
mod stream;
mod tls;

use anyhow::Context;
use arc_swap::ArcSwapOption;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};

use client::{number, Endpoints, Rejected};
pub use follow::follow;
use stream::WatchStream;
pub use tls::TlsFiles;

/// Why a request to etcd failed: the endpoints could not be reached or parsed, etcd refused the
/// request, or its answer was not what the gateway sends. The message names the endpoint and
/// etcd's reason, with its causes (the internals chain errors with anyhow; this type is the
/// public face of that chain).
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct EtcdError(anyhow::Error);

impl From<anyhow::Error> for EtcdError {
    fn from(error: anyhow::Error) -> EtcdError {
        EtcdError(error)
    }
}

/// etcd's endpoints, the prefix Rampart's keys live under, and the credentials to use.
pub struct Etcd {
    endpoints: Endpoints,
    prefix: String,
    credentials: Option<Credentials>,
    /// The token etcd gave for the credentials, until it refuses it.
    token: ArcSwapOption<String>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints.list())
            .field("prefix", &self.prefix)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// A user of etcd's own (`etcdctl user add`), and its password.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials {{ user: {:?}, password: <redacted> }}", self.user)
    }
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
    /// The endpoints `urls` (`http://HOST:PORT` or `https://HOST:PORT`, several separated by
    /// commas, tried in turn; `tls` for the `https` ones), keys under `prefix`.
    pub fn new(urls: &str, prefix: &str, tls: &TlsFiles) -> Result<Etcd, EtcdError> {
        Ok(Etcd {
            endpoints: Endpoints::parse(urls, tls)?,
            prefix: prefix.to_string(),
            credentials: None,
            token: ArcSwapOption::empty(),
        })
    }

    /// The same, authenticating as `credentials` (when given) before the first request.
    pub fn with_credentials(self, credentials: Option<Credentials>) -> Etcd {
        Etcd { credentials, ..self }
    }

    /// The key of the config.
    pub fn config_key(&self) -> String {
        format!("{}config", self.prefix)
    }

    /// The config, if etcd has one, and the store's current revision.
    pub fn get(&self) -> Result<(Option<Stored>, i64), EtcdError> {
        Ok(self.read_config()?)
    }

    fn read_config(&self) -> anyhow::Result<(Option<Stored>, i64)> {
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

    /// The revision that last changed the config (0: there is none), and the store's current
    /// revision: a read of the key without its value.
    pub fn revisions(&self) -> Result<(i64, i64), EtcdError> {
        Ok(self.read_revisions()?)
    }

    fn read_revisions(&self) -> anyhow::Result<(i64, i64)> {
        let request = json!({ "key": STANDARD.encode(self.config_key()), "keys_only": true });
        let reply = self.call("/v3/kv/range", &request)?;
        let changed = number(&reply["kvs"][0]["mod_revision"]);
        Ok((changed, number(&reply["header"]["revision"])))
    }

    /// Writes `text` as the config if its key was last changed at `expected` (0: if there is no
    /// key), in one transaction.
    pub fn put_if(&self, text: &str, expected: i64) -> Result<Written, EtcdError> {
        Ok(self.write_if(text, expected)?)
    }

    fn write_if(&self, text: &str, expected: i64) -> anyhow::Result<Written> {
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

    /// Watches the config's key from revision `from` on: the stream of etcd's answers.
    fn watch(&self, from: i64) -> anyhow::Result<WatchStream> {
        let request = json!({ "create_request": {
            "key": STANDARD.encode(self.config_key()),
            "start_revision": from.to_string(),
        } });
        let token = self.token()?;
        let (conn, rest, endpoint) =
            self.endpoints
                .open_stream("/v3/watch", &request, token.as_deref().map(String::as_str))?;
        Ok(WatchStream::new(conn, rest, endpoint))
    }

    /// One JSON request to the gateway, with the token when there are credentials (fetched
    /// again once when etcd no longer knows the one held).
    fn call(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let token = self.token()?;
        match self.endpoints.call(path, body, token.as_deref().map(String::as_str)) {
            Err(e) if token.is_none() && e.downcast_ref::<Rejected>().is_some_and(Rejected::wants_user) => Err(e
                .context(
                    "etcd has authentication enabled: give --etcd-user USER (the password in \
                 RAMPART_ETCD_PASSWORD or --etcd-password-file)",
                )),
            Err(e) if token.is_some() && e.downcast_ref::<Rejected>().is_some_and(Rejected::is_stale_token) => {
                self.forget_token();
                let token = self.token()?;
                self.endpoints.call(path, body, token.as_deref().map(String::as_str))
            }
            answer => answer,
        }
    }

    /// The token to send: none without credentials, else the one held or a new one.
    fn token(&self) -> anyhow::Result<Option<std::sync::Arc<String>>> {
        let Some(credentials) = &self.credentials else {
            return Ok(None);
        };
        if let Some(token) = self.token.load_full() {
            return Ok(Some(token));
        }
        let request = json!({ "name": credentials.user, "password": credentials.password });
        let reply = self
            .endpoints
            .call("/v3/auth/authenticate", &request, None)
            .with_context(|| format!("etcd: cannot authenticate as {}", credentials.user))?;
        let token = reply["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow::anyhow!("etcd: authenticated as {}, but no token came back", credentials.user))?;
        let token = std::sync::Arc::new(token.to_string());
        self.token.store(Some(token.clone()));
        Ok(Some(token))
    }

    /// Forgets the token held (etcd refused it: expired, or etcd restarted).
    fn forget_token(&self) {
        self.token.store(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_config_reads_back_whole_and_a_partial_one_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptConfig::in_dir(&dir.path().join("state"));
        assert!(kept.read().is_none());
        let stored = Stored {
            text: "[listeners.a]\n".to_string(),
            mod_revision: 42,
        };
        kept.write(&stored).unwrap();
        let back = kept.read().unwrap();
        assert_eq!((back.text.as_str(), back.mod_revision), ("[listeners.a]\n", 42));
        // Nothing is left aside once written.
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["etcd-config.toml", "etcd-revision"]);
        // A revision that is not a number is no kept config.
        std::fs::write(dir.path().join("state/etcd-revision"), "forty-two").unwrap();
        assert!(kept.read().is_none());
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_refused_with_a_public_error() {
        let error = Etcd::new("ftp://127.0.0.1:2379", "/rampart/", &TlsFiles::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--etcd ftp://127.0.0.1:2379: give each endpoint as http://HOST:PORT or https://HOST:PORT"
        );
        let store = Etcd::new("http://127.0.0.1:2379", "/fleet/", &TlsFiles::default()).unwrap();
        assert_eq!(store.config_key(), "/fleet/config");
    }
}
