//! The certificate a TLS listener shows an ACME CA's TLS-ALPN-01 validation (RFC 8737): self-
//! signed, for the name alone, with the critical `acmeIdentifier` extension holding the SHA-256
//! digest of the key authorization.

use std::sync::Arc;

use anyhow::anyhow;
use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

pub fn validation_certificate(name: &str, digest: &[u8]) -> anyhow::Result<Arc<CertifiedKey>> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der).map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(cert.der().to_vec())],
        signing,
    )))
}
