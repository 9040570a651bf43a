//! HTTP/3 server on quinn + h3 + h3-quinn: every request gets 200 and "hello, world\n".
//! One tokio current_thread runtime. Usage: quinn-server [PORT] [CERT.pem KEY.pem]
use std::{net::SocketAddr, sync::Arc};

use bytes::Bytes;
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const BODY: &[u8] = b"hello, world\n";

fn load_or_generate(args: &[String]) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    if args.len() >= 4 {
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_file_iter(&args[2])
            .expect("cert file")
            .collect::<Result<Vec<_>, _>>()
            .expect("cert pem");
        let key = PrivateKeyDer::from_pem_file(&args[3]).expect("key pem");
        return (certs, key);
    }
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("rcgen");
    let key = PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der());
    (vec![ck.cert.der().clone()], key.into())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).map(|p| p.parse().expect("port")).unwrap_or(4433);
    let (certs, key) = load_or_generate(&args);

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("cert");
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;

    let quic_tls = QuicServerConfig::try_from(tls).expect("quic tls");
    let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(quic_tls));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(100u32.into());
    transport.max_idle_timeout(Some(std::time::Duration::from_secs(30).try_into().unwrap()));
    server_config.transport_config(Arc::new(transport));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let endpoint = quinn::Endpoint::server(server_config, addr).expect("bind");
        println!("quinn-server ready on udp {} pid {}", addr, std::process::id());
        while let Some(incoming) = endpoint.accept().await {
            tokio::spawn(async move {
                let conn = match incoming.await {
                    Ok(c) => c,
                    Err(_) => return,
                };
                let mut h3c: h3::server::Connection<h3_quinn::Connection, Bytes> =
                    match h3::server::Connection::new(h3_quinn::Connection::new(conn)).await {
                        Ok(c) => c,
                        Err(_) => return,
                    };
                loop {
                    match h3c.accept().await {
                        Ok(Some(resolver)) => {
                            tokio::spawn(async move {
                                let Ok((_req, mut stream)) = resolver.resolve_request().await else {
                                    return;
                                };
                                let resp = http::Response::builder()
                                    .status(200)
                                    .header("content-length", BODY.len())
                                    .body(())
                                    .unwrap();
                                if stream.send_response(resp).await.is_err() {
                                    return;
                                }
                                if stream.send_data(Bytes::from_static(BODY)).await.is_err() {
                                    return;
                                }
                                let _ = stream.finish().await;
                            });
                        }
                        Ok(None) => break,
                        Err(_) => break,
                    }
                }
            });
        }
    });
}
