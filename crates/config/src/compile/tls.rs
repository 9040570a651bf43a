//! Compiling TLS: a listener's certificates, versions, ALPN, resumption and client verification
//! into a rustls server configuration, and an upstream's trust roots and client certificate into
//! a client configuration. Every certificate and key file is read on every load (a reload picks
//! up a file renewed in place even when the config text did not change).

use std::sync::Arc;
use std::time::Duration;

use rampart_model::defaults;
use rampart_model::tls::{CertificateInfo, CertificateSet, ListenerTls, SniResolver, TargetTlsName, UpstreamTls};
use rampart_model::UpstreamProtocol;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::version::{TLS12, TLS13};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawListenerTls, RawUpstreamTls};

pub(crate) mod files;
mod insecure;
#[cfg(test)]
mod tests;

use files::Leaf;

/// The crypto provider every configuration uses (aws-lc-rs; see docs/tls.md).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Certificates expiring sooner than this get a warning at load.
const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

impl Checker<'_> {
    /// The TLS settings of listener `name` bound to `bind`; `http` says what the listener speaks
    /// (ALPN defaults to `http/1.1` only there).
    pub(super) fn listener_tls(
        &mut self,
        name: &str,
        bind: Option<std::net::SocketAddr>,
        raw: &Spanned<RawListenerTls>,
        http: bool,
        h2: bool,
        live: &mut LiveState,
    ) -> Option<Arc<ListenerTls>> {
        let t = raw.get_ref();
        let provider = provider();
        let acme_names = self.acme_names(name, t.acme.as_ref());
        let on_demand = t.acme_on_demand.as_ref().and_then(|od| self.on_demand(name, od));
        let certificates = t.certificates.as_ref().map_or(&[][..], |c| c.get_ref().as_slice());
        if certificates.is_empty() && acme_names.is_empty() && on_demand.is_none() {
            let at = t.certificates.as_ref().map_or(raw.span(), |c| c.span());
            self.error(
                at,
                format!("listener `{name}`: tls needs at least one certificate (or names for `acme` to obtain)"),
            );
        }
        let mut set = CertificateSet::default();
        let mut first_name: Option<String> = None;
        let mut all_names = Vec::new();
        let mut infos = Vec::new();
        for entry in certificates {
            let Some((key, leaf)) = self.certified_key(&entry.get_ref().cert, &entry.get_ref().key, &provider) else {
                continue;
            };
            if leaf.names.is_empty() {
                self.error(
                    entry.get_ref().cert.span(),
                    format!(
                        "certificate {} names no host (no DNS subject alternative name or common name)",
                        entry.get_ref().cert.get_ref()
                    ),
                );
                continue;
            }
            first_name.get_or_insert_with(|| leaf.names[0].clone());
            set.add(&leaf.names, &key);
            all_names.extend(leaf.names.iter().cloned());
            infos.push(CertificateInfo {
                file: entry.get_ref().cert.get_ref().clone(),
                names: leaf.names,
                not_after: leaf.not_after,
            });
        }
        let default_name = match &t.default_certificate {
            Some(d) if set.knows(Some(d.get_ref())) => Some(d.get_ref().clone()),
            // No certificate loaded (each said why): nothing more to say about the default.
            Some(_) if all_names.is_empty() => None,
            Some(d) => {
                self.error(
                    d.span(),
                    format!(
                        "default_certificate `{}` is not a name of any certificate (they serve: {})",
                        d.get_ref(),
                        all_names.join(", ")
                    ),
                );
                None
            }
            None => first_name,
        };
        if let Some(default) = default_name.as_deref().and_then(|n| set.named(n)) {
            set.set_default(default.to_vec());
        }
        let versions = self.min_version(t.min_version.as_ref())?;
        let alpn = match &t.alpn {
            Some(list) => self.alpn(list)?,
            None if h2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            None if http => vec![b"http/1.1".to_vec()],
            None => Vec::new(),
        };
        let handshake_timeout = self.duration(&t.handshake_timeout, defaults::TLS_HANDSHAKE_TIMEOUT);
        let session_cache = match &t.session_cache {
            Some(n) => self.count(n, "session_cache", 0, 10_000_000)?,
            None => defaults::TLS_SESSION_CACHE,
        };
        let verifier = self.client_verifier(t, &provider)?;
        let forward_client_cert = match &t.forward_client_cert {
            Some(h) if !http => {
                self.error(h.span(), "forward_client_cert applies to HTTP listeners only");
                None
            }
            Some(h) if super::wire::is_token(h.get_ref()) => Some(h.get_ref().to_ascii_lowercase()),
            Some(h) => {
                self.error(h.span(), format!("`{}` is not a header name", h.get_ref()));
                None
            }
            None => None,
        };
        if !self.errors.is_empty() {
            return None;
        }
        let strict_sni = t.strict_sni.unwrap_or(false);
        let set = Arc::new(set);
        let builder = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(|e| self.error(raw.span(), format!("listener `{name}`: {e}")))
            .ok()?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let acme = (!acme_names.is_empty() || on_demand.is_some()).then(|| live.acme());
        let mut config = builder.with_cert_resolver(Arc::new(SniResolver {
            set: set.clone(),
            strict: strict_sni,
            acme,
        }));
        config.alpn_protocols = alpn;
        if (!acme_names.is_empty() || on_demand.is_some()) && !config.alpn_protocols.is_empty() {
            // Chosen only by a client that offers nothing else: TLS-ALPN-01 validation. (Not on a
            // listener without ALPN: a list of one would refuse every client that offers some.)
            config.alpn_protocols.push(rampart_model::acme::ACME_TLS_ALPN.to_vec());
        }
        let Some(resumption) = live.tls_resumption(bind, session_cache) else {
            self.error(
                raw.span(),
                format!("listener `{name}`: cannot make session ticket keys"),
            );
            return None;
        };
        if t.session_tickets.unwrap_or(true) {
            config.ticketer = resumption.ticketer;
        }
        config.session_storage = resumption.cache;
        Some(Arc::new(ListenerTls {
            config: Arc::new(config),
            certificates: set,
            strict_sni,
            handshake_timeout,
            forward_client_cert,
            certificate_info: infos,
            acme_names,
            on_demand: on_demand.map(|od| (od, live.acme())),
        }))
    }

    /// Loads one certificate chain and its key, checking that they belong together and that the
    /// certificate's dates (an expired one, or one expiring within 30 days, is a warning).
    fn certified_key(
        &mut self,
        cert: &Spanned<String>,
        key: &Spanned<String>,
        provider: &CryptoProvider,
    ) -> Option<(Arc<CertifiedKey>, Leaf)> {
        let chain = self.read_chain(cert)?;
        let leaf = self.leaf(cert, &chain[0])?;
        let der = self.read_key(key)?;
        let signing = match provider.key_provider.load_private_key(der) {
            Ok(k) => k,
            Err(e) => {
                self.error(key.span(), format!("key {}: {e}", key.get_ref()));
                return None;
            }
        };
        let certified = CertifiedKey::new(chain, signing);
        if let Err(e) = certified.keys_match() {
            let why = match e {
                rustls::Error::InconsistentKeys(_) => "does not match the certificate".to_string(),
                other => other.to_string(),
            };
            self.error(key.span(), format!("key {} {why} {}", key.get_ref(), cert.get_ref()));
            return None;
        }
        Some((Arc::new(certified), leaf))
    }

    /// The leaf certificate's names and validity, with a warning about its dates.
    fn leaf(&mut self, at: &Spanned<String>, der: &CertificateDer<'_>) -> Option<Leaf> {
        let leaf = match Leaf::parse(der) {
            Ok(l) => l,
            Err(e) => {
                self.error(at.span(), format!("certificate {}: {e}", at.get_ref()));
                return None;
            }
        };
        let now = std::time::SystemTime::now();
        let file = at.get_ref();
        if leaf.not_after <= now {
            // As nginx and HAProxy do: an expired certificate is served (clients refuse it, and
            // say why), and it stops nothing else from loading; a failed renewal followed by a
            // restart must not take every other site down.
            self.warn(
                at.span(),
                format!(
                    "certificate {file} EXPIRED on {}: clients will refuse it until it is renewed (it is served meanwhile, and every other site is unaffected)",
                    leaf.not_after_text
                ),
            );
        } else if leaf.not_after.duration_since(now).unwrap_or_default() < EXPIRY_WARNING {
            self.warn(
                at.span(),
                format!("certificate {file} expires on {}", leaf.not_after_text),
            );
        }
        if leaf.not_before > now {
            self.warn(
                at.span(),
                format!("certificate {file} is not valid before {}", leaf.not_before_text),
            );
        }
        Some(leaf)
    }

    fn min_version(&mut self, v: Option<&Spanned<String>>) -> Option<&'static [&'static SupportedProtocolVersion]> {
        static BOTH: [&SupportedProtocolVersion; 2] = [&TLS13, &TLS12];
        static ONLY_13: [&SupportedProtocolVersion; 1] = [&TLS13];
        match v.map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "1.2")) => Some(&BOTH),
            Some((_, "1.3")) => Some(&ONLY_13),
            Some((v, other)) => {
                self.error(
                    v.span(),
                    format!("min_version `{other}` is not supported (expected \"1.2\" or \"1.3\"; TLS 1.0 and 1.1 are not offered)"),
                );
                None
            }
        }
    }

    fn alpn(&mut self, list: &Spanned<Vec<Spanned<String>>>) -> Option<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for p in list.get_ref() {
            match p.get_ref().as_str() {
                "http/1.1" | "http/1.0" => out.push(p.get_ref().as_bytes().to_vec()),
                "h2" => {
                    self.error(p.span(), "ALPN `h2` needs HTTP/2, which Rampart does not speak yet");
                    return None;
                }
                other if !other.is_empty() && other.len() < 256 && other.is_ascii() => {
                    out.push(other.as_bytes().to_vec())
                }
                other => {
                    self.error(p.span(), format!("`{other}` is not an ALPN protocol name"));
                    return None;
                }
            }
        }
        Some(out)
    }

    /// `client_ca` and `client_auth`: who may connect, if certificates are asked for.
    fn client_verifier(
        &mut self,
        t: &RawListenerTls,
        provider: &Arc<CryptoProvider>,
    ) -> Option<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>> {
        let required = match &t.client_auth {
            None => true,
            Some(a) if a.get_ref() == "required" => true,
            Some(a) if a.get_ref() == "optional" => false,
            Some(a) => {
                self.error(
                    a.span(),
                    format!("client_auth `{}` must be \"required\" or \"optional\"", a.get_ref()),
                );
                return None;
            }
        };
        let Some(ca) = &t.client_ca else {
            if let Some(a) = &t.client_auth {
                self.error(
                    a.span(),
                    "client_auth needs client_ca (the CA that signs client certificates)",
                );
                return None;
            }
            return Some(None);
        };
        let roots = self.roots(ca)?;
        let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = if required {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        match builder.build() {
            Ok(v) => Some(Some(v)),
            Err(e) => {
                self.error(ca.span(), format!("client_ca {}: {e}", ca.get_ref()));
                None
            }
        }
    }

    /// A trust store from a PEM file of CA certificates.
    pub(super) fn roots(&mut self, file: &Spanned<String>) -> Option<RootCertStore> {
        let certs = self.read_chain(file)?;
        let mut roots = RootCertStore::empty();
        for c in certs {
            if let Err(e) = roots.add(c) {
                self.error(file.span(), format!("CA file {}: {e}", file.get_ref()));
                return None;
            }
        }
        Some(roots)
    }

    /// TLS to the targets of upstream `name`; also gives each target its verification name.
    pub(super) fn upstream_tls(
        &mut self,
        name: &str,
        raw: &Spanned<RawUpstreamTls>,
        target_names: &[&str],
        protocol: UpstreamProtocol,
    ) -> Option<(UpstreamTls, Vec<TargetTlsName>)> {
        let t = raw.get_ref();
        let provider = provider();
        let verify = t.verify.as_ref().is_none_or(|v| *v.get_ref());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.error(raw.span(), format!("upstream `{name}`: {e}")))
            .ok()?;
        let builder = if !verify {
            let at = t.verify.as_ref().map_or(raw.span(), |v| v.span());
            self.warn(
                at,
                format!("upstream `{name}`: verify = false: target certificates are not checked (anyone on the path can pose as a target)"),
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(insecure::AcceptAnyCertificate(provider.clone())))
        } else {
            let roots = match &t.ca {
                Some(ca) => self.roots(ca)?,
                None => self.system_roots(raw.span()),
            };
            builder.with_root_certificates(roots)
        };
        let mut config = match (&t.cert, &t.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let (certified, _) = self.certified_key(cert, key, &provider)?;
                match builder.with_client_auth_cert(certified.cert.clone(), self.read_key(key)?) {
                    Ok(c) => c,
                    Err(e) => {
                        self.error(key.span(), format!("client key {}: {e}", key.get_ref()));
                        return None;
                    }
                }
            }
            (Some(c), None) | (None, Some(c)) => {
                self.error(c.span(), "a client certificate needs both `cert` and `key`");
                return None;
            }
        };
        // ALPN says which HTTP the target speaks; an explicit list wins.
        config.alpn_protocols = match (&t.alpn, protocol) {
            (Some(list), _) => self.alpn(list)?,
            (None, UpstreamProtocol::H2) => vec![b"h2".to_vec()],
            (None, UpstreamProtocol::Auto) => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            (None, _) => Vec::new(),
        };
        let sni = match &t.sni {
            Some(s) => match ServerName::try_from(s.get_ref().clone()) {
                Ok(n @ ServerName::DnsName(_)) => Some(n),
                _ => {
                    self.error(s.span(), format!("sni `{}` is not a DNS name", s.get_ref()));
                    return None;
                }
            },
            None => None,
        };
        let mut names = Vec::with_capacity(target_names.len());
        for target in target_names {
            match sni.clone().or_else(|| target_tls_name(target)) {
                Some(n) => names.push(n),
                None => {
                    self.error(
                        raw.span(),
                        format!(
                            "upstream `{name}`: target `{target}` has no host name a certificate can carry; set `sni`"
                        ),
                    );
                    return None;
                }
            }
        }
        Some((
            UpstreamTls {
                config: Arc::new(config),
                sni,
            },
            names,
        ))
    }

    /// The system's trust roots; a store that cannot be read is a warning at `at` (every server
    /// would then fail verification, which the logs say).
    pub(super) fn system_roots(&mut self, at: std::ops::Range<usize>) -> RootCertStore {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            self.warn(
                at,
                "no system CA certificates found; set `ca` to the CA that signs the servers' certificates",
            );
        }
        roots
    }

    /// A client configuration for a filter's own `https://` requests (`forward_auth`): trust
    /// roots from `ca` (a PEM file), or the system's; no client certificate, HTTP/1.1.
    pub(super) fn filter_client_tls(
        &mut self,
        ca: Option<&Spanned<String>>,
        at: std::ops::Range<usize>,
    ) -> Option<Arc<ClientConfig>> {
        let roots = match ca {
            Some(ca) => self.roots(ca)?,
            None => self.system_roots(at.clone()),
        };
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| self.error(at, e.to_string()))
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Some(Arc::new(config))
    }
}

