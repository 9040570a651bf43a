//! Certificates obtained by ACME (RFC 8555), as the data plane sees them: what the control
//! plane's ACME client has published for listeners to serve, and the answers to the CA's
//! HTTP-01 challenges that HTTP listeners give. DNS-01 answers go to a DNS server
//! ([`Dns01Settings`]), not through the data plane. One [`AcmeShared`] outlives every snapshot (a
//! reload keeps it), so a certificate obtained once is served across reloads.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::sign::CertifiedKey;

/// The path prefix of HTTP-01 challenge requests.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Let's Encrypt's production directory, the default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// What the ACME client publishes; read by workers without locks.
#[derive(Default)]
pub struct AcmeShared {
    /// Issued certificates by name (lowercase).
    certificates: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// HTTP-01: the key authorization of each pending token.
    http_tokens: ArcSwap<HashMap<String, String>>,
    /// TLS-ALPN-01: the validation certificate of each name being validated.
    alpn_certificates: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// On-demand TLS: names a handshake asked for that have no certificate yet, for the control
    /// plane to decide on (taken by [`AcmeShared::take_requests`]).
    requests: ArcSwap<Vec<String>>,
    /// On-demand names the control plane said no to, for a while: their handshakes stop waiting.
    denied: ArcSwap<Vec<String>>,
    /// A fleet: where a token this instance does not know is looked up (the store the fleet
    /// shares), so that another instance's answer is given as soon as it is stored.
    http_lookup: ArcSwapOption<Box<dyn Http01Lookup>>,
}

/// Looks up an HTTP-01 token in the store a fleet shares. Implemented by the control plane (the
/// lookup runs there, off the worker: a worker only waits for the answer); `None` when the store
/// has no such token, or does not answer in time.
pub trait Http01Lookup: Send + Sync {
    fn lookup(&self, token: &str) -> Pin<Box<dyn Future<Output = Option<String>> + Send>>;
}

