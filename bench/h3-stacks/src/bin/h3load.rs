//! Minimal HTTP/3 load generator (quinn + h3 client), written because Debian's h2load 1.52
//! is built without ngtcp2/nghttp3 and cannot speak HTTP/3. One current_thread runtime,
//! one UDP socket (one quinn Endpoint) for all connections; certificates are not verified.
//! Usage: h3load -c CONNS -m STREAMS_PER_CONN -n TOTAL [-r REQS_PER_CONN] https://127.0.0.1:PORT/
//! With -r, each of the CONNS slots closes its connection after REQS_PER_CONN requests and
//! opens a new one (full 1-RTT handshake each time; no resumption, no 0-RTT).
//! Prints h2load-style "finished in" and "requests:" lines.
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn main() {
    let mut c = 1usize;
    let mut m = 1usize;
    let mut n = 1000usize;
    let mut r = usize::MAX;
    let mut url = String::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-c" => c = it.next().unwrap().parse().unwrap(),
            "-m" => m = it.next().unwrap().parse().unwrap(),
            "-n" => n = it.next().unwrap().parse().unwrap(),
            "-r" => r = it.next().unwrap().parse().unwrap(),
            _ => url = a,
        }
    }
    let uri: http::Uri = url.parse().expect("url");
    let addr: SocketAddr = uri.authority().unwrap().as_str().parse().expect("ip:port");

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let qc = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let client_cfg = quinn::ClientConfig::new(Arc::new(qc));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let (ok, failed, elapsed) = local.block_on(&rt, async move {
        let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        ep.set_default_client_config(client_cfg);
        let claimed = Rc::new(Cell::new(0usize));
        let ok = Rc::new(Cell::new(0usize));
        let failed = Rc::new(Cell::new(0usize));
        let start = Instant::now();
        let mut conns = Vec::new();
        for _ in 0..c {
            let ep = ep.clone();
            let uri = uri.clone();
            let (claimed, ok, failed) = (claimed.clone(), ok.clone(), failed.clone());
            conns.push(tokio::task::spawn_local(async move {
                while claimed.get() < n {
                    let conn = ep.connect(addr, "localhost").unwrap().await.expect("connect");
                    let used = Rc::new(Cell::new(0usize));
                    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(conn)).await.expect("h3");
                    let drv = tokio::task::spawn_local(async move {
                        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
                    });
                    let mut workers = Vec::new();
                    for _ in 0..m {
                        let mut sender = sender.clone();
                        let uri = uri.clone();
                        let (claimed, ok, failed) = (claimed.clone(), ok.clone(), failed.clone());
                        let used = used.clone();
                        workers.push(tokio::task::spawn_local(async move {
                            while claimed.get() < n && used.get() < r {
                                claimed.set(claimed.get() + 1);
                                used.set(used.get() + 1);
                                let req = http::Request::get(uri.clone()).body(()).unwrap();
                                let res: Result<bool, Box<dyn std::error::Error>> = async {
                                    let mut s = sender.send_request(req).await?;
                                    s.finish().await?;
                                    let resp = s.recv_response().await?;
                                    let mut got = 0;
                                    while let Some(mut b) = s.recv_data().await? {
                                        got += b.remaining();
                                        b.advance(b.remaining());
                                    }
                                    Ok(resp.status() == 200 && got == 13)
                                }
                                .await;
                                match res {
                                    Ok(true) => ok.set(ok.get() + 1),
                                    _ => failed.set(failed.get() + 1),
                                }
                            }
                        }));
                    }
                    for w in workers {
                        let _ = w.await;
                    }
                    drop(sender);
                    drv.abort();
                }
            }));
        }
        for h in conns {
            let _ = h.await;
        }
        let elapsed = start.elapsed();
        ep.close(0u32.into(), b"done");
        let _ = Bytes::new();
        (ok.get(), failed.get(), elapsed)
    });
    let secs = elapsed.as_secs_f64();
    println!("finished in {:.2}s, {:.2} req/s", secs, ok as f64 / secs);
    println!(
        "requests: {} total, {} started, {} done, {} succeeded, {} failed",
        n,
        ok + failed,
        ok + failed,
        ok,
        failed
    );
}
