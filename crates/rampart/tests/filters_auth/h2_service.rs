//! An auth service that speaks only HTTP/2 over TLS (ALPN `h2` and nothing else) on
//! 127.0.0.1:0: `forward_auth` reaches it through the internal client, which offers `h2` by ALPN
//! to its internal upstream. Every check is answered 200 with `X-Auth-User: alice`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

use bytes::Bytes;
use rustls::ServerConfig;

use crate::common::tls::{provider, Ca, CertSpec};

pub struct H2AuthService {
    pub addr: SocketAddr,
    /// `METHOD PATH x-forwarded-uri` of each check, as HTTP/2 requests.
    pub checks: Receiver<String>,
    /// TLS connections that reached HTTP/2.
    pub connections: Arc<AtomicUsize>,
}

impl H2AuthService {
    /// Serves a certificate for 127.0.0.1 issued by `ca`.
    pub fn start(ca: &Ca) -> H2AuthService {
        let cert = ca.issue(&CertSpec::new(&["127.0.0.1"]));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(cert.chain_der(), cert.key_der())
            .unwrap();
        // HTTP/2 only: a client that offers only http/1.1 fails the handshake.
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, checks) = channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, tx, count) = (acceptor.clone(), tx.clone(), count.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let Ok(mut conn) = h2::server::handshake(tls).await else {
                            return;
                        };
                        count.fetch_add(1, Ordering::SeqCst);
                        while let Some(Ok((request, mut respond))) = conn.accept().await {
                            let uri = request.headers().get("x-forwarded-uri");
                            let _ = tx.send(format!(
                                "{} {} {}",
                                request.method(),
                                request.uri().path(),
                                uri.and_then(|v| v.to_str().ok()).unwrap_or("-")
                            ));
                            let response = http::Response::builder()
                                .status(200)
                                .header("x-auth-user", "alice")
                                .body(())
                                .unwrap();
                            if let Ok(mut send) = respond.send_response(response, false) {
                                let _ = send.send_data(Bytes::from_static(b"ok"), true);
                            }
                        }
                    });
                }
            });
        });
        H2AuthService {
            addr,
            checks,
            connections,
        }
    }

    /// The next check the service received.
    pub fn next_check(&self) -> String {
        self.checks
            .recv_timeout(crate::common::WAIT)
            .expect("the auth service received no check")
    }
}
