//! Key files of the `jwt` filter, read at config load: PEM public keys and certificates, and
//! HMAC secrets. (JWKS documents are parsed by the model, since the data plane fetches them
//! again at run time.)
//!
//! A PEM file may hold several blocks, each giving one key: `PUBLIC KEY` (SubjectPublicKeyInfo
//! of an RSA, EC P-256/P-384 or Ed25519 key), `RSA PUBLIC KEY` (PKCS#1), or `CERTIFICATE` (its
//! public key is used; its dates and issuer are not checked: it is only a carrier). A private key
//! is refused with a hint, since a verifier needs only the public half. PEM and DER are decoded by
//! x509-parser; errors point at the line of the block's `-----BEGIN`.
//!
//! An HMAC secret is the file's raw bytes, used as they are (a trailing newline is part of the
//! secret: write the file with `printf`, not `echo`); at least 32 bytes.

use rampart_model::filter::jwt::{JwtKey, JwtKeyKind};
use x509_parser::oid_registry::{OID_KEY_TYPE_EC_PUBLIC_KEY, OID_PKCS1_RSAENCRYPTION, OID_SIG_ED25519};
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::public_key::RSAPublicKey;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::error::{ConfigError, ConfigErrors};

/// The curve OIDs of the EC keys Rampart verifies.
const P256: &str = "1.2.840.10045.3.1.7";
const P384: &str = "1.3.132.0.34";

fn error(file: &str, line: usize, message: String) -> ConfigError {
    ConfigError {
        file: file.to_string(),
        line,
        col: 1,
        message,
    }
}

/// The keys of a PEM file's bytes; `file` names it in errors.
pub(crate) fn jwt_keys_from_pem(file: &str, pem: &[u8]) -> Result<Vec<JwtKey>, ConfigErrors> {
    // The line of each `-----BEGIN`, in the order the blocks come.
    let begins: Vec<usize> = pem
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, l)| l.starts_with(b"-----BEGIN "))
        .map(|(i, _)| i + 1)
        .collect();
    let mut keys = Vec::new();
    let mut errors = Vec::new();
    for (i, block) in Pem::iter_from_buffer(pem).enumerate() {
        let line = begins.get(i).copied().unwrap_or(1);
        let block = match block {
            Ok(block) => block,
            Err(e) => {
                errors.push(error(file, line, format!("not a valid PEM block: {e}")));
                break;
            }
        };
        match block_key(&block) {
            Ok(key) => keys.push(key),
            Err(why) => errors.push(error(file, line, why)),
        }
    }
    if errors.is_empty() && keys.is_empty() {
        errors.push(error(
            file,
            1,
            "holds no PEM public key or certificate (-----BEGIN PUBLIC KEY----- or -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    if errors.is_empty() {
        Ok(keys)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The key of one PEM block.
fn block_key(block: &Pem) -> Result<JwtKey, String> {
    let der = block.contents.as_slice();
    match block.label.as_str() {
        "PUBLIC KEY" => {
            let (_, spki) = SubjectPublicKeyInfo::from_der(der).map_err(|e| format!("not a valid public key: {e}"))?;
            spki_key(&spki)
        }
        "CERTIFICATE" => {
            let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("not a valid certificate: {e}"))?;
            spki_key(cert.public_key()).map_err(|e| format!("certificate: {e}"))
        }
        "RSA PUBLIC KEY" => {
            let (_, rsa) = RSAPublicKey::from_der(der).map_err(|e| format!("not a valid RSA public key: {e}"))?;
            JwtKey::rsa(rsa.modulus, rsa.exponent).map_err(|e| e.to_string())
        }
        label if label.contains("PRIVATE KEY") => Err(format!(
            "a private key ({label}); give its public key instead (openssl pkey -in KEY -pubout)"
        )),
        label => Err(format!(
            "a PEM block of type {label:?}, not a public key or certificate"
        )),
    }
}

/// The key of a SubjectPublicKeyInfo: RSA, EC P-256/P-384 or Ed25519.
fn spki_key(spki: &SubjectPublicKeyInfo<'_>) -> Result<JwtKey, String> {
    let algorithm = &spki.algorithm.algorithm;
    let data = spki.subject_public_key.data.as_ref();
    let key = if *algorithm == OID_PKCS1_RSAENCRYPTION {
        let (_, rsa) = RSAPublicKey::from_der(data).map_err(|e| format!("not a valid RSA public key: {e}"))?;
        JwtKey::rsa(rsa.modulus, rsa.exponent)
    } else if *algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .map(|oid| oid.to_id_string());
        let kind = match curve.as_deref() {
            Some(P256) => JwtKeyKind::EcP256,
            Some(P384) => JwtKeyKind::EcP384,
            Some(other) => return Err(format!("EC curve {other} is not supported (P-256 or P-384)")),
            None => return Err("an EC key without a named curve".into()),
        };
        JwtKey::ec(kind, data)
    } else if *algorithm == OID_SIG_ED25519 {
        JwtKey::ed25519(data)
    } else {
        return Err(format!(
            "a key of algorithm {} (RSA, EC P-256/P-384 or Ed25519 are supported)",
            algorithm.to_id_string()
        ));
    };
    key.map_err(|e| e.to_string())
}

/// An HMAC secret: the file's bytes as they are.
pub(crate) fn jwt_hmac_secret(file: &str, secret: &[u8]) -> Result<JwtKey, ConfigErrors> {
    JwtKey::hmac(secret).map_err(|e| {
        let hint = if secret.ends_with(b"\n") {
            " (the trailing newline counts as part of the secret)"
        } else {
            ""
        };
        ConfigErrors(vec![error(file, 1, format!("{e}{hint}"))])
    })
}

#[cfg(test)]
mod tests;
