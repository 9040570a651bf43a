//! Where ACME keeps the account and the certificates, and (for a fleet) the challenge answers
//! every instance gives and the lock that makes one instance order each name.
//!
//! - A directory (`[acme] storage = "/var/lib/rampart/acme"`): `account.json` (the directory URL
//!   and its credentials) and `certs/NAME.pem` / `certs/NAME.key` (a wildcard's `*` written
//!   `_wildcard`, as in `certs/_wildcard.b.example.pem`), written aside and renamed
//!   over, secrets mode 0600. One instance: no lock, answers stay in the process.
//! - A Redis (`storage = "redis://..."`), shared by a fleet: `rampart:acme:account:DIRECTORY`,
//!   `rampart:acme:cert:NAME` (JSON: `chain`, `key`), the lock `rampart:acme:lock:NAME` (`SET NX
//!   PX`, released only by its owner), the lock `rampart:acme:account-lock:DIRECTORY` held while
//!   the fleet's account is made, and the answers in the hashes
//!   `rampart:acme:http-01` (token → key authorization) and `rampart:acme:tls-alpn-01`
//!   (name → SHA-256 of the key authorization, hex), which every instance mirrors.
//! - The etcd the config comes from (`storage = "etcd"`), shared the same way: the same entries
//!   as keys under `PREFIX` + `acme/` ([`Shared`]).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context};
use rampart_config::compile::Leaf;
use rampart_model::acme::AcmeStorage;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::redis::Redis;
use super::shared::Shared;
use crate::etcd::Etcd;

/// A certificate ready to serve, and when it stops being valid.
pub struct Issued {
    pub key: Arc<CertifiedKey>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Issued {
    /// When it is due for renewal: at two thirds of its lifetime.
    pub fn renew_at(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * 2 / 3
    }
}

/// How long an instance may hold a name's order lock (an order takes seconds).
pub(super) const LOCK_FOR: Duration = Duration::from_secs(120);

/// What a fleet's instances answer the CA with, as the shared store holds it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SharedAnswers {
    /// HTTP-01: token → key authorization.
    pub http: Vec<(String, String)>,
    /// TLS-ALPN-01: name → SHA-256 digest of the key authorization.
    pub alpn: Vec<(String, Vec<u8>)>,
}

pub enum Store {
    Dir(PathBuf),
    Shared(Shared),
    /// `storage = "etcd"` in a process whose config does not come from etcd.
    Unavailable(&'static str),
}

/// Why `storage = "etcd"` cannot be used.
const NO_ETCD: &str = "[acme] storage = \"etcd\" is the etcd the config comes from: run with `rampart run --etcd URL`";

impl Store {
    /// The store `storage` names; `etcd` is the config's own etcd client, when the config comes
    /// from etcd.
    pub fn new(storage: &AcmeStorage, etcd: Option<&Arc<Etcd>>) -> Store {
        match (storage, etcd) {
            (AcmeStorage::Dir(dir), _) => Store::Dir(dir.clone()),
            (AcmeStorage::Redis(endpoint), _) => Store::Shared(Shared::Redis(Redis::new(endpoint.clone()))),
            (AcmeStorage::Etcd, Some(etcd)) => Store::Shared(Shared::Etcd(etcd.clone())),
            (AcmeStorage::Etcd, None) => Store::Unavailable(NO_ETCD),
        }
    }

    /// Whether other instances share it (then answers and certificates go through it).
    pub fn shared(&self) -> bool {
        matches!(self, Store::Shared(_))
    }

    /// The account credentials kept for `directory` (JSON), if any.
    pub async fn account(&mut self, directory: &str) -> anyhow::Result<Option<serde_json::Value>> {
        match self {
            Store::Dir(dir) => {
                let Ok(text) = std::fs::read_to_string(dir.join("account.json")) else {
                    return Ok(None);
                };
                let kept: serde_json::Value = serde_json::from_str(&text).context("account.json")?;
                Ok((kept["directory"] == directory).then(|| kept["credentials"].clone()))
            }
            Store::Shared(shared) => match shared.get(&["account", directory]).await? {
                Some(json) => {
                    Ok(Some(serde_json::from_slice(&json).with_context(|| {
                        format!("the account kept in {}", shared.describe())
                    })?))
                }
                None => Ok(None),
            },
            Store::Unavailable(why) => Err(anyhow!(*why)),
        }
    }

    pub async fn keep_account(&mut self, directory: &str, credentials: &serde_json::Value) -> anyhow::Result<()> {
        match self {
            Store::Dir(dir) => {
                let kept = serde_json::json!({ "directory": directory, "credentials": credentials });
                write_file(dir, "account.json", kept.to_string().as_bytes(), true)
            }
            // Another instance may have made one meanwhile: the first kept wins.
            Store::Shared(shared) => {
                shared
                    .set_first(&["account", directory], credentials.to_string().as_bytes())
                    .await
            }
            Store::Unavailable(why) => Err(anyhow!(*why)),
        }
    }

