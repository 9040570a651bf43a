use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A 2048-bit modulus (top bit set) and exponent 65537: the right shape, never used to verify.
fn rsa_parts() -> (Vec<u8>, Vec<u8>) {
    let mut n = vec![0xC5u8; 256];
    n[255] = 0x01;
    (n, vec![1, 0, 1])
}

#[test]
fn keys_check_their_material_and_go_with_their_own_algorithms_only() {
    assert_eq!(JwtKey::hmac(&[7; 31]).unwrap_err(), JwtKeyError::ShortSecret(31));
    let hmac = JwtKey::hmac(&[7; 32]).unwrap();
    assert!(hmac.accepts(JwtAlgorithm::HS256) && hmac.accepts(JwtAlgorithm::HS512));
    assert!(!hmac.accepts(JwtAlgorithm::RS256));

    let (n, e) = rsa_parts();
    // Leading zeros do not count; 2047 bits is too few.
    let mut padded = vec![0, 0];
    padded.extend_from_slice(&n);
    let rsa = JwtKey::rsa(&padded, &e).unwrap();
    assert!(rsa.accepts(JwtAlgorithm::RS256) && rsa.accepts(JwtAlgorithm::PS512));
    assert!(
        !rsa.accepts(JwtAlgorithm::HS256),
        "an RSA key never verifies an HMAC token"
    );
    let mut short = n.clone();
    short[0] = 0x7F;
    assert_eq!(JwtKey::rsa(&short, &e).unwrap_err(), JwtKeyError::RsaSize(2047));
    assert_eq!(JwtKey::rsa(&n, &[0]).unwrap_err(), JwtKeyError::NoExponent);

    let mut point = vec![4u8];
    point.extend_from_slice(&[9; 64]);
    let p256 = JwtKey::ec(JwtKeyKind::EcP256, &point).unwrap();
    assert!(p256.accepts(JwtAlgorithm::ES256) && !p256.accepts(JwtAlgorithm::ES384));
    assert!(matches!(
        JwtKey::ec(JwtKeyKind::EcP384, &point),
        Err(JwtKeyError::Length { expected: 97, .. })
    ));
    point[0] = 2;
    assert_eq!(
        JwtKey::ec(JwtKeyKind::EcP256, &point[..33]).unwrap_err(),
        JwtKeyError::CompressedPoint
    );
    assert!(JwtKey::ed25519(&[1; 32]).unwrap().accepts(JwtAlgorithm::EdDSA));
    assert!(JwtKey::ed25519(&[1; 31]).is_err());

    // Restricted to one algorithm of its kind, and only of its kind.
    let rs384 = rsa.clone().with_algorithm(JwtAlgorithm::RS384).unwrap();
    assert!(rs384.accepts(JwtAlgorithm::RS384) && !rs384.accepts(JwtAlgorithm::RS256));
    assert!(rsa.with_algorithm(JwtAlgorithm::ES256).is_err());
    // Debug shows no key material.
    let shown = format!("{:?}", JwtKey::hmac(b"0123456789abcdef0123456789abcdef").unwrap());
    assert!(!shown.contains("0123") && !shown.contains("48, 49"), "{shown}");
}

#[test]
fn candidates_follow_the_kid_or_else_the_algorithm() {
    let (n, e) = rsa_parts();
    let rsa = |kid: &str| JwtKey::rsa(&n, &e).unwrap().with_kid(kid);
    let set = JwtKeySet::new(vec![
        rsa("a"),
        JwtKey::hmac(&[1; 32]).unwrap().with_kid("h"),
        rsa("b"),
        rsa("c"),
        rsa("d"),
        rsa("e"),
    ]);
    let kids = |kid, alg| -> Result<Vec<&str>, KeyChoiceError> {
        set.candidates(kid, alg)
            .map(|it| it.map(|k| k.kid().unwrap()).collect())
    };
    assert_eq!(kids(Some("b"), JwtAlgorithm::RS256), Ok(vec!["b"]));
    assert_eq!(kids(Some("zz"), JwtAlgorithm::RS256), Err(KeyChoiceError::UnknownKid));
    // A known kid whose key is of another family: refused, not tried.
    assert_eq!(
        kids(Some("b"), JwtAlgorithm::HS256),
        Err(KeyChoiceError::NoKeyForAlgorithm)
    );
    assert_eq!(
        kids(Some("h"), JwtAlgorithm::RS256),
        Err(KeyChoiceError::NoKeyForAlgorithm)
    );
    // Without a kid: the keys of the family, at most MAX_KEYS_TRIED of them.
    assert_eq!(kids(None, JwtAlgorithm::RS256), Ok(vec!["a", "b", "c", "d"]));
    assert_eq!(kids(None, JwtAlgorithm::HS384), Ok(vec!["h"]));
    assert_eq!(kids(None, JwtAlgorithm::ES256), Err(KeyChoiceError::NoKeyForAlgorithm));

    // Keys without a kid (PEM files, secrets) stand in for any kid the set does not know.
    let unnamed = JwtKeySet::new(vec![
        JwtKey::rsa(&n, &e).unwrap(),
        JwtKey::rsa(&n, &e).unwrap().with_kid("x"),
        JwtKey::hmac(&[1; 32]).unwrap(),
    ]);
    let kinds = |kid, alg| -> Result<Vec<(Option<&str>, JwtKeyKind)>, KeyChoiceError> {
        unnamed
            .candidates(kid, alg)
            .map(|it| it.map(|k| (k.kid(), k.kind())).collect())
    };
    assert_eq!(
        kinds(Some("x"), JwtAlgorithm::RS256),
        Ok(vec![(Some("x"), JwtKeyKind::Rsa)])
    );
    assert_eq!(
        kinds(Some("other"), JwtAlgorithm::RS256),
        Ok(vec![(None, JwtKeyKind::Rsa)])
    );
    assert_eq!(
        kinds(Some("other"), JwtAlgorithm::HS256),
        Ok(vec![(None, JwtKeyKind::Hmac)])
    );
    assert_eq!(
        kinds(Some("x"), JwtAlgorithm::HS256),
        Err(KeyChoiceError::NoKeyForAlgorithm)
    );
    assert_eq!(
        kinds(Some("other"), JwtAlgorithm::EdDSA),
        Err(KeyChoiceError::NoKeyForAlgorithm)
    );
}

