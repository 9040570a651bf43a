//! What a TLS connection negotiated, as logs and request headers name it.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use super::TlsSession;

/// A view of a client connection's negotiated parameters (read from rustls, not copied).
#[derive(Debug, Clone, Copy)]
pub struct TlsInfo<'a> {
    pub version: Option<&'static str>,
    pub cipher: Option<&'static str>,
    pub sni: Option<&'a str>,
    pub alpn: Option<&'a [u8]>,
}

impl<'a> TlsInfo<'a> {
    pub(crate) fn of(session: &'a TlsSession) -> TlsInfo<'a> {
        let conn = &session.conn;
        let version = conn.protocol_version().map(|v| match v {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "TLS",
        });
        let sni = match conn {
            rustls::Connection::Server(s) => s.server_name(),
            rustls::Connection::Client(_) => None,
        };
        TlsInfo {
            version,
            cipher: conn.negotiated_cipher_suite().and_then(|s| s.suite().as_str()),
            sni,
            alpn: conn.alpn_protocol(),
        }
    }
}

impl TlsInfo<'_> {
    /// A copy that outlives the connection (for a record written after it closed).
    pub fn to_owned_info(&self) -> OwnedTlsInfo {
        OwnedTlsInfo {
            version: self.version,
            cipher: self.cipher,
            sni: self.sni.map(Box::from),
            alpn: self.alpn.map(Box::from),
        }
    }
}

/// [`TlsInfo`], owned.
#[derive(Debug, Clone)]
pub struct OwnedTlsInfo {
    version: Option<&'static str>,
    cipher: Option<&'static str>,
    sni: Option<Box<str>>,
    alpn: Option<Box<[u8]>>,
}

impl OwnedTlsInfo {
    pub fn view(&self) -> TlsInfo<'_> {
        TlsInfo {
            version: self.version,
            cipher: self.cipher,
            sni: self.sni.as_deref(),
            alpn: self.alpn.as_deref(),
        }
    }
}

/// The verified client certificate as a request header value, in the style of Envoy's
/// `x-forwarded-client-cert`: `Subject="CN=client, O=Example";DNS=client.example.com;URI=spiffe://...`.
/// `None` when the leaf cannot be parsed (rustls has already verified it, so this does not
/// happen in practice).
pub fn client_cert_header(chain: &[CertificateDer<'_>]) -> Option<Box<str>> {
    let leaf = chain.first()?;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(leaf).ok()?;
    let mut out = String::with_capacity(128);
    out.push_str("Subject=\"");
    for c in cert.subject().to_string().chars() {
        // Quotes and control characters cannot appear inside the quoted value.
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            let (key, value) = match name {
                GeneralName::DNSName(d) => ("DNS", d.to_string()),
                GeneralName::URI(u) => ("URI", u.to_string()),
                GeneralName::RFC822Name(e) => ("Email", e.to_string()),
                GeneralName::IPAddress(ip) => match ip.len() {
                    4 => (
                        "IP",
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).ok()?).to_string(),
                    ),
                    16 => (
                        "IP",
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).ok()?).to_string(),
                    ),
                    _ => continue,
                },
                _ => continue,
            };
            if value.bytes().any(|b| b.is_ascii_control() || b == b';' || b == b'"') {
                continue;
            }
            out.push(';');
            out.push_str(key);
            out.push('=');
            out.push_str(&value);
        }
    }
    Some(out.into_boxed_str())
}
