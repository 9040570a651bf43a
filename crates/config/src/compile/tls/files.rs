//! Certificate and key files: PEM decoding (rustls-pki-types) and the leaf certificate's names
//! and dates (x509-parser). Nothing here parses X.509 or PEM by hand.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// Reads a PEM file of certificates (a chain, leaf first; or a CA bundle).
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// Reads a PEM private key: PKCS#8, PKCS#1 RSA or SEC1 EC.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            "holds no PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC)".to_string()
        }
        other => format!("not a PEM private key: {other}"),
    })
}

/// What Rampart needs to know of a leaf certificate.
#[derive(Debug)]
pub struct Leaf {
    /// DNS names it serves (subject alternative names; the common name only when it has none).
    pub names: Vec<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The dates as messages show them (`Dec  3 06:20:00 2026 +00:00`).
    pub not_before_text: String,
    pub not_after_text: String,
}

impl Leaf {
    pub fn parse(der: &CertificateDer<'_>) -> Result<Leaf, String> {
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der)
            .map_err(|e| format!("not a valid X.509 certificate: {e}"))?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let GeneralName::DNSName(dns) = name {
                    names.push(dns.to_string());
                }
            }
        }
        if names.is_empty() {
            names.extend(
                cert.subject()
                    .iter_common_name()
                    .filter_map(|cn| cn.as_str().ok())
                    .map(str::to_string),
            );
        }
        let time = |t: x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            if secs >= 0 {
                UNIX_EPOCH + Duration::from_secs(secs as u64)
            } else {
                UNIX_EPOCH
            }
        };
        let validity = cert.validity();
        Ok(Leaf {
            names,
            not_before: time(validity.not_before),
            not_after: time(validity.not_after),
            not_before_text: validity.not_before.to_string(),
            not_after_text: validity.not_after.to_string(),
        })
    }
}