/// Whether `token` can be an ACME token (base64url, RFC 8555 section 8.3): anything else is not
/// looked up.
pub fn is_token(token: &str) -> bool {
    (1..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl std::fmt::Debug for AcmeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeShared")
            .field("certificates", &self.certificates.load().len())
            .field("http_tokens", &self.http_tokens.load().len())
            .field("http_lookup", &self.http_lookup.load().is_some())
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
        let name = name.trim_end_matches('.');
        if let Some(key) = lookup(&certificates, name) {
            return Some(key);
        }
        // A wildcard certificate covers one label.
        let (_, parent) = name.split_once('.')?;
        lookup(&certificates, &format!("*.{parent}"))
    }

    /// Serves `key` for `name` from now on (a handshake under way keeps the one it chose).
    pub fn install(&self, name: &str, key: Arc<CertifiedKey>) {
        self.install_all(&[(name, key)]);
    }

    /// Serves each `(name, certificate)` at once: one copy of the table however many there are
    /// (a start with thousands of kept certificates).
    pub fn install_all(&self, entries: &[(&str, Arc<CertifiedKey>)]) {
        if entries.is_empty() {
            return;
        }
        self.certificates.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.reserve(entries.len());
            for (name, key) in entries {
                next.insert(name.to_ascii_lowercase(), key.clone());
            }
            next
        });
    }

    /// The TLS-ALPN-01 certificate for `name`, while it is being validated.
    pub fn alpn_certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let certificates = self.alpn_certificates.load();
        if certificates.is_empty() {
            return None;
        }
        certificates
            .get(&name.trim_end_matches('.').to_ascii_lowercase())
            .cloned()
    }

    /// Serves `key` to TLS-ALPN-01 validation of `name` (`None`: stops).
    pub fn set_alpn_certificate(&self, name: &str, key: Option<Arc<CertifiedKey>>) {
        self.alpn_certificates.rcu(|current| {
            let mut next = HashMap::clone(current);
            match &key {
                Some(k) => next.insert(name.to_ascii_lowercase(), k.clone()),
                None => next.remove(&name.to_ascii_lowercase()),
            };
            next
        });
    }

    /// On-demand TLS: a handshake for `name` wants a certificate (asked once while pending).
    pub fn request(&self, name: &str) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if self.requests.load().contains(&name) || self.denied(&name) {
            return;
        }
        self.requests.rcu(|current| {
            let mut next = Vec::clone(current);
            if !next.contains(&name) {
                next.push(name.clone());
            }
            next
        });
    }

    /// Whether the control plane said no to an on-demand `name` (lowercase).
    pub fn denied(&self, name: &str) -> bool {
        let denied = self.denied.load();
        !denied.is_empty() && denied.iter().any(|d| d == name)
    }

    /// Says no to (or, with `false`, forgets the refusal of) an on-demand `name`.
    pub fn deny(&self, name: &str, denied: bool) {
        self.denied.rcu(|current| {
            let mut next = Vec::clone(current);
            next.retain(|d| d != name);
            if denied {
                next.push(name.to_string());
            }
            next
        });
    }

    /// The names handshakes asked for since the last call.
    pub fn take_requests(&self) -> Vec<String> {
        if self.requests.load().is_empty() {
            return Vec::new();
        }
        Vec::clone(&self.requests.swap(Arc::new(Vec::new())))
    }

    /// Stops serving the certificates of names not in `names` (a load that dropped them).
    pub fn keep_only(&self, names: &[String]) {
        self.certificates.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.retain(|name, _| names.contains(name));
            next
        });
    }

    /// The key authorization to answer for HTTP-01 `token`, as this instance knows it.
    pub fn http_answer(&self, token: &str) -> Option<String> {
        self.http_tokens.load().get(token).cloned()
    }

    /// The key authorization for HTTP-01 `token`: this instance's, else (in a fleet) the one the
    /// shared store holds, looked up at once rather than waiting for the next mirror.
    pub async fn http_answer_or_lookup(&self, token: &str) -> Option<String> {
        if let Some(known) = self.http_answer(token) {
            return Some(known);
        }
        if !is_token(token) {
            return None;
        }
        let lookup = self.http_lookup.load_full()?;
        let asked = lookup.lookup(token);
        drop(lookup);
        asked.await
    }

    /// Where tokens this instance does not know are looked up (`None`: nowhere).
    pub fn set_http_lookup(&self, lookup: Option<Box<dyn Http01Lookup>>) {
        self.http_lookup.store(lookup.map(Arc::new));
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

/// The entry for `name` (a client's SNI), compared without case and a final dot; allocates only
/// for a name with upper-case letters.
fn lookup(map: &HashMap<String, Arc<CertifiedKey>>, name: &str) -> Option<Arc<CertifiedKey>> {
    let name = name.trim_end_matches('.');
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        map.get(&name.to_ascii_lowercase()).cloned()
    } else {
        map.get(name).cloned()
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
    /// Where the account key and the certificates are kept.
    pub storage: AcmeStorage,
    /// The challenge for names that are not wildcards (`challenge`; HTTP-01 by default).
    /// Wildcards always use DNS-01.
    pub challenge: AcmeChallenge,
    /// `[acme.dns01]`: where DNS-01 answers are published; wildcards need it.
    pub dns01: Option<Dns01Settings>,
    /// `[acme.eab]`: the external account binding a CA may require to make an account (ZeroSSL,
    /// Google Trust Services, a private CA).
    pub eab: Option<ExternalAccount>,
    /// `profile`: the certificate profile to ask for (`shortlived`, ...) when the CA offers it.
    pub profile: Option<String>,
    /// `max_concurrent_orders`: how many names are ordered at once (each name is an order of its
    /// own; the others wait for one to end).
    pub max_concurrent_orders: usize,
}

/// The default of `[acme] max_concurrent_orders`: a fleet with hundreds of names orders them
/// eight at a time, well under the CA's rate limits (Let's Encrypt: 300 new orders per 3 hours
/// per account) and its patience, while a failing or slow name holds up only one slot.
pub const MAX_CONCURRENT_ORDERS: usize = 8;

/// An external account binding (RFC 8555 section 7.3.4): the key identifier and the MAC key the
/// CA gave. Its `Debug` does not show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ExternalAccount {
    pub kid: String,
    /// The HMAC key, decoded (CAs hand it out in base64url).
    pub hmac_key: Vec<u8>,
}

impl fmt::Debug for ExternalAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExternalAccount")
            .field("kid", &self.kid)
            .field("hmac_key", &format_args!("({} bytes)", self.hmac_key.len()))
            .finish()
    }
}

/// How the CA checks that a name is ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcmeChallenge {
    /// A token served at `http://NAME/.well-known/acme-challenge/` by every HTTP listener.
    #[default]
    Http01,
    /// `tls-alpn-01`: the CA connects to port 443 offering ALPN `acme-tls/1`.
    TlsAlpn01,
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

/// Where ACME keeps what it obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeStorage {
    /// A directory of this machine: one instance.
    Dir(PathBuf),
    /// A Redis that a fleet shares: one order per name for all of them (a lock), challenge
    /// answers and certificates seen by every instance.
    Redis(crate::filter::rate_limit::RedisEndpoint),
    /// The etcd the config comes from (`rampart run --etcd`), shared the same way, under the
    /// config's prefix + `acme/`.
    Etcd,
}

