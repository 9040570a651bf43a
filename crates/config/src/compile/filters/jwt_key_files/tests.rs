use rampart_model::filter::jwt::JwtAlgorithm;

use super::*;

fn messages(e: ConfigErrors) -> Vec<String> {
    e.0.iter().map(|e| e.to_string()).collect()
}

fn key_pair(alg: &'static rcgen::SignatureAlgorithm) -> rcgen::KeyPair {
    rcgen::KeyPair::generate_for(alg).unwrap()
}

#[test]
fn public_keys_of_each_kind_and_certificates_give_keys() {
    let rsa = key_pair(&rcgen::PKCS_RSA_SHA256);
    let p256 = key_pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let p384 = key_pair(&rcgen::PKCS_ECDSA_P384_SHA384);
    let ed = key_pair(&rcgen::PKCS_ED25519);
    let cert = rcgen::CertificateParams::new(vec!["idp.test".to_string()])
        .unwrap()
        .self_signed(&p256)
        .unwrap();
    let pem = format!(
        "RSA key of the issuer\n{}\n{}{}{}{}",
        rsa.public_key_pem(),
        p256.public_key_pem(),
        p384.public_key_pem(),
        ed.public_key_pem(),
        cert.pem()
    );
    let keys = jwt_keys_from_pem("keys.pem", pem.as_bytes()).unwrap();
    let kinds: Vec<_> = keys.iter().map(|k| k.kind()).collect();
    assert_eq!(
        kinds,
        [
            JwtKeyKind::Rsa,
            JwtKeyKind::EcP256,
            JwtKeyKind::EcP384,
            JwtKeyKind::Ed25519,
            JwtKeyKind::EcP256
        ]
    );
    assert!(keys.iter().all(|k| k.kid().is_none() && k.algorithm().is_none()));
    assert!(keys[0].accepts(JwtAlgorithm::PS256) && !keys[0].accepts(JwtAlgorithm::HS256));
}

#[test]
fn a_pkcs1_rsa_public_key_is_read_too() {
    let rsa = key_pair(&rcgen::PKCS_RSA_SHA256);
    // The SPKI's bit string is the PKCS#1 RSAPublicKey.
    let spki = rsa.public_key_der();
    let (_, info) = SubjectPublicKeyInfo::from_der(&spki).unwrap();
    let pkcs1 = info.subject_public_key.data.to_vec();
    let pem = pem_block("RSA PUBLIC KEY", &pkcs1);
    let keys = jwt_keys_from_pem("k", pem.as_bytes()).unwrap();
    assert_eq!(keys[0].kind(), JwtKeyKind::Rsa);
}

/// A PEM block of `label` around `der`.
fn pem_block(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

#[test]
fn private_keys_other_blocks_and_broken_ones_are_refused_at_their_line() {
    let p256 = key_pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let pem = format!(
        "{}{}{}",
        p256.serialize_pem(),
        pem_block("X509 CRL", b"\x30\x00"),
        pem_block("PUBLIC KEY", b"\x30\x03\x02\x01\x00"),
    );
    let got = messages(jwt_keys_from_pem("keys.pem", pem.as_bytes()).unwrap_err());
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(
        got[0],
        "keys.pem:1:1: a private key (PRIVATE KEY); give its public key instead (openssl pkey -in KEY -pubout)"
    );
    assert!(
        got[1].starts_with("keys.pem:6:1: a PEM block of type \"X509 CRL\""),
        "{}",
        got[1]
    );
    assert!(
        got[2].starts_with("keys.pem:9:1: not a valid public key: "),
        "{}",
        got[2]
    );

    let got =
        messages(jwt_keys_from_pem("k", b"-----BEGIN PUBLIC KEY-----\n%%%\n-----END PUBLIC KEY-----\n").unwrap_err());
    assert!(got[0].starts_with("k:1:1: not a valid PEM block: "), "{got:?}");
    let got = messages(jwt_keys_from_pem("k", b"just text\n").unwrap_err());
    assert!(
        got[0].starts_with("k:1:1: holds no PEM public key or certificate"),
        "{got:?}"
    );
}

#[test]
fn unsupported_key_kinds_are_named() {
    // P-521 is outside what the verifier supports; rcgen does not make such keys, so the SPKI is
    // written out: id-ecPublicKey, secp521r1, and a (never used) point.
    let mut spki = vec![0x30, 0x81, 0x9b, 0x30, 0x10];
    spki.extend_from_slice(&[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]);
    spki.extend_from_slice(&[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23]);
    spki.extend_from_slice(&[0x03, 0x81, 0x86, 0x00, 0x04]);
    spki.extend_from_slice(&[7; 132]);
    let got = messages(jwt_keys_from_pem("k", pem_block("PUBLIC KEY", &spki).as_bytes()).unwrap_err());
    assert_eq!(got, ["k:1:1: EC curve 1.3.132.0.35 is not supported (P-256 or P-384)"]);
}

#[test]
fn hmac_secrets_are_raw_bytes_of_at_least_32() {
    let key = jwt_hmac_secret("secret", &[b'x'; 32]).unwrap();
    assert!(key.accepts(JwtAlgorithm::HS512) && !key.accepts(JwtAlgorithm::RS256));
    let got = messages(jwt_hmac_secret("secret", b"short\n").unwrap_err());
    assert_eq!(
        got,
        ["secret:1:1: an HMAC secret needs at least 32 bytes (this one has 6) (the trailing newline counts as part of the secret)"]
    );
}
