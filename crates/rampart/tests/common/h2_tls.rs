//! A server that speaks only HTTP/2 over TLS (ALPN `h2` and nothing else: a client that offers
//! only http/1.1 fails the handshake) on 127.0.0.1:0, with a certificate for 127.0.0.1 issued by
//! a test CA. It answers every request with one fixed response and reports what it was asked:
//! for the internal client's users (forward_auth, the JWKS fetch) reaching HTTP/2-only services.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

use bytes::Bytes;
use rustls::ServerConfig;

use super::tls::{provider, Ca, CertSpec};

/// The fixed answer: status 200, one header field and a body.
pub struct H2Answer {
    pub header: (&'static str, &'static str),
    pub body: Bytes,
}

pub struct H2TlsServer {
    pub addr: SocketAddr,
    /// `METHOD PATH VALUE` of each request, VALUE being its `reported` field (`-` when absent).
    pub requests: Receiver<String>,
    /// TLS connections that reached HTTP/2.
    pub connections: Arc<AtomicUsize>,
}

impl H2TlsServer {
    /// Starts the server; each request is reported with the value of its field `reported`.
    pub fn start(ca: &Ca, reported: &'static str, answer: H2Answer) -> H2TlsServer {
        let cert = ca.issue(&CertSpec::new(&["127.0.0.1"]));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(cert.chain_der(), cert.key_der())
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, requests) = channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let answer = Arc::new(answer);
        super::servers::serve_tokio(listener, move |tcp| {
            let (acceptor, tx, count, answer) = (acceptor.clone(), tx.clone(), count.clone(), answer.clone());
            async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut conn) = h2::server::handshake(tls).await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let value = request.headers().get(reported).and_then(|v| v.to_str().ok());
                    let _ = tx.send(format!(
                        "{} {} {}",
                        request.method(),
                        request.uri().path(),
                        value.unwrap_or("-")
                    ));
                    let response = http::Response::builder()
                        .status(200)
                        .header(answer.header.0, answer.header.1)
                        .body(())
                        .unwrap();
                    if let Ok(mut send) = respond.send_response(response, false) {
                        let _ = send.send_data(answer.body.clone(), true);
                    }
                }
            }
        });
        H2TlsServer {
            addr,
            requests,
            connections,
        }
    }
}
