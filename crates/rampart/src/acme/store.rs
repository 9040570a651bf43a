//! What ACME keeps on disk under `[acme] storage`: the account (`account.json`: the directory
//! it belongs to and its credentials) and each name's certificate (`certs/NAME.pem`, the chain
//! leaf first, and `certs/NAME.key`; a wildcard's `*` is written `_wildcard`, as in
//! `certs/_wildcard.b.example.pem`). Files are written aside and renamed over, keys mode 0600.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{anyhow, Context};
use rampart_config::compile::Leaf;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A certificate ready to serve, and when it stops being valid.
pub struct Issued {
    pub key: Arc<CertifiedKey>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: &Path) -> Store {
        Store { dir: dir.to_path_buf() }
    }

    /// The account credentials kept for `directory` (JSON), if any.
    pub fn account(&self, directory: &str) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("account.json")).ok()?;
        let kept: serde_json::Value = serde_json::from_str(&text).ok()?;
        (kept["directory"] == directory).then(|| kept["credentials"].clone())
    }

    pub fn keep_account(&self, directory: &str, credentials: &serde_json::Value) -> anyhow::Result<()> {
        let kept = serde_json::json!({ "directory": directory, "credentials": credentials });
        self.write("account.json", kept.to_string().as_bytes(), true)
    }

    /// The certificate kept for `name`, if there is one that parses.
    pub fn certificate(&self, name: &str) -> Option<Issued> {
        let name = file_name(name);
        let chain = std::fs::read(self.dir.join("certs").join(format!("{name}.pem"))).ok()?;
        let key = std::fs::read(self.dir.join("certs").join(format!("{name}.key"))).ok()?;
        issued(&chain, &key).ok()
    }

    pub fn keep_certificate(&self, name: &str, chain_pem: &str, key_pem: &str) -> anyhow::Result<()> {
        let name = file_name(name);
        // The key first: a chain never sits beside a key that is not its own for long.
        self.write(&format!("certs/{name}.key"), key_pem.as_bytes(), true)?;
        self.write(&format!("certs/{name}.pem"), chain_pem.as_bytes(), false)
    }

    fn write(&self, name: &str, bytes: &[u8], secret: bool) -> anyhow::Result<()> {
        let path = self.dir.join(name);
        let parent = path.parent().unwrap_or(&self.dir);
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
}

/// The file name (less its extension) of `name`'s certificate: no `*` in file names.
fn file_name(name: &str) -> String {
    name.replace('*', "_wildcard")
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
