//! The TLS glue over real loopback sockets: handshakes both ways, a write larger than the socket
//! buffers, pipelined requests waiting inside rustls, and the idle check of a pooled connection
//! that received session tickets.

use std::sync::Arc;
use std::time::Duration;

use rampart_model::tls::{CertificateSet, ListenerTls};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::accept::{accept, first_bytes};
use super::connect::connect;
use crate::stream::Stream;

fn configs() -> (ListenerTls, Arc<rustls::ClientConfig>) {
    self_signed_pair("tls.test")
}

/// A server configuration for a self-signed certificate naming `name`, and a client
/// configuration that trusts it (for test servers in this crate).
pub(crate) fn self_signed_pair(name: &str) -> (ListenerTls, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain.clone(), PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[0].clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let listener = ListenerTls {
        config: Arc::new(server),
        certificates: Arc::new(CertificateSet::default()),
        strict_sni: false,
        handshake_timeout: Duration::from_secs(5),
        forward_client_cert: None,
        certificate_info: Vec::new(),
        acme_names: Vec::new(),
        on_demand: None,
    };
    (listener, Arc::new(client))
}

/// A server and a client TLS stream connected over loopback.
async fn pair() -> (Stream, Stream) {
    let (server_tls, client_config) = configs();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = async {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut early = Vec::new();
        first_bytes(&tcp, &mut early).await.unwrap();
        Stream::Tls(Box::new(accept(tcp, &mut early, &server_tls).await.unwrap()))
    };
    let client = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("tls.test").unwrap();
        Stream::Tls(Box::new(connect(tcp, &client_config, &name).await.unwrap()))
    };
    tokio::join!(server, client)
}

fn run(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

#[test]
fn a_write_larger_than_the_socket_buffers_arrives_whole() {
    run(async {
        let (mut server, mut client) = pair().await;
        let body: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
        let reader = async {
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 64 << 10];
            while got.len() < body.len() {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "early end after {} bytes", got.len());
                got.extend_from_slice(&chunk[..n]);
            }
            got
        };
        // Unbounded and bounded writes both wait for the reader (neither overflows the clock).
        let writer = async {
            server.write_all(&body[..4 << 20]).await.unwrap();
            server
                .write_all_within(&body[4 << 20..6 << 20], &body[6 << 20..], Duration::from_secs(10))
                .await
                .unwrap();
        };
        let (got, ()) = tokio::join!(reader, writer);
        assert!(got == body, "the bytes differ");
    });
}

#[test]
fn pipelined_requests_wait_inside_rustls_and_count_as_readable() {
    run(async {
        let (mut server, mut client) = pair().await;
        client.write_all(b"first|second").await.unwrap();
        let mut five = [0u8; 5];
        server.read_exact(&mut five).await.unwrap();
        assert_eq!(&five, b"first");
        // The rest was decrypted with the first read: no socket event will come for it.
        assert!(!server.is_quiet());
        tokio::time::timeout(Duration::from_secs(1), server.readable())
            .await
            .expect("readable at once")
            .unwrap();
        let mut rest = [0u8; 7];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"|second");
        assert!(server.is_quiet());
    });
}

#[test]
fn an_idle_client_connection_stays_reusable_after_tickets_and_not_after_a_close() {
    run(async {
        let (mut server, mut client) = pair().await;
        // A round trip, so the server's session tickets (sent after its handshake) have arrived.
        client.write_all(b"ping").await.unwrap();
        let mut four = [0u8; 4];
        server.read_exact(&mut four).await.unwrap();
        server.write_all(b"pong").await.unwrap();
        client.read_exact(&mut four).await.unwrap();
        assert!(client.is_reusable_when_idle());
        // Bytes nobody asked for make it unusable.
        server.write_all(b"junk").await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), client.tcp().readable())
            .await
            .unwrap()
            .unwrap();
        assert!(!client.is_reusable_when_idle());
        // And so does the server's close.
        let (mut server, mut client) = pair().await;
        server.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        client.read_exact(&mut one).await.unwrap();
        assert!(client.is_reusable_when_idle());
        server.shutdown_write();
        tokio::time::timeout(Duration::from_secs(1), client.tcp().readable())
            .await
            .unwrap()
            .unwrap();
        assert!(!client.is_reusable_when_idle());
    });
}

#[test]
fn garbage_and_plain_http_are_told_apart_from_a_handshake() {
    run(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (sent, plain) in [(&b"GET / HTTP/1.1\r\n"[..], true), (&b"\x00\x01garbage"[..], false)] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(sent).await.unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let mut early = Vec::new();
            let failure = first_bytes(&tcp, &mut early).await.unwrap_err();
            assert_eq!(
                failure.as_str(),
                if plain {
                    "plain_http_on_tls_port"
                } else {
                    "tls_handshake_failed"
                }
            );
        }
    });
}
