//! The JWKS fetch goes through the internal client: a JWKS server that speaks only HTTP/2 over
//! TLS (ALPN `h2` and nothing else) is fetched from, and a token signed with its key passes.

use crate::common;

use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use common::http::send;
use common::tls::{provider, Ca, CertSpec};
use common::{connect, filter_gateway, WAIT};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

/// Serves `document` at any path over TLS (a certificate for 127.0.0.1 issued by `ca`), HTTP/2
/// only; reports each request (`METHOD PATH user-agent`). Returns its port.
fn h2_jwks_server(ca: &Ca, document: String) -> (u16, Receiver<String>) {
    let cert = ca.issue(&CertSpec::new(&["127.0.0.1"]));
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(cert.chain_der(), cert.key_der())
        .unwrap();
    // A client that does not offer h2 fails the handshake.
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, seen) = channel();
    let document = Bytes::from(document);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, tx, document) = (acceptor.clone(), tx.clone(), document.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let Ok(mut conn) = h2::server::handshake(tls).await else {
                        return;
                    };
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        let agent = request.headers().get("user-agent").and_then(|v| v.to_str().ok());
                        let _ = tx.send(format!(
                            "{} {} {}",
                            request.method(),
                            request.uri().path(),
                            agent.unwrap_or("-")
                        ));
                        let response = http::Response::builder()
                            .status(200)
                            .header("content-type", "application/json")
                            .body(())
                            .unwrap();
                        if let Ok(mut send) = respond.send_response(response, false) {
                            let _ = send.send_data(document.clone(), true);
                        }
                    }
                });
            }
        });
    });
    (port, seen)
}

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
    let (port, seen) = h2_jwks_server(&ca, json!({ "keys": [jwk] }).to_string());
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
        seen.recv_timeout(WAIT).unwrap(),
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