/// The name a target's certificate must carry: its host name, or its IP address (for which no
/// SNI is sent).
fn target_tls_name(target: &str) -> Option<TargetTlsName> {
    let host = target.rsplit_once(':').map_or(target, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

/// Per-listener resumption state kept across reloads: ticket keys and the session cache.
#[derive(Clone)]
pub(crate) struct Resumption {
    pub ticketer: Arc<dyn rustls::server::ProducesTickets>,
    pub cache: Arc<dyn rustls::server::StoresServerSessions>,
    pub cache_size: usize,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption")
            .field("cache_size", &self.cache_size)
            .finish()
    }
}

impl Resumption {
    pub fn new(cache_size: usize) -> Option<Resumption> {
        let ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().ok()?;
        let cache: Arc<dyn rustls::server::StoresServerSessions> = if cache_size == 0 {
            Arc::new(rustls::server::NoServerSessionStorage {})
        } else {
            rustls::server::ServerSessionMemoryCache::new(cache_size)
        };
        Some(Resumption {
            ticketer,
            cache,
            cache_size,
        })
    }
}

/// Reading PEM files, each failure an error at the key that names the file.
impl Checker<'_> {
    fn read_chain(&mut self, file: &Spanned<String>) -> Option<Vec<CertificateDer<'static>>> {
        let path = self.path(file);
        match files::read_chain(&path) {
            Ok(c) => {
                for cert in &c {
                    self.note_filter_file(cert);
                }
                Some(c)
            }
            Err(e) => {
                self.error(file.span(), format!("{}: {e}", file.get_ref()));
                None
            }
        }
    }

    fn read_key(&mut self, file: &Spanned<String>) -> Option<PrivateKeyDer<'static>> {
        let path = self.path(file);
        match files::read_key(&path) {
            Ok(k) => Some(k),
            Err(e) => {
                self.error(file.span(), format!("{}: {e}", file.get_ref()));
                None
            }
        }
    }
}