#[test]
fn jwks_keeps_the_signature_keys_it_can_use_and_says_why_others_are_left_out() {
    let (n, e) = rsa_parts();
    let doc = format!(
        r#"{{"keys": [
            {{"kty": "RSA", "kid": "r1", "use": "sig", "alg": "RS256", "n": "{n}", "e": "{e}"}},
            {{"kty": "EC", "kid": "e1", "crv": "P-256", "x": "{x32}=", "y": "{x32}"}},
            {{"kty": "EC", "kid": "e2", "crv": "P-384", "x": "{x48}", "y": "{x48}", "key_ops": ["verify"]}},
            {{"kty": "OKP", "kid": "o1", "crv": "Ed25519", "x": "{x32}"}},
            {{"kty": "oct", "kid": "s1", "k": "{k}"}},
            {{"kty": "RSA", "kid": "enc", "use": "enc", "n": "{n}", "e": "{e}"}},
            {{"kty": "EC", "kid": "big", "crv": "P-521", "x": "{x32}", "y": "{x32}"}},
            {{"kty": "OKP", "crv": "Ed448", "x": "{x32}"}},
            {{"kty": "RSA", "kid": "weird-alg", "alg": "RSA-OAEP", "n": "{n}", "e": "{e}"}},
            {{"kty": "RSA", "kid": "mismatch", "alg": "ES256", "n": "{n}", "e": "{e}"}},
            {{"kty": "EC", "kid": "bad-b64", "crv": "P-256", "x": "!!", "y": "{x32}"}},
            {{"kty": "RSA", "kid": "no-e", "n": "{n}"}},
            {{"kty": "oct", "kid": "short", "k": "{short}"}},
            {{"kty": "EC", "kid": "ops", "crv": "P-256", "x": "{x32}", "y": "{x32}", "key_ops": ["encrypt"]}},
            {{"kid": "no-kty"}},
            {{"kty": "XYZ", "kid": "{long}"}},
            "not an object"
        ]}}"#,
        n = b64(&n),
        e = b64(&e),
        x32 = b64(&[3; 32]),
        x48 = b64(&[3; 48]),
        k = b64(&[5; 32]),
        short = b64(&[5; 8]),
        long = "k".repeat(100),
    );
    let set = JwtKeySet::from_jwks(doc.as_bytes()).unwrap();
    let kept: Vec<_> = set.keys().iter().map(|k| (k.kid().unwrap(), k.kind())).collect();
    assert_eq!(
        kept,
        [
            ("r1", JwtKeyKind::Rsa),
            ("e1", JwtKeyKind::EcP256),
            ("e2", JwtKeyKind::EcP384),
            ("o1", JwtKeyKind::Ed25519),
            ("s1", JwtKeyKind::Hmac)
        ]
    );
    assert_eq!(set.keys()[0].algorithm(), Some(JwtAlgorithm::RS256));
    let skipped = set.skipped();
    assert_eq!(skipped.len(), 12, "{skipped:#?}");
    let expect = [
        "key 6 (kid \"enc\"): `use` is \"enc\", not \"sig\"",
        "key 7 (kid \"big\"): EC curve \"P-521\" is not supported",
        "key 8: OKP curve \"Ed448\" is not supported",
        "key 9 (kid \"weird-alg\"): alg \"RSA-OAEP\" is not supported",
        "key 10 (kid \"mismatch\"): algorithm ES256 does not go with an RSA key",
        "key 11 (kid \"bad-b64\"): `x` is not base64url",
        "key 12 (kid \"no-e\"): no `e`",
        "key 13 (kid \"short\"): an HMAC secret needs at least 32 bytes (this one has 8)",
        "key 14 (kid \"ops\"): `key_ops` does not include \"verify\"",
        "key 15 (kid \"no-kty\"): no `kty`",
    ];
    for (got, want) in skipped.iter().zip(expect) {
        assert_eq!(got, want);
    }
    // An untrusted kid is cut short.
    assert_eq!(
        skipped[10],
        format!("key 16 (kid \"{}\"...): kty \"XYZ\" is not supported", "k".repeat(40))
    );
    assert_eq!(skipped[11], "key 17: not a JSON object");
}

