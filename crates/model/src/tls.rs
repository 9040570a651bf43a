//! TLS settings in the snapshot: a listener's server configuration with its certificates chosen
//! by SNI, and an upstream's client configuration. The rustls configurations are built once per
//! load by the control plane and shared by every worker (and so are their ticket keys and session
//! cache, which makes a resumed client welcome on any worker).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// TLS on a listener.
pub struct ListenerTls {
    pub config: Arc<rustls::ServerConfig>,
    /// The certificates by name, also installed as `config`'s resolver (kept here to refuse
    /// unknown names before the handshake when `strict_sni` is on).
    pub certificates: Arc<CertificateSet>,
    pub strict_sni: bool,
    /// Time from accept to a finished handshake.
    pub handshake_timeout: Duration,
    /// Request header (lowercase) that carries the verified client certificate, if any. A
    /// client-sent header of that name is always removed.
    pub forward_client_cert: Option<String>,
    /// What each certificate is, for the admin API and metrics (expiry above all).
    pub certificate_info: Vec<CertificateInfo>,
    /// The names whose certificates ACME obtains (`acme = [...]`), served before `certificates`:
    /// lowercase, sorted.
    pub acme_names: Vec<String>,
    /// On-demand TLS, with what ACME publishes (set when `acme_on_demand` is).
    pub on_demand: Option<(crate::acme::OnDemand, Arc<crate::acme::AcmeShared>)>,
}

/// One certificate of a listener as operators need to see it.
#[derive(Debug, Clone)]
pub struct CertificateInfo {
    /// The certificate file as the config names it.
    pub file: String,
    /// The names it serves.
    pub names: Vec<String>,
    /// When it expires.
    pub not_after: std::time::SystemTime,
}

impl CertificateInfo {
    /// Its expiry in Unix seconds.
    pub fn not_after_unix(&self) -> u64 {
        self.not_after
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// Whether it has expired.
    pub fn expired(&self) -> bool {
        self.not_after <= std::time::SystemTime::now()
    }
}

impl ListenerTls {
    /// Whether `name` has a certificate of its own here: a file's, or one of the `acme` names
    /// (whose certificate may not be obtained yet; the handshake then fails).
    pub fn knows(&self, name: Option<&str>) -> bool {
        self.certificates.knows(name)
            || name.is_some_and(|n| {
                let n = n.trim_end_matches('.');
                let lower;
                let n = if n.bytes().any(|b| b.is_ascii_uppercase()) {
                    lower = n.to_ascii_lowercase();
                    &lower
                } else {
                    n
                };
                acme_names_cover(&self.acme_names, n)
                    || self
                        .on_demand
                        .as_ref()
                        .is_some_and(|(_, acme)| acme.certificate(n).is_some())
            })
    }
}

/// Whether `acme_names` (lowercase, sorted) cover `name` (lowercase): itself, or a wildcard one
/// label up (`*.b.example` covers `x.b.example`). Two binary searches, no allocation.
fn acme_names_cover(acme_names: &[String], name: &str) -> bool {
    if acme_names.binary_search_by(|a| a.as_str().cmp(name)).is_ok() {
        return true;
    }
    // `*` sorts before every letter, digit, `-` and `.`: the wildcards come first, in the order
    // of what follows their `*.`.
    let wildcards = &acme_names[..acme_names.partition_point(|a| a.starts_with("*."))];
    name.split_once('.')
        .is_some_and(|(_, parent)| wildcards.binary_search_by(|a| a[2..].cmp(parent)).is_ok())
}

impl fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerTls")
            .field("certificates", &self.certificates)
            .field("strict_sni", &self.strict_sni)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("forward_client_cert", &self.forward_client_cert)
            .finish_non_exhaustive()
    }
}

/// A listener's certificates by the names they serve. Each name may have several (an RSA and an
/// ECDSA one side by side); the client's signature schemes choose among them.
#[derive(Default)]
pub struct CertificateSet {
    /// Exact names, lowercase.
    exact: HashMap<String, Vec<Arc<CertifiedKey>>>,
    /// Wildcards by the suffix after `*.` (lowercase): `*.example.com` is under `example.com`.
    wildcard: HashMap<String, Vec<Arc<CertifiedKey>>>,
    /// For clients that send no name, or one no certificate has.
    default: Vec<Arc<CertifiedKey>>,
}

impl fmt::Debug for CertificateSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut exact: Vec<_> = self.exact.keys().collect();
        exact.sort();
        let mut wildcard: Vec<_> = self.wildcard.keys().collect();
        wildcard.sort();
        f.debug_struct("CertificateSet")
            .field("exact", &exact)
            .field("wildcard", &wildcard)
            .field("default", &self.default.len())
            .finish()
    }
}

impl CertificateSet {
    /// Adds `key` under each of `names` (`*.example.com` for a wildcard). A name given twice
    /// keeps every certificate, in the order added.
    pub fn add(&mut self, names: &[String], key: &Arc<CertifiedKey>) {
        for name in names {
            let name = name.to_ascii_lowercase();
            let (map, name) = match name.strip_prefix("*.") {
                Some(suffix) => (&mut self.wildcard, suffix.to_string()),
                None => (&mut self.exact, name),
            };
            let list = map.entry(name).or_default();
            if !list.iter().any(|k| Arc::ptr_eq(k, key)) {
                list.push(key.clone());
            }
        }
    }

