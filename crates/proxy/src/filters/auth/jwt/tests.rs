//! Tokens signed in the test with keys made in the test, one family after another, and every way
//! a token can be refused.

use std::sync::OnceLock;

use jsonwebtoken::{EncodingKey, Header};
use rampart_model::filter::jwt::{ClaimHeader, JwtKey, JwtKeyKind};
use serde_json::{json, Value};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::RSAPublicKey;

use super::*;

const NOW: u64 = 1_700_000_000;

/// A key pair: what signs (jsonwebtoken) and what verifies (the model's key), and the public key
/// as PEM (for the confusion attempt).
struct Pair {
    signing: EncodingKey,
    verifying: JwtKey,
    public_pem: String,
    public_der: Vec<u8>,
}

fn pair(alg: &'static rcgen::SignatureAlgorithm) -> Pair {
    let kp = rcgen::KeyPair::generate_for(alg).unwrap();
    let private = kp.serialize_pem();
    let raw = kp.public_key_raw();
    let (signing, verifying) = if alg == &rcgen::PKCS_RSA_SHA256 {
        let (_, rsa) = RSAPublicKey::from_der(raw).unwrap();
        (
            EncodingKey::from_rsa_pem(private.as_bytes()).unwrap(),
            JwtKey::rsa(rsa.modulus, rsa.exponent).unwrap(),
        )
    } else if alg == &rcgen::PKCS_ED25519 {
        (
            EncodingKey::from_ed_pem(private.as_bytes()).unwrap(),
            JwtKey::ed25519(raw).unwrap(),
        )
    } else {
        let kind = if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            JwtKeyKind::EcP256
        } else {
            JwtKeyKind::EcP384
        };
        (
            EncodingKey::from_ec_pem(private.as_bytes()).unwrap(),
            JwtKey::ec(kind, raw).unwrap(),
        )
    };
    Pair {
        signing,
        verifying,
        public_pem: kp.public_key_pem(),
        public_der: kp.public_key_der(),
    }
}

/// RSA key generation is slow: two pairs for the whole file.
fn rsa() -> &'static Pair {
    static RSA: OnceLock<Pair> = OnceLock::new();
    RSA.get_or_init(|| pair(&rcgen::PKCS_RSA_SHA256))
}

fn other_rsa() -> &'static Pair {
    static RSA: OnceLock<Pair> = OnceLock::new();
    RSA.get_or_init(|| pair(&rcgen::PKCS_RSA_SHA256))
}

const SECRET: &[u8] = b"an HMAC secret of 32 bytes or more!";

fn hmac_pair() -> Pair {
    Pair {
        signing: EncodingKey::from_secret(SECRET),
        verifying: JwtKey::hmac(SECRET).unwrap(),
        public_pem: String::new(),
        public_der: Vec::new(),
    }
}