#[test]
fn jwks_without_usable_keys_fails_and_says_why() {
    assert!(matches!(JwtKeySet::from_jwks(b"{"), Err(JwksError::NotJson(_))));
    assert!(matches!(JwtKeySet::from_jwks(b"[]"), Err(JwksError::NoKeys)));
    assert!(matches!(
        JwtKeySet::from_jwks(br#"{"keys": {}}"#),
        Err(JwksError::NoKeys)
    ));
    assert_eq!(
        JwtKeySet::from_jwks(br#"{"keys": []}"#).unwrap_err(),
        JwksError::NoUsableKey(vec![])
    );
    let err = JwtKeySet::from_jwks(br#"{"keys": [{"kty": "RSA", "use": "enc"}]}"#).unwrap_err();
    assert_eq!(err.to_string(), "no usable key (key 1: `use` is \"enc\", not \"sig\")");
}

#[test]
fn a_source_publishes_generations_and_wakes_its_fetcher_once_per_request() {
    let source = JwtKeySource::awaiting_fetch();
    assert_eq!(source.generation(), 0);
    assert!(source.current().keys.is_empty());
    // A request before any fetcher is there only raises the flag.
    source.request_refresh();
    assert!(source.take_refresh_request());
    assert!(!source.take_refresh_request());

    let woken = Arc::new(AtomicUsize::new(0));
    let counter = woken.clone();
    source.set_refresh_waker(Some(Box::new(move || {
        counter.fetch_add(1, Ordering::Relaxed);
    })));
    source.request_refresh();
    source.request_refresh();
    source.request_refresh();
    assert_eq!(woken.load(Ordering::Relaxed), 1, "one wake per raised flag");
    assert!(source.refresh_requested());
    assert!(source.take_refresh_request());
    source.request_refresh();
    assert_eq!(woken.load(Ordering::Relaxed), 2);
    source.take_refresh_request();
    source.set_refresh_waker(None);
    source.request_refresh();
    assert_eq!(woken.load(Ordering::Relaxed), 2);

    let set = JwtKeySet::new(vec![JwtKey::hmac(&[1; 32]).unwrap()]);
    assert_eq!(source.publish(set.clone()), 1);
    assert_eq!(source.publish(set), 2);
    assert_eq!(source.generation(), 2);
    let current = source.current();
    assert_eq!((current.generation, current.keys.len()), (2, 1));
    assert_eq!(JwtKeySource::fixed(JwtKeySet::default()).generation(), 1);
}

#[test]
fn endpoints_are_http_or_https_urls() {
    let e = JwksEndpoint::parse("https://idp.example.com/.well-known/jwks.json?v=2").unwrap();
    assert!(e.https);
    assert_eq!((e.host.as_str(), e.port), ("idp.example.com", 443));
    assert_eq!(e.host_header, "idp.example.com");
    assert_eq!(e.path, "/.well-known/jwks.json?v=2");
    let e = JwksEndpoint::parse("http://127.0.0.1:8080").unwrap();
    assert_eq!((e.host.as_str(), e.port, e.path.as_str()), ("127.0.0.1", 8080, "/"));
    assert_eq!(e.host_header, "127.0.0.1:8080");
    let e = JwksEndpoint::parse("http://[::1]:9000/keys").unwrap();
    assert_eq!((e.host.as_str(), e.host_header.as_str()), ("::1", "[::1]:9000"));
    for bad in [
        "ftp://x/",
        "/keys",
        "http://user:pw@host/",
        "http://@/x",
        "not a url",
        "https://",
    ] {
        assert!(JwksEndpoint::parse(bad).is_err(), "{bad}");
    }
    assert!(JwksFetch::new("https://idp.example.com/keys", None).is_err());
    let fetch = JwksFetch::new("http://idp.example.com/keys", None).unwrap();
    assert!(fetch.tls.is_none());
    assert_eq!(fetch.min_refresh, crate::defaults::JWKS_MIN_REFRESH);
}

#[test]
fn settings_start_from_the_defaults() {
    let s = JwtSettings::new(vec![JwtAlgorithm::RS256]);
    assert!(s.require_exp);
    assert_eq!(s.leeway, 60);
    assert_eq!(s.max_token_len, 8192);
    assert!(s.issuers.is_empty() && s.audiences.is_empty() && s.forward.is_empty());
}