    /// The certificate kept for `name`, if there is one that parses.
    pub async fn certificate(&mut self, name: &str) -> anyhow::Result<Option<Issued>> {
        let (chain, key) = match self {
            Store::Dir(dir) => {
                let name = file_name(name);
                let certs = dir.join("certs");
                let (Ok(chain), Ok(key)) = (
                    std::fs::read(certs.join(format!("{name}.pem"))),
                    std::fs::read(certs.join(format!("{name}.key"))),
                ) else {
                    return Ok(None);
                };
                (chain, key)
            }
            Store::Shared(shared) => {
                let Some(json) = shared.get(&["cert", name]).await? else {
                    return Ok(None);
                };
                let kept: serde_json::Value = serde_json::from_slice(&json)
                    .with_context(|| format!("{name}'s certificate kept in {}", shared.describe()))?;
                let field = |f: &str| kept[f].as_str().unwrap_or_default().as_bytes().to_vec();
                (field("chain"), field("key"))
            }
            Store::Unavailable(why) => return Err(anyhow!(*why)),
        };
        Ok(issued(&chain, &key).ok())
    }

    pub async fn keep_certificate(&mut self, name: &str, chain_pem: &str, key_pem: &str) -> anyhow::Result<()> {
        match self {
            Store::Dir(dir) => {
                let name = file_name(name);
                // The key first: a chain never sits beside a key that is not its own for long.
                write_file(dir, &format!("certs/{name}.key"), key_pem.as_bytes(), true)?;
                write_file(dir, &format!("certs/{name}.pem"), chain_pem.as_bytes(), false)
            }
            Store::Shared(shared) => {
                let value = serde_json::json!({ "chain": chain_pem, "key": key_pem }).to_string();
                shared.set(&["cert", name], value.as_bytes()).await
            }
            Store::Unavailable(why) => Err(anyhow!(*why)),
        }
    }

    /// Takes the lock on ordering `name` for `owner`; `false` when another instance holds it.
    pub async fn lock(&mut self, name: &str, owner: &str) -> anyhow::Result<bool> {
        match self {
            Store::Shared(shared) => shared.lock(&["lock", name], owner, LOCK_FOR).await,
            Store::Dir(_) => Ok(true),
            Store::Unavailable(why) => Err(anyhow!(*why)),
        }
    }

    pub async fn unlock(&mut self, name: &str, owner: &str) -> anyhow::Result<()> {
        let Store::Shared(shared) = self else { return Ok(()) };
        shared.unlock(&["lock", name], owner).await
    }

    /// Takes the lock on making the account at `directory` for `owner` (a fleet makes one).
    pub async fn lock_account(&mut self, directory: &str, owner: &str) -> anyhow::Result<bool> {
        match self {
            Store::Shared(shared) => shared.lock(&["account-lock", directory], owner, LOCK_FOR).await,
            Store::Dir(_) => Ok(true),
            Store::Unavailable(why) => Err(anyhow!(*why)),
        }
    }

    pub async fn unlock_account(&mut self, directory: &str, owner: &str) -> anyhow::Result<()> {
        let Store::Shared(shared) = self else { return Ok(()) };
        shared.unlock(&["account-lock", directory], owner).await
    }

    /// Puts up (or, with `None`, takes down) an HTTP-01 answer for every instance.
    pub async fn http_answer(&mut self, token: &str, key_authorization: Option<&str>) -> anyhow::Result<()> {
        let Store::Shared(shared) = self else { return Ok(()) };
        shared
            .set_entry("http-01", token, key_authorization.map(str::as_bytes))
            .await
    }

    /// Puts up (or takes down) a TLS-ALPN-01 answer for every instance.
    pub async fn alpn_answer(&mut self, name: &str, digest: Option<&[u8]>) -> anyhow::Result<()> {
        let Store::Shared(shared) = self else { return Ok(()) };
        let hex = digest.map(|d| d.iter().map(|b| format!("{b:02x}")).collect::<String>());
        shared
            .set_entry("tls-alpn-01", name, hex.as_deref().map(str::as_bytes))
            .await
    }