fn sign(alg: JwtAlgorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// A token of raw header and payload JSON text, HS256-signed with `SECRET`.
fn raw_hs256(header: &str, payload: &str) -> String {
    let message = format!("{}.{}", b64(header.as_bytes()), b64(payload.as_bytes()));
    let signature = jsonwebtoken::crypto::sign(
        message.as_bytes(),
        &EncodingKey::from_secret(SECRET),
        JwtAlgorithm::HS256,
    )
    .unwrap();
    format!("{message}.{signature}")
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn claims() -> Value {
    json!({"sub": "alice", "iss": "https://idp.test", "aud": "api", "exp": NOW + 600, "nbf": NOW - 10})
}

fn settings(algorithms: &[JwtAlgorithm]) -> JwtSettings {
    let mut s = JwtSettings::new(algorithms.to_vec());
    s.leeway = 30;
    s
}

fn set(keys: Vec<JwtKey>) -> JwtKeySet {
    JwtKeySet::new(keys)
}

#[test]
fn a_token_of_each_family_verifies_with_its_key() {
    let p256 = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let p384 = pair(&rcgen::PKCS_ECDSA_P384_SHA384);
    let ed = pair(&rcgen::PKCS_ED25519);
    let hmac = hmac_pair();
    let cases: [(JwtAlgorithm, &Pair); 11] = [
        (JwtAlgorithm::HS256, &hmac),
        (JwtAlgorithm::HS384, &hmac),
        (JwtAlgorithm::HS512, &hmac),
        (JwtAlgorithm::RS256, rsa()),
        (JwtAlgorithm::RS384, rsa()),
        (JwtAlgorithm::RS512, rsa()),
        (JwtAlgorithm::PS256, rsa()),
        (JwtAlgorithm::PS512, rsa()),
        (JwtAlgorithm::ES256, &p256),
        (JwtAlgorithm::ES384, &p384),
        (JwtAlgorithm::EdDSA, &ed),
    ];
    for (alg, pair) in cases {
        let token = sign(alg, Some("k1"), &claims(), &pair.signing);
        let keys = set(vec![pair.verifying.clone().with_kid("k1")]);
        let verified =
            verify(token.as_bytes(), &settings(&[alg]), &keys, NOW).unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(verified.subject.as_deref(), Some("alice"), "{alg:?}");
        assert_eq!((verified.exp, verified.nbf), (Some(NOW + 600), Some(NOW - 10)));
        // The same key without a kid verifies it too (PEM files and secrets have none).
        let unnamed = set(vec![pair.verifying.clone()]);
        assert!(
            verify(token.as_bytes(), &settings(&[alg]), &unnamed, NOW).is_ok(),
            "{alg:?}"
        );
    }
}

#[test]
fn a_wrong_signature_is_refused() {
    let token = sign(JwtAlgorithm::RS256, None, &claims(), &rsa().signing);
    let s = settings(&[JwtAlgorithm::RS256]);
    // Another key of the same family.
    let keys = set(vec![other_rsa().verifying.clone()]);
    assert_eq!(
        verify(token.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::BadSignature)
    );
    // The right key, but a payload changed after signing.
    let keys = set(vec![rsa().verifying.clone()]);
    assert!(verify(token.as_bytes(), &s, &keys, NOW).is_ok());
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged = b64(json!({"sub": "admin", "exp": NOW + 600}).to_string().as_bytes());
    parts[1] = &forged;
    assert_eq!(
        verify(parts.join(".").as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::BadSignature)
    );
    // A genuine signature, but of another token.
    let other = sign(JwtAlgorithm::RS256, None, &json!({"exp": NOW + 1}), &rsa().signing);
    let (message, _) = token.rsplit_once('.').unwrap();
    let (_, signature) = other.rsplit_once('.').unwrap();
    let swapped = format!("{message}.{signature}");
    assert_eq!(
        verify(swapped.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::BadSignature)
    );
    // Without a kid, each key of the family is tried: the right one second still works.
    let both = set(vec![other_rsa().verifying.clone(), rsa().verifying.clone()]);
    assert!(verify(token.as_bytes(), &s, &both, NOW).is_ok());
}

#[test]
fn exp_and_nbf_hold_with_leeway() {
    let hmac = hmac_pair();
    let keys = set(vec![hmac.verifying.clone()]);
    let s = settings(&[JwtAlgorithm::HS256]);
    let token = |claims: Value| sign(JwtAlgorithm::HS256, None, &claims, &hmac.signing);
    let expired = token(json!({"exp": NOW - 31}));
    assert_eq!(verify(expired.as_bytes(), &s, &keys, NOW), Err(JwtRejection::Expired));
    // Within the 30 s leeway; at exp + leeway exactly it is over.
    let recent = token(json!({"exp": NOW - 29}));
    assert!(verify(recent.as_bytes(), &s, &keys, NOW).is_ok());
    let edge = token(json!({"exp": NOW - 30}));
    assert_eq!(verify(edge.as_bytes(), &s, &keys, NOW), Err(JwtRejection::Expired));
    let early = token(json!({"exp": NOW + 600, "nbf": NOW + 31}));
    assert_eq!(verify(early.as_bytes(), &s, &keys, NOW), Err(JwtRejection::NotYetValid));
    let almost = token(json!({"exp": NOW + 600, "nbf": NOW + 30}));
    assert!(verify(almost.as_bytes(), &s, &keys, NOW).is_ok());
    // Fractional NumericDates are allowed; a string is not a date.
    let fractional = token(json!({"exp": (NOW + 10) as f64 + 0.5}));
    assert_eq!(
        verify(fractional.as_bytes(), &s, &keys, NOW).unwrap().exp,
        Some(NOW + 10)
    );
    let text = token(json!({"exp": "tomorrow"}));
    assert_eq!(verify(text.as_bytes(), &s, &keys, NOW), Err(JwtRejection::Malformed));
    let negative = token(json!({"exp": -5}));
    assert_eq!(
        verify(negative.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::Malformed)
    );
    // exp is required unless the settings say otherwise.
    let forever = token(json!({"sub": "x"}));
    assert_eq!(
        verify(forever.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::MissingClaim)
    );
    let mut lax = s.clone();
    lax.require_exp = false;
    assert_eq!(verify(forever.as_bytes(), &lax, &keys, NOW).unwrap().exp, None);
}

#[test]
fn issuer_audience_and_required_claims_are_checked() {
    let hmac = hmac_pair();
    let keys = set(vec![hmac.verifying.clone()]);
    let mut s = settings(&[JwtAlgorithm::HS256]);
    s.issuers = vec!["https://other.test".into(), "https://idp.test".into()];
    s.audiences = vec!["api".into(), "admin".into()];
    s.required_claims = vec!["sub".into()];
    let check = |claims: Value| {
        verify(
            sign(JwtAlgorithm::HS256, None, &claims, &hmac.signing).as_bytes(),
            &s,
            &keys,
            NOW,
        )
    };
    let base = claims();
    assert!(check(base.clone()).is_ok());
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c[k] = v;
        c
    };
    let without = |k: &str| {
        let mut c = base.clone();
        c.as_object_mut().unwrap().remove(k);
        c
    };
    assert_eq!(
        check(with("iss", json!("https://evil.test"))),
        Err(JwtRejection::WrongIssuer)
    );
    assert_eq!(
        check(with("iss", json!(["https://idp.test"]))),
        Err(JwtRejection::WrongIssuer)
    );
    assert_eq!(check(without("iss")), Err(JwtRejection::MissingClaim));
    assert_eq!(check(with("aud", json!("web"))), Err(JwtRejection::WrongAudience));
    assert_eq!(
        check(with("aud", json!(["web", "mobile"]))),
        Err(JwtRejection::WrongAudience)
    );
    assert!(check(with("aud", json!(["web", "admin"]))).is_ok());
    assert_eq!(check(with("aud", json!(7))), Err(JwtRejection::WrongAudience));
    assert_eq!(check(without("aud")), Err(JwtRejection::MissingClaim));
    assert_eq!(check(without("sub")), Err(JwtRejection::MissingClaim));
    assert_eq!(check(with("sub", Value::Null)), Err(JwtRejection::MissingClaim));
}

#[test]
fn keys_are_chosen_by_kid_and_algorithms_by_the_settings() {
    let p256 = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let keys = set(vec![
        rsa().verifying.clone().with_kid("r1"),
        p256.verifying.clone().with_kid("e1"),
    ]);
    let s = settings(&[JwtAlgorithm::RS256, JwtAlgorithm::ES256]);
    let token = sign(JwtAlgorithm::RS256, Some("r9"), &claims(), &rsa().signing);
    assert_eq!(verify(token.as_bytes(), &s, &keys, NOW), Err(JwtRejection::UnknownKey));
    // The kid of the EC key on an RS256 token: not tried.
    let token = sign(JwtAlgorithm::RS256, Some("e1"), &claims(), &rsa().signing);
    assert_eq!(
        verify(token.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::NoKeyForAlgorithm)
    );
    // The settings allow RS256 and ES256 only.
    let token = sign(
        JwtAlgorithm::ES384,
        Some("e1"),
        &claims(),
        &pair(&rcgen::PKCS_ECDSA_P384_SHA384).signing,
    );
    assert_eq!(
        verify(token.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::AlgorithmNotAllowed)
    );
    let token = sign(JwtAlgorithm::PS256, Some("r1"), &claims(), &rsa().signing);
    assert_eq!(
        verify(token.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::AlgorithmNotAllowed)
    );
    // alg "none", and names that are no algorithm at all.
    for alg in ["none", "None", "RS1", ""] {
        let unsigned = format!(
            "{}.{}.c2ln",
            b64(json!({"alg": alg}).to_string().as_bytes()),
            b64(claims().to_string().as_bytes())
        );
        assert_eq!(
            verify(unsigned.as_bytes(), &s, &keys, NOW),
            Err(JwtRejection::AlgorithmNotAllowed),
            "{alg:?}"
        );
    }
    // An empty set: the JWKS has not arrived yet.
    let token = sign(JwtAlgorithm::RS256, Some("r1"), &claims(), &rsa().signing);
    assert_eq!(
        verify(token.as_bytes(), &s, &set(vec![]), NOW),
        Err(JwtRejection::KeysUnavailable)
    );
    assert!(verify(token.as_bytes(), &s, &keys, NOW).is_ok());
}

#[test]
fn an_rsa_public_key_is_never_an_hmac_secret() {
    // The classic confusion: an HS256 token whose "secret" is the RSA public key the verifier
    // holds, as PEM text or as DER. Even with HS256 allowed, the RSA key is not used for it.
    let s = settings(&[JwtAlgorithm::RS256, JwtAlgorithm::HS256]);
    let keys = set(vec![rsa().verifying.clone().with_kid("r1")]);
    for secret in [rsa().public_pem.as_bytes(), &rsa().public_der] {
        let forged_key = EncodingKey::from_secret(secret);
        for kid in [Some("r1"), None] {
            let token = sign(JwtAlgorithm::HS256, kid, &claims(), &forged_key);
            assert_eq!(
                verify(token.as_bytes(), &s, &keys, NOW),
                Err(JwtRejection::NoKeyForAlgorithm),
                "kid {kid:?}"
            );
            // The forgery is a good HS256 token for whoever takes those bytes as the secret.
            let confused = set(vec![JwtKey::hmac(secret).unwrap()]);
            assert!(verify(token.as_bytes(), &s, &confused, NOW).is_ok());
        }
    }
    // The same for an EC key.
    let p256 = pair(&rcgen::PKCS_ECDSA_P256_SHA256);
    let keys = set(vec![p256.verifying.clone()]);
    let s = settings(&[JwtAlgorithm::ES256, JwtAlgorithm::HS256]);
    let token = sign(
        JwtAlgorithm::HS256,
        None,
        &claims(),
        &EncodingKey::from_secret(p256.public_pem.as_bytes()),
    );
    assert_eq!(
        verify(token.as_bytes(), &s, &keys, NOW),
        Err(JwtRejection::NoKeyForAlgorithm)
    );
}

#[test]
fn malformed_tokens_are_refused_before_any_key_is_tried() {
    let keys = set(vec![JwtKey::hmac(SECRET).unwrap()]);
    let s = settings(&[JwtAlgorithm::HS256]);
    let good = sign(JwtAlgorithm::HS256, None, &claims(), &EncodingKey::from_secret(SECRET));
    let (header, rest) = good.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    let malformed = [
        String::new(),
        "abc".into(),
        format!("{header}.{payload}"),
        format!("{header}.{payload}.{signature}.x"),
        format!("{header}.{payload}."),
        format!("{header}!.{payload}.{signature}"),
        format!("{header}.{payload}*.{signature}"),
        format!("{header}.{payload}.{signature}="),
        format!("{}.{payload}.{signature}", b64(b"not json")),
        format!("{}.{payload}.{signature}", b64(b"[\"HS256\"]")),
        format!("{}.{payload}.{signature}", b64(br#"{"typ":"JWT"}"#)),
        format!("{}.{payload}.{signature}", b64(br#"{"alg":"HS256","kid":7}"#)),
        format!("{}.{payload}.{signature}", b64(br#"{"alg":"HS256","crit":["exp"]}"#)),
        // Signed properly, but the payload is not a JSON object.
        raw_hs256(r#"{"alg":"HS256"}"#, "not json"),
        raw_hs256(r#"{"alg":"HS256"}"#, "[1,2]"),
    ];
    for token in &malformed {
        assert_eq!(
            verify(token.as_bytes(), &s, &keys, NOW),
            Err(JwtRejection::Malformed),
            "{token}"
        );
    }
    let mut bytes = good.clone().into_bytes();
    bytes[3] = 0xff;
    assert_eq!(verify(&bytes, &s, &keys, NOW), Err(JwtRejection::Malformed));
    // The raw signer makes good tokens when given good JSON.
    assert!(verify(
        raw_hs256(r#"{"alg":"HS256"}"#, r#"{"exp":1700000100}"#).as_bytes(),
        &s,
        &keys,
        NOW
    )
    .is_ok());
}

#[test]
fn an_oversized_token_is_refused_before_decoding() {
    let keys = set(vec![JwtKey::hmac(SECRET).unwrap()]);
    let s = settings(&[JwtAlgorithm::HS256]);
    // A valid token with a big claim: fine under the limit, refused over it.
    let big = json!({"exp": NOW + 60, "pad": "x".repeat(5000)});
    let token = sign(JwtAlgorithm::HS256, None, &big, &EncodingKey::from_secret(SECRET));
    assert!(token.len() < s.max_token_len);
    assert!(verify(token.as_bytes(), &s, &keys, NOW).is_ok());
    let mut small = s.clone();
    small.max_token_len = token.len() - 1;
    assert_eq!(verify(token.as_bytes(), &small, &keys, NOW), Err(JwtRejection::TooLong));
    // Garbage over the limit says too_long, not malformed: nothing was decoded.
    let garbage = vec![b'!'; s.max_token_len + 1];
    assert_eq!(verify(&garbage, &s, &keys, NOW), Err(JwtRejection::TooLong));
}

#[test]
fn forwarded_claims_become_header_text_or_say_why_not() {
    let keys = set(vec![JwtKey::hmac(SECRET).unwrap()]);
    let mut s = settings(&[JwtAlgorithm::HS256]);
    let names = [
        "email", "uid", "admin", "groups", "address", "mixed", "evil", "gone", "nil",
    ];
    s.forward = names
        .iter()
        .map(|c| ClaimHeader {
            claim: c.to_string(),
            header: format!("x-{c}"),
        })
        .collect();
    let claims = json!({
        "exp": NOW + 60,
        "email": "a@example.com",
        "uid": 12345,
        "admin": true,
        "groups": ["dev", "ops"],
        "address": {"city": "Paris"},
        "mixed": ["dev", 1],
        "evil": "x\r\nx-admin: true",
        "nil": null,
    });
    let token = sign(JwtAlgorithm::HS256, None, &claims, &EncodingKey::from_secret(SECRET));
    let verified = verify(token.as_bytes(), &s, &keys, NOW).unwrap();
    let text = |s: &str| ClaimValue::Text(s.into());
    assert_eq!(
        &*verified.claims,
        [
            text("a@example.com"),
            text("12345"),
            text("true"),
            text("dev,ops"),
            ClaimValue::NotForwardable("an object"),
            ClaimValue::NotForwardable("an array of other than strings"),
            ClaimValue::NotForwardable("control characters"),
            ClaimValue::Absent,
            ClaimValue::Absent,
        ]
    );
    assert_eq!(verified.subject, None);
}

#[test]
fn reasons_are_short_names_that_match_the_display() {
    let all = [
        (JwtRejection::TooLong, "too_long"),
        (JwtRejection::Malformed, "malformed"),
        (JwtRejection::AlgorithmNotAllowed, "algorithm_not_allowed"),
        (JwtRejection::UnknownKey, "unknown_key"),
        (JwtRejection::NoKeyForAlgorithm, "no_key_for_algorithm"),
        (JwtRejection::KeysUnavailable, "keys_unavailable"),
        (JwtRejection::BadSignature, "bad_signature"),
        (JwtRejection::Expired, "expired"),
        (JwtRejection::NotYetValid, "not_yet_valid"),
        (JwtRejection::WrongIssuer, "wrong_issuer"),
        (JwtRejection::WrongAudience, "wrong_audience"),
        (JwtRejection::MissingClaim, "missing_claim"),
    ];
    for (rejection, reason) in all {
        assert_eq!(rejection.reason(), reason);
        assert_eq!(rejection.to_string(), reason);
    }
}