impl std::fmt::Display for AcmeStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcmeStorage::Dir(dir) => write!(f, "{}", dir.display()),
            AcmeStorage::Redis(r) => write!(f, "Redis at {}:{}", r.host, r.port),
            AcmeStorage::Etcd => f.write_str("etcd"),
        }
    }
}

/// On-demand TLS on a listener: a certificate is obtained at the first handshake for a name
/// that `allow` covers and, when `ask` is set, that the `ask` URL answers 200 for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemand {
    /// `example.com` (that name) or `*.example.com` (any name below it), lowercase.
    pub allow: Vec<String>,
    /// `http://HOST:PORT/PATH`, asked `GET PATH?domain=NAME`.
    pub ask: Option<String>,
    /// Certificates obtained on demand per minute, for the whole process.
    pub per_minute: u32,
}

impl OnDemand {
    /// Whether `allow` covers `name` (lowercase, no final dot).
    pub fn allows(&self, name: &str) -> bool {
        self.allow.iter().any(|a| match a.strip_prefix("*.") {
            Some(suffix) => {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix)
                    && name[..name.len() - suffix.len()].ends_with('.')
            }
            None => a == name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::tests::key;

    #[test]
    fn on_demand_patterns_cover_names_below_them() {
        let od = OnDemand {
            allow: vec!["*.shops.example".into(), "exact.example".into()],
            ask: None,
            per_minute: 10,
        };
        assert!(od.allows("a.shops.example") && od.allows("a.b.shops.example") && od.allows("exact.example"));
        assert!(!od.allows("shops.example") && !od.allows("xshops.example") && !od.allows("b.exact.example"));
    }

    #[test]
    fn certificates_and_answers_come_and_go() {
        let acme = AcmeShared::default();
        assert!(acme.certificate("a.example").is_none());
        let k = key();
        acme.install("A.example", k.clone());
        for asked in ["a.example", "A.EXAMPLE", "a.example."] {
            assert!(Arc::ptr_eq(&acme.certificate(asked).unwrap(), &k), "{asked}");
        }
        assert!(acme.certificate("b.example").is_none());
        acme.set_http_answer("tok", Some("tok.thumb"));
        assert_eq!(acme.http_answer("tok").as_deref(), Some("tok.thumb"));
        acme.set_http_answer("tok", None);
        assert!(acme.http_answer("tok").is_none());
        acme.set_alpn_certificate("a.example", Some(k.clone()));
        assert!(acme.alpn_certificate("A.example").is_some());
        acme.set_alpn_certificate("a.example", None);
        assert!(acme.alpn_certificate("a.example").is_none());
        acme.request("New.example.");
        acme.request("new.example");
        assert_eq!(acme.take_requests(), ["new.example"]);
        assert!(acme.take_requests().is_empty());
        acme.keep_only(&["b.example".to_string()]);
        assert!(acme.certificate("a.example").is_none());
    }

    /// A store that knows one token.
    struct OneToken;

    impl Http01Lookup for OneToken {
        fn lookup(&self, token: &str) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> {
            let answer = (token == "fleet-tok_3n").then(|| "fleet-tok_3n.thumb".to_string());
            Box::pin(std::future::ready(answer))
        }
    }

    /// The answer of a future that is ready at once.
    fn now<T>(future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("not ready"),
        }
    }

    #[test]
    fn a_token_this_instance_does_not_know_is_looked_up_in_the_fleets_store() {
        let acme = AcmeShared::default();
        assert_eq!(
            now(acme.http_answer_or_lookup("fleet-tok_3n")),
            None,
            "no store: no lookup"
        );
        acme.set_http_lookup(Some(Box::new(OneToken)));
        assert_eq!(
            now(acme.http_answer_or_lookup("fleet-tok_3n")).as_deref(),
            Some("fleet-tok_3n.thumb")
        );
        assert_eq!(now(acme.http_answer_or_lookup("other")), None);
        // Its own answers first; nothing that cannot be a token is asked about.
        acme.set_http_answer("own", Some("own.thumb"));
        assert_eq!(now(acme.http_answer_or_lookup("own")).as_deref(), Some("own.thumb"));
        assert!(!is_token("") && !is_token("a/b") && !is_token("a b") && !is_token(&"a".repeat(257)));
        acme.set_http_lookup(None);
        assert_eq!(now(acme.http_answer_or_lookup("fleet-tok_3n")), None);
    }
}