    /// Serves `keys` (each certificate holding the default name) to clients whose name no
    /// certificate has.
    pub fn set_default(&mut self, keys: Vec<Arc<CertifiedKey>>) {
        self.default = keys;
    }

    /// The certificates for `name`: exact beats wildcard (which covers exactly one label).
    pub fn named(&self, name: &str) -> Option<&[Arc<CertifiedKey>]> {
        let name = name.trim_end_matches('.');
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            &lower
        } else {
            name
        };
        if let Some(keys) = self.exact.get(name) {
            return Some(keys);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent).map(Vec::as_slice)
    }

    /// Whether `name` (or the lack of one) has a certificate of its own, not just the default.
    pub fn knows(&self, name: Option<&str>) -> bool {
        name.is_some_and(|n| self.named(n).is_some())
    }

    /// The certificates a client asking for `name` is offered, best first.
    pub fn candidates(&self, name: Option<&str>, strict: bool) -> &[Arc<CertifiedKey>] {
        match name.and_then(|n| self.named(n)) {
            Some(keys) => keys,
            None if strict => &[],
            None => &self.default,
        }
    }
}

/// The rustls resolver over a [`CertificateSet`], and over the certificates ACME obtained for
/// the listener's `acme` names.
#[derive(Debug)]
pub struct SniResolver {
    pub set: Arc<CertificateSet>,
    pub strict: bool,
    /// ACME's certificates, when the listener has `acme` names.
    pub acme: Option<Arc<crate::acme::AcmeShared>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let (Some(acme), Some(name)) = (&self.acme, hello.server_name()) {
            // TLS-ALPN-01 validation offers `acme-tls/1` alone.
            let mut alpn = hello.alpn().into_iter().flatten();
            if alpn.next() == Some(crate::acme::ACME_TLS_ALPN) && alpn.next().is_none() {
                return acme.alpn_certificate(name);
            }
            if let Some(key) = acme.certificate(name) {
                return Some(key);
            }
        }
        let schemes = hello.signature_schemes();
        let candidates = self.set.candidates(hello.server_name(), self.strict);
        // With no key the client can verify, the first one anyway: rustls then refuses the
        // handshake with `handshake_failure`, as for any client with nothing in common.
        candidates
            .iter()
            .find(|k| k.key.choose_scheme(schemes).is_some())
            .or_else(|| candidates.first())
            .cloned()
    }
}

/// TLS to an upstream's targets.
#[derive(Clone)]
pub struct UpstreamTls {
    pub config: Arc<rustls::ClientConfig>,
    /// The configured `sni`: the name every target's certificate is verified against, when set
    /// (else each target's own host name).
    pub sni: Option<TargetTlsName>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("alpn", &self.config.alpn_protocols)
            .finish_non_exhaustive()
    }
}

/// The name a target's certificate is verified against (and sent as SNI when it is a DNS name).
pub type TargetTlsName = ServerName<'static>;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn key() -> Arc<CertifiedKey> {
        // A certificate-less key is enough to tell entries apart by pointer; never used to sign.
        let pair = rcgen::KeyPair::generate().unwrap();
        let der = rustls::pki_types::PrivateKeyDer::Pkcs8(pair.serialize_der().into());
        let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der).unwrap();
        Arc::new(CertifiedKey::new(vec![], signing))
    }

    #[test]
    fn exact_beats_wildcard_and_wildcard_covers_one_label() {
        let (exact, wild, fallback) = (key(), key(), key());
        let mut set = CertificateSet::default();
        set.add(&["api.example.com".into()], &exact);
        set.add(&["*.example.com".into()], &wild);
        set.set_default(vec![fallback.clone()]);
        let first = |name: Option<&str>, strict| set.candidates(name, strict).first().cloned();
        assert!(Arc::ptr_eq(&first(Some("api.example.com"), false).unwrap(), &exact));
        assert!(Arc::ptr_eq(&first(Some("API.Example.com."), false).unwrap(), &exact));
        assert!(Arc::ptr_eq(&first(Some("www.example.com"), false).unwrap(), &wild));
        assert!(Arc::ptr_eq(&first(Some("a.b.example.com"), false).unwrap(), &fallback));
        assert!(Arc::ptr_eq(&first(Some("example.com"), false).unwrap(), &fallback));
        assert!(Arc::ptr_eq(&first(None, false).unwrap(), &fallback));
        assert!(first(Some("other.org"), true).is_none());
        assert!(first(None, true).is_none());
        assert!(set.knows(Some("www.example.com")) && !set.knows(Some("other.org")) && !set.knows(None));
    }

    #[test]
    fn acme_names_cover_themselves_and_one_label_under_a_wildcard() {
        let mut names: Vec<String> = ["b.example", "*.b.example", "*.a-z.example", "a.example", "0.example"]
            .map(String::from)
            .to_vec();
        names.sort();
        for covered in [
            "b.example",
            "a.example",
            "0.example",
            "x.b.example",
            "b.b.example",
            "q.a-z.example",
        ] {
            assert!(acme_names_cover(&names, covered), "{covered}");
        }
        for not in [
            "c.example",
            "x.y.b.example",
            "example",
            "a-z.example",
            "",
            "*.c.example",
        ] {
            assert!(!acme_names_cover(&names, not), "{not}");
        }
        assert!(!acme_names_cover(&[], "a.example"));
    }
}
