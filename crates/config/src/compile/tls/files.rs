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
        })
    }
}

/// `2026-11-23` (UTC) for messages.
pub fn date(t: SystemTime) -> String {
    let days = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::date;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(date(UNIX_EPOCH), "1970-01-01");
        assert_eq!(date(UNIX_EPOCH + Duration::from_secs(1_795_392_000)), "2026-11-23");
        assert_eq!(date(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29");
    }
}
