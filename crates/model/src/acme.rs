//! Certificates obtained by ACME (RFC 8555), as the data plane sees them: what the control
//! plane's ACME client has published for listeners to serve, and the answers to the CA's
//! HTTP-01 challenges that HTTP listeners give. DNS-01 answers go to a DNS server
//! ([`Dns01Settings`]), not through the data plane. One [`AcmeShared`] outlives every snapshot (a
//! reload keeps it), so a certificate obtained once is served across reloads.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;

/// The path prefix of HTTP-01 challenge requests.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// Let's Encrypt's production directory, the default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// What the ACME client publishes; read by workers without locks.
#[derive(Default)]
pub struct AcmeShared {
    /// Issued certificates by name (lowercase).
    certificates: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// HTTP-01: the key authorization of each pending token.
    http_tokens: ArcSwap<HashMap<String, String>>,
}

impl std::fmt::Debug for AcmeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeShared")
            .field("certificates", &self.certificates.load().len())
            .field("http_tokens", &self.http_tokens.load().len())
            .finish()
    }
}

impl AcmeShared {
    /// The certificate obtained for `name`, if there is one: its own, else a wildcard's
    /// (`*.b.example` covers `x.b.example`, one label deep).
    pub fn certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let certificates = self.certificates.load();
        if certificates.is_empty() {
            return None;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = certificates.get(&name) {
            return Some(key.clone());
        }
        let (_, parent) = name.split_once('.')?;
        certificates.get(&format!("*.{parent}")).cloned()
    }

    /// Serves `key` for `name` from now on (a handshake under way keeps the one it chose).
    pub fn install(&self, name: &str, key: Arc<CertifiedKey>) {
        self.certificates.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.insert(name.to_ascii_lowercase(), key.clone());
            next
        });
    }

    /// The key authorization to answer for HTTP-01 `token`.
    pub fn http_answer(&self, token: &str) -> Option<String> {
        self.http_tokens.load().get(token).cloned()
    }

    /// Answers `token` with `key_authorization` (`None`: stops answering it).
    pub fn set_http_answer(&self, token: &str, key_authorization: Option<&str>) {
        self.http_tokens.rcu(|current| {
            let mut next = HashMap::clone(current);
            match key_authorization {
                Some(k) => next.insert(token.to_string(), k.to_string()),
                None => next.remove(token),
            };
            next
        });
    }
}

/// The `[acme]` table: where certificates come from and where they are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The CA's directory URL.
    pub directory: String,
    /// Contact addresses (`mailto:` URLs) given when the account is made.
    pub contact: Vec<String>,
    /// A PEM root that the directory's own HTTPS certificate is checked against (a private or
    /// test CA such as Pebble); `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// The directory the account key and the certificates are kept in.
    pub storage: PathBuf,
    /// The challenge for names that are not wildcards (`challenge`; HTTP-01 by default).
    /// Wildcards always use DNS-01.
    pub challenge: AcmeChallenge,
    /// `[acme.dns01]`: where DNS-01 answers are published; wildcards need it.
    pub dns01: Option<Dns01Settings>,
}

/// How the CA checks that a name is ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcmeChallenge {
    /// A token served at `http://NAME/.well-known/acme-challenge/` by every HTTP listener.
    #[default]
    Http01,
    /// A TXT record `_acme-challenge.NAME` published by a dynamic update (RFC 2136).
    Dns01,
}

impl AcmeChallenge {
    /// The challenge for `name`: DNS-01 for a wildcard, else this one.
    pub fn for_name(self, name: &str) -> AcmeChallenge {
        if name.starts_with("*.") {
            AcmeChallenge::Dns01
        } else {
            self
        }
    }
}

/// `[acme.dns01]`: the DNS server that takes dynamic updates (RFC 2136) signed with TSIG
/// (RFC 8945) for the `_acme-challenge` TXT records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns01Settings {
    /// The primary server of the zone (updates are sent there, and the record is checked there).
    pub server: SocketAddr,
    /// The zone to update (lowercase, no final dot); `None`: the zone the server's SOA answer
    /// for the record's name names.
    pub zone: Option<String>,
    pub key: TsigKey,
}

/// A TSIG key as the DNS server knows it. Its `Debug` does not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    /// The key's name (`acme-key.` in BIND's `key "acme-key" { ... }`).
    pub name: String,
    pub algorithm: TsigAlgorithm,
    /// The shared secret (decoded from base64).
    pub secret: Vec<u8>,
}

impl fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &format_args!("({} bytes)", self.secret.len()))
            .finish()
    }
}

/// The HMACs a TSIG key may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsigAlgorithm {
    HmacSha256,
    HmacSha384,
    HmacSha512,
}

impl TsigAlgorithm {
    /// The names accepted in the config (BIND's).
    pub const NAMES: [&'static str; 3] = ["hmac-sha256", "hmac-sha384", "hmac-sha512"];

    pub fn parse(name: &str) -> Option<TsigAlgorithm> {
        match name.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(TsigAlgorithm::HmacSha256),
            "hmac-sha384" => Some(TsigAlgorithm::HmacSha384),
            "hmac-sha512" => Some(TsigAlgorithm::HmacSha512),
            _ => None,
        }
    }
}

impl fmt::Display for TsigAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TsigAlgorithm::HmacSha256 => "hmac-sha256",
            TsigAlgorithm::HmacSha384 => "hmac-sha384",
            TsigAlgorithm::HmacSha512 => "hmac-sha512",
        })
    }
}

/// The names a TLS listener obtains certificates for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeNames {
    pub names: Vec<String>,
}
