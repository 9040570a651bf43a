//! The `jwt` filter end to end through the real binary: tokens signed in the test with every
//! algorithm Rampart verifies (keys made in the test, read from PEM files and a secret file),
//! every way a token is refused (401 with a short reason, nothing of the token in the log),
//! claims forwarded upstream, where tokens are looked for, and a JWKS served by a test server
//! that rotates its keys.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::http::{header, send};
use common::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const SECRET: &[u8] = b"a shared HMAC secret, 32 bytes or more";

/// A signing key made in the test, with its public half as PEM.
struct Signer {
    key: EncodingKey,
    public_pem: String,
    /// The public key's raw bytes (an EC point, an Ed25519 key).
    public_raw: Vec<u8>,
}

fn signer(alg: &'static rcgen::SignatureAlgorithm) -> Signer {
    let kp = rcgen::KeyPair::generate_for(alg).unwrap();
    let private = kp.serialize_pem();
    let key = if alg == &rcgen::PKCS_RSA_SHA256 {
        EncodingKey::from_rsa_pem(private.as_bytes()).unwrap()
    } else if alg == &rcgen::PKCS_ED25519 {
        EncodingKey::from_ed_pem(private.as_bytes()).unwrap()
    } else {
        EncodingKey::from_ec_pem(private.as_bytes()).unwrap()
    };
    Signer {
        key,
        public_pem: kp.public_key_pem(),
        public_raw: kp.public_key_raw().to_vec(),
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn token(alg: Algorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    encode(&header, claims, key).unwrap()
}

fn claims(sub: &str) -> Value {
    json!({ "sub": sub, "exp": now() + 600, "iss": "https://idp.test", "aud": "api", "role": "admin" })
}

/// A gateway whose routes are `routes` (TOML), `files` beside its config.
fn gateway(files: &[(&str, &[u8])], routes: &str) -> FilterGateway {
    filter_gateway(files, "", routes)
}

fn get(port: u16, path: &str, extra: &str) -> (u16, String, String) {
    let mut client = connect(port);
    let raw = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
    let (status, head, body) = send(&mut client, raw.as_bytes());
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

fn bearer(t: &str) -> String {
    format!("Authorization: Bearer {t}\r\n")
}

#[test]
fn tokens_of_every_algorithm_are_verified_and_their_claims_forwarded() {
    let rsa = signer(&rcgen::PKCS_RSA_SHA256);
    let p256 = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let p384 = signer(&rcgen::PKCS_ECDSA_P384_SHA384);
    let ed = signer(&rcgen::PKCS_ED25519);
    let gw = gateway(
        &[
            ("secret.key", SECRET),
            ("rsa.pem", rsa.public_pem.as_bytes()),
            ("ec.pem", format!("{}{}", p256.public_pem, p384.public_pem).as_bytes()),
            ("ed.pem", ed.public_pem.as_bytes()),
        ],
        "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{ type = \"jwt\", \
         keys = [\"secret.key\", \"rsa.pem\", \"ec.pem\", \"ed.pem\"], issuer = \"https://idp.test\", \
         audiences = [\"api\", \"other\"], forward_claims = { sub = \"x-user\", role = \"x-role\", team = \"x-team\" } }]\n",
    );
    let hmac = EncodingKey::from_secret(SECRET);
    let cases: [(Algorithm, &EncodingKey); 12] = [
        (Algorithm::HS256, &hmac),
        (Algorithm::HS384, &hmac),
        (Algorithm::HS512, &hmac),
        (Algorithm::RS256, &rsa.key),
        (Algorithm::RS384, &rsa.key),
        (Algorithm::RS512, &rsa.key),
        (Algorithm::PS256, &rsa.key),
        (Algorithm::PS384, &rsa.key),
        (Algorithm::PS512, &rsa.key),
        (Algorithm::ES256, &p256.key),
        (Algorithm::ES384, &p384.key),
        (Algorithm::EdDSA, &ed.key),
    ];
    for (i, (alg, key)) in cases.iter().enumerate() {
        let sub = format!("user-{alg:?}");
        let t = token(*alg, None, &claims(&sub), key);
        // A client's own x-team is dropped: the token has no `team`.
        let (status, _, body) = get(gw.port, &format!("/{i}"), &format!("{}X-Team: forged\r\n", bearer(&t)));
        assert_eq!(status, 200, "{alg:?}: {body}");
        let upstream = gw.backend.next_head().to_ascii_lowercase();
        assert!(
            upstream.contains(&format!("x-user: {}", sub.to_ascii_lowercase())),
            "{upstream}"
        );
        assert!(upstream.contains("x-role: admin"), "{upstream}");
        assert!(!upstream.contains("x-team"), "{upstream}");
        // The token still goes upstream (strip_token is off).
        assert!(upstream.contains("authorization: bearer"), "{upstream}");
    }
    let lines = json_log_lines(&gw.log, cases.len());
    for (line, (alg, _)) in lines.iter().zip(&cases) {
        assert_eq!(line["status"], 200);
        assert_eq!(line["user"], format!("user-{alg:?}").as_str());
    }
    // The same token again is served from the cache (still 200, the claims still forwarded).
    let t = token(Algorithm::ES256, None, &claims("again"), &p256.key);
    for _ in 0..3 {
        assert_eq!(get(gw.port, "/again", &bearer(&t)).0, 200);
        assert!(gw.backend.next_head().to_ascii_lowercase().contains("x-user: again"));
    }
}

#[test]
fn bad_tokens_get_401_with_a_short_reason_and_nothing_of_the_token_in_the_log() {
    let rsa = signer(&rcgen::PKCS_RSA_SHA256);
    let other = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let gw = gateway(
        &[("rsa.pem", rsa.public_pem.as_bytes())],
        "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{ type = \"jwt\", \
         keys = \"rsa.pem\", issuer = \"https://idp.test\", audience = \"api\", leeway = \"0s\", \
         realm = \"shop\" }]\n",
    );
    let good = |c: &Value| token(Algorithm::RS256, None, c, &rsa.key);
    let mut expired = claims("a");
    expired["exp"] = json!(now() - 120);
    let mut early = claims("a");
    early["nbf"] = json!(now() + 3600);
    let mut wrong_iss = claims("a");
    wrong_iss["iss"] = json!("https://evil.test");
    let mut wrong_aud = claims("a");
    wrong_aud["aud"] = json!("billing");
    let mut no_exp = claims("a");
    no_exp.as_object_mut().unwrap().remove("exp");
    let valid = good(&claims("a"));
    let (head_b64, payload_b64, _) = {
        let mut p = valid.split('.');
        (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
    };
    // The signature of another key over the same header and payload.
    let forged_sig = token(Algorithm::ES256, None, &claims("a"), &other.key);
    let tampered = format!(
        "{head_b64}.{}.{}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims("root")).unwrap()),
        valid.rsplit('.').next().unwrap()
    );
    let none_alg = format!(
        "{}.{payload_b64}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#)
    );
    // The classic confusion: HS256 signed with the RSA public key as the secret.
    let confused = token(
        Algorithm::HS256,
        None,
        &claims("a"),
        &EncodingKey::from_secret(rsa.public_pem.as_bytes()),
    );
    let cases: Vec<(String, &str)> = vec![
        (good(&expired), "jwt_expired"),
        (good(&early), "jwt_not_yet_valid"),
        (good(&wrong_iss), "jwt_wrong_issuer"),
        (good(&wrong_aud), "jwt_wrong_audience"),
        (good(&no_exp), "jwt_missing_claim"),
        (tampered.clone(), "jwt_bad_signature"),
        (forged_sig.clone(), "jwt_no_key_for_algorithm"),
        (none_alg, "jwt_malformed"),
        (confused.clone(), "jwt_no_key_for_algorithm"),
        ("not-a-token".into(), "jwt_malformed"),
        ("a.b.c".into(), "jwt_malformed"),
        ("x".repeat(9000), "jwt_too_long"),
    ];
    for (t, reason) in &cases {
        let (status, head, body) = get(gw.port, "/", &bearer(t));
        assert_eq!(status, 401, "{reason}: {body}");
        let challenge = header(&head, "www-authenticate").expect("a challenge");
        assert!(
            challenge.starts_with("Bearer realm=\"shop\", error=\"invalid_token\""),
            "{challenge}"
        );
        assert!(body.len() < 80, "a short reason: {body}");
    }
    // No token at all, and a token under another scheme.
    for extra in ["", "Authorization: Basic dXNlcjpwYXNz\r\n"] {
        let (status, head, _) = get(gw.port, "/", extra);
        assert_eq!(status, 401);
        assert_eq!(header(&head, "www-authenticate"), Some("Bearer realm=\"shop\""));
    }
    // The good token passes.
    assert_eq!(get(gw.port, "/", &bearer(&valid)).0, 200);
    let lines = json_log_lines(&gw.log, cases.len() + 3);
    for (line, (_, reason)) in lines.iter().zip(&cases) {
        assert_eq!(line["status"], 401);
        assert_eq!(line["error"], *reason);
    }
    assert_eq!(lines[cases.len()]["error"], "jwt_missing");
    let text = std::fs::read_to_string(&gw.log).unwrap() + &gw.proxy.log.join("\n");
    for secret_part in [
        valid.rsplit('.').next().unwrap(),
        forged_sig.rsplit('.').next().unwrap(),
        confused.rsplit('.').next().unwrap(),
    ] {
        assert!(!text.contains(secret_part), "a signature in the logs");
    }
    assert!(
        gw.backend.heads.try_recv().is_ok(),
        "the good request reached the backend"
    );
    assert!(
        gw.backend.heads.try_recv().is_err(),
        "no refused request reached the backend"
    );
}

#[test]
fn tokens_are_found_in_the_configured_places_and_stripped_when_asked() {
    let gw = gateway(
        &[("secret.key", SECRET)],
        "[[listeners.gw.routes]]\nname = \"q\"\nmatch = { path_prefix = \"/q\" }\nupstream = \"app\"\n\
         filters = [{ type = \"jwt\", keys = \"secret.key\", header = \"\", query = \"access_token\", cookie = \"session\" }]\n\n\
         [[listeners.gw.routes]]\nname = \"h\"\nupstream = \"app\"\n\
         filters = [{ type = \"jwt\", keys = \"secret.key\", header = \"X-Token\", strip_token = true }]\n",
    );
    let t = token(Algorithm::HS256, None, &claims("q"), &EncodingKey::from_secret(SECRET));
    assert_eq!(get(gw.port, &format!("/q?a=1&access_token={t}"), "").0, 200);
    gw.backend.next_head();
    assert_eq!(
        get(gw.port, "/q", &format!("Cookie: theme=dark; session={t}\r\n")).0,
        200
    );
    gw.backend.next_head();
    // The query route ignores the Authorization header.
    assert_eq!(get(gw.port, "/q", &bearer(&t)).0, 401);
    // A custom header, with or without the scheme, taken off the upstream request.
    for value in [t.clone(), format!("Bearer {t}")] {
        assert_eq!(get(gw.port, "/h", &format!("X-Token: {value}\r\n")).0, 200);
        let upstream = gw.backend.next_head().to_ascii_lowercase();
        assert!(!upstream.contains("x-token"), "{upstream}");
    }
}

/// A JWKS endpoint: answers every GET with the current document; `publish` swaps it.
struct JwksServer {
    port: u16,
    publish: Sender<String>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    fn start(document: String) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (publish, updates) = channel::<String>();
        let fetches = Arc::new(AtomicUsize::new(0));
        let count = fetches.clone();
        std::thread::spawn(move || {
            let mut document = document;
            for mut conn in listener.incoming().flatten() {
                while let Ok(newer) = updates.try_recv() {
                    document = newer;
                }
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                count.fetch_add(1, Ordering::SeqCst);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{document}",
                    document.len()
                );
            }
        });
        JwksServer { port, publish, fetches }
    }
}

/// A JWKS entry for an EC P-256 public key (raw point `04 || x || y`).
fn ec_jwk(kid: &str, raw: &[u8]) -> Value {
    json!({ "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65]) })
}

fn ed_jwk(kid: &str, raw: &[u8]) -> Value {
    json!({ "kty": "OKP", "crv": "Ed25519", "kid": kid, "x": URL_SAFE_NO_PAD.encode(raw) })
}

#[test]
fn a_jwks_is_fetched_and_followed_through_a_key_rotation() {
    let k1 = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let k2 = signer(&rcgen::PKCS_ED25519);
    let jwks = JwksServer::start(json!({ "keys": [ec_jwk("k1", &k1.public_raw)] }).to_string());
    let mut gw = gateway(
        &[],
        &format!(
            "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", \
             jwks_url = \"http://127.0.0.1:{}/.well-known/jwks.json\", jwks_refresh = \"1s\" }}]\n",
            jwks.port
        ),
    );
    gw.proxy.wait_for("JWKS key set loaded");
    let t1 = token(Algorithm::ES256, Some("k1"), &claims("one"), &k1.key);
    let t2 = token(Algorithm::EdDSA, Some("k2"), &claims("two"), &k2.key);
    assert_eq!(get(gw.port, "/", &bearer(&t1)).0, 200);
    // k2 is not published yet: unknown.
    assert_eq!(get(gw.port, "/", &bearer(&t2)).0, 401);
    // The issuer rotates: k2 in, k1 out. The proxy follows at its next fetch (on schedule, or
    // early: a token with an unknown kid asks for one).
    jwks.publish
        .send(json!({ "keys": [ed_jwk("k2", &k2.public_raw)] }).to_string())
        .unwrap();
    let fetched = jwks.fetches.load(Ordering::SeqCst);
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, _, _) = get(gw.port, "/", &bearer(&t2));
        if status == 200 {
            break;
        }
        assert_eq!(status, 401);
        assert!(Instant::now() < deadline, "the rotated key was never fetched");
        gw.proxy.wait_for("JWKS key set loaded");
    }
    assert!(jwks.fetches.load(Ordering::SeqCst) > fetched);
    // k1 was removed: its tokens (even one verified and cached before) are refused now.
    let (status, _, _) = get(gw.port, "/", &bearer(&t1));
    assert_eq!(status, 401);
    let lines = json_log_lines(&gw.log, 4);
    assert_eq!(lines[1]["error"], "jwt_unknown_key");
    assert_eq!(lines.last().unwrap()["error"], "jwt_unknown_key");
    let _ = &gw.dir;
}

/// A reload that points the filter at another JWKS URL: the fetches restart against it (the old
/// document's keys go, the new one's come), with no client traffic to prompt them.
#[test]
fn a_reload_restarts_the_jwks_fetches_with_the_new_url() {
    let k1 = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let k2 = signer(&rcgen::PKCS_ED25519);
    let first = JwksServer::start(json!({ "keys": [ec_jwk("k1", &k1.public_raw)] }).to_string());
    let second = JwksServer::start(json!({ "keys": [ed_jwk("k2", &k2.public_raw)] }).to_string());
    let route = |port: u16| {
        format!(
            "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", \
             jwks_url = \"http://127.0.0.1:{port}/.well-known/jwks.json\", jwks_refresh = \"1h\" }}]\n"
        )
    };
    let mut gw = gateway(&[], &route(first.port));
    gw.proxy.wait_for("JWKS key set loaded");
    let t1 = token(Algorithm::ES256, Some("k1"), &claims("one"), &k1.key);
    let t2 = token(Algorithm::EdDSA, Some("k2"), &claims("two"), &k2.key);
    assert_eq!(get(gw.port, "/", &bearer(&t1)).0, 200);
    assert_eq!(second.fetches.load(Ordering::SeqCst), 0);

    let config = gw.dir.path().join("gw.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(&route(first.port), &route(second.port));
    std::fs::write(&config, text).unwrap();
    assert!(gw.proxy.reload().contains("reloaded"));
    // The new URL is fetched on its own (the refresh is an hour away; a client's unknown kid is
    // not what prompts it: none is sent until it came), then its keys are the ones.
    // (The reload's outcome may have taken the line with it into the log already.)
    let new_url = format!("url=http://127.0.0.1:{}/", second.port);
    let loaded = |log: &[String]| {
        log.iter()
            .any(|l| l.contains("JWKS key set loaded") && l.contains(&new_url))
    };
    if !loaded(&gw.proxy.log) {
        let line = gw.proxy.wait_for(&new_url);
        assert!(line.contains("JWKS key set loaded"), "{line}");
    }
    assert!(second.fetches.load(Ordering::SeqCst) >= 1, "the new URL was fetched");
    assert_eq!(get(gw.port, "/", &bearer(&t2)).0, 200);
    assert_eq!(get(gw.port, "/", &bearer(&t1)).0, 401);
    let _ = &gw.dir;
}

/// A JWKS host by a name no DNS server answers here, `localhost` (in /etc/hosts): the fetch
/// goes through Rampart's DNS targets (hickory-resolver, which reads the hosts file and knows
/// `localhost` on its own), as the system's resolver would find it.
#[test]
fn a_jwks_host_named_localhost_is_reached() {
    let k1 = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let jwks = JwksServer::start(json!({ "keys": [ec_jwk("k1", &k1.public_raw)] }).to_string());
    let mut gw = gateway(
        &[],
        &format!(
            "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", \
             jwks_url = \"http://localhost:{}/.well-known/jwks.json\" }}]\n",
            jwks.port
        ),
    );
    let line = gw.proxy.wait_for("JWKS key set loaded");
    assert!(line.contains("localhost"), "{line}");
    let t1 = token(Algorithm::ES256, Some("k1"), &claims("one"), &k1.key);
    assert_eq!(get(gw.port, "/", &bearer(&t1)).0, 200);
    let _ = &gw.dir;
}

#[test]
fn a_jwks_that_never_answers_gives_503_not_401() {
    let dead = dead_target();
    let gw = gateway(
        &[],
        &format!(
            "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", \
             jwks_url = \"http://{dead}/jwks\" }}]\n"
        ),
    );
    let k = signer(&rcgen::PKCS_ECDSA_P256_SHA256);
    let t = token(Algorithm::ES256, Some("k1"), &claims("x"), &k.key);
    let (status, head, _) = get(gw.port, "/", &bearer(&t));
    assert_eq!(status, 503);
    assert_eq!(header(&head, "retry-after"), Some("1"));
    assert_eq!(json_log_lines(&gw.log, 1)[0]["error"], "jwt_keys_unavailable");
}

#[test]
fn jwt_config_errors_point_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("short.key"), b"too short").unwrap();
    let cfg = "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
               [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [\n\
               { type = \"jwt\", keys = \"short.key\" },\n\
               { type = \"jwt\", keys = \"missing.pem\", algorithms = [\"HS256\", \"none\"] },\n\
               { type = \"jwt\", jwks_url = \"ftp://idp/jwks\" },\n\
               { type = \"jwt\" },\n\
               ]\n\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let path = write_file(dir.path(), "gw.toml", cfg);
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("short.key:1:1: "), "{err}");
    assert!(err.contains("gw.toml:9:24: key file missing.pem: "), "{err}");
    assert!(err.contains("gw.toml:9:52: `none` is not an algorithm"), "{err}");
    assert!(!err.contains("is not a key of"), "{err}");
    assert!(
        err.contains("gw.toml:10:28: `ftp://idp/jwks` is not an http:// or https:// URL"),
        "{err}"
    );
    assert!(
        err.contains("gw.toml:11:1: a `jwt` filter needs `keys` (key files) or `jwks_url`"),
        "{err}"
    );
}
