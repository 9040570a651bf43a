//! The JWKS fetch goes through the internal client: a JWKS server that speaks only HTTP/2 over
//! TLS (ALPN `h2` and nothing else) is fetched from, and a token signed with its key passes.

use crate::common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use common::h2_tls::{H2Answer, H2TlsServer};
use common::http::send;
use common::tls::Ca;
use common::{connect, filter_gateway, WAIT};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

#[test]
fn a_jwks_is_fetched_from_a_server_that_speaks_only_http2_over_tls() {
    let ca = Ca::new("JWKS CA");
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let key = EncodingKey::from_ec_pem(kp.serialize_pem().as_bytes()).unwrap();
    // The uncompressed point: 0x04, x, y.
    let raw = kp.public_key_raw();
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
        "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
    });
    // The keys, served at any path by a server that speaks only HTTP/2 over TLS.
    let answer = H2Answer {
        header: ("content-type", "application/json"),
        body: Bytes::from(json!({ "keys": [jwk] }).to_string()),
    };
    let jwks = H2TlsServer::start(&ca, "user-agent", answer);
    let port = jwks.addr.port();
    let mut gw = filter_gateway(
        &[("ca.pem", ca.pem.as_bytes())],
        "",
        &format!(
            "[[listeners.gw.routes]]\nname = \"api\"\nupstream = \"app\"\nfilters = [{{ type = \"jwt\", \
             jwks_url = \"https://127.0.0.1:{port}/.well-known/jwks.json\", jwks_ca = \"ca.pem\" }}]\n"
        ),
    );
    gw.proxy.wait_for("JWKS key set loaded");
    assert_eq!(
        jwks.requests.recv_timeout(WAIT).unwrap(),
        "GET /.well-known/jwks.json rampart-jwks"
    );
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let mut head = Header::new(Algorithm::ES256);
    head.kid = Some("k1".into());
    let token = encode(&head, &json!({ "sub": "one", "exp": exp }), &key).unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {token}\r\n\r\n");
    let (status, head_text, _) = send(&mut connect(gw.port), request.as_bytes());
    assert_eq!(status, 200, "{head_text}");
}