    /// Every answer the fleet has up now (none for a directory).
    pub async fn answers(&mut self) -> anyhow::Result<SharedAnswers> {
        let Store::Shared(shared) = self else {
            return Ok(SharedAnswers::default());
        };
        let mut answers = SharedAnswers {
            http: shared.entries("http-01").await?,
            alpn: Vec::new(),
        };
        for (name, hex) in shared.entries("tls-alpn-01").await? {
            if let Some(digest) = unhex(&hex) {
                answers.alpn.push((name, digest));
            }
        }
        answers.http.sort();
        answers.alpn.sort();
        Ok(answers)
    }
}

/// The file name (less its extension) of `name`'s certificate: no `*` in file names.
fn file_name(name: &str) -> String {
    name.replace('*', "_wildcard")
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn write_file(dir: &Path, name: &str, bytes: &[u8], secret: bool) -> anyhow::Result<()> {
    let path = dir.join(name);
    let parent = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).with_context(|| format!("cannot make {}", parent.display()))?;
    let aside = parent.join(format!(
        ".{}.new",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&aside)
        .with_context(|| format!("cannot write {}", aside.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&aside, &path).with_context(|| format!("cannot write {}", path.display()))
}

/// A chain and key in PEM as rustls serves them, with the leaf's dates.
pub fn issued(chain_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<Issued> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("certificate chain: {e}"))?;
    let leaf = chain.first().ok_or_else(|| anyhow!("an empty certificate chain"))?;
    let dates = Leaf::parse(leaf).map_err(|e| anyhow!("certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| anyhow!("private key: {e}"))?;
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).map_err(|e| anyhow!("private key: {e}"))?;
    Ok(Issued {
        key: Arc::new(CertifiedKey::new(chain, signing)),
        not_before: dates.not_before,
        not_after: dates.not_after,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::UNIX_EPOCH;

    use rcgen::{date_time_ymd, CertificateParams, KeyPair};

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[tokio::test]
    async fn a_directory_keeps_the_account_of_one_directory_url_as_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::new(&AcmeStorage::Dir(dir.path().to_path_buf()), None);
        assert!(!store.shared());
        assert_eq!(store.account("https://ca/dir").await.unwrap(), None);
        let credentials = serde_json::json!({ "id": "https://ca/acct/1", "key": "secret" });
        store.keep_account("https://ca/dir", &credentials).await.unwrap();
        assert_eq!(store.account("https://ca/dir").await.unwrap(), Some(credentials));
        // Another CA's account is another account.
        assert_eq!(store.account("https://other-ca/dir").await.unwrap(), None);
        assert_eq!(mode(&dir.path().join("account.json")), 0o600);
    }

    #[tokio::test]
    async fn a_certificate_kept_in_a_directory_comes_back_ready_to_serve_with_its_dates() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::new(&AcmeStorage::Dir(dir.path().to_path_buf()), None);
        assert!(store.certificate("*.b.example").await.unwrap().is_none());
        let mut params = CertificateParams::new(vec!["*.b.example".to_string()]).unwrap();
        params.not_before = date_time_ymd(2025, 1, 1);
        params.not_after = date_time_ymd(2025, 4, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        store
            .keep_certificate("*.b.example", &cert.pem(), &key.serialize_pem())
            .await
            .unwrap();

        // No `*` in file names; the key is a secret, the chain is not.
        let certs = dir.path().join("certs");
        assert_eq!(mode(&certs.join("_wildcard.b.example.key")), 0o600);
        assert_eq!(mode(&certs.join("_wildcard.b.example.pem")), 0o644);
        let issued = store.certificate("*.b.example").await.unwrap().expect("kept");
        let day = Duration::from_secs(86_400);
        // 2025-01-01 and 2025-04-01 (90 days later), in Unix seconds.
        assert_eq!(issued.not_before, UNIX_EPOCH + Duration::from_secs(1_735_689_600));
        assert_eq!(issued.not_after, issued.not_before + day * 90);
        // Renewed at two thirds of its lifetime.
        assert_eq!(issued.renew_at(), issued.not_before + day * 60);
        assert_eq!(issued.key.cert.len(), 1);
    }

    #[tokio::test]
    async fn a_kept_certificate_that_does_not_parse_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "certs/a.example.pem", b"not a certificate", false).unwrap();
        write_file(dir.path(), "certs/a.example.key", b"not a key", true).unwrap();
        let mut store = Store::new(&AcmeStorage::Dir(dir.path().to_path_buf()), None);
        assert!(store.certificate("a.example").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn etcd_storage_without_a_config_from_etcd_says_how_to_have_one() {
        let mut store = Store::new(&AcmeStorage::Etcd, None);
        let error = store.account("https://ca/dir").await.unwrap_err().to_string();
        assert!(error.contains("rampart run --etcd URL"), "{error}");
        assert!(store.lock("a.example", "me").await.is_err());
    }

    #[test]
    fn hex_digests_read_back_and_odd_ones_do_not() {
        assert_eq!(unhex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
