//! Minimal HTTP/3 load generator (quinn + h3 client), written because Debian's h2load 1.52
//! is built without ngtcp2/nghttp3 and cannot speak HTTP/3. One current_thread runtime,
//! one UDP socket (one quinn Endpoint) for all connections; certificates are not verified.
//! Usage: h3load -c CONNS -m STREAMS_PER_CONN -n TOTAL [-r REQS_PER_CONN] [-b BODY_BYTES]
//!               https://127.0.0.1:PORT/PATH
//! With -r, each of the CONNS slots closes its connection after REQS_PER_CONN requests and
//! opens a new one (full 1-RTT handshake each time; no resumption, no 0-RTT). A request succeeds
//! on status 200 with a body of BODY_BYTES (default 13, the servers of this project).
//! Prints h2load-style "finished in" and "requests:" lines, then "latency:" with percentiles of
//! the succeeded requests' times (from sending the request to the end of the response body; with
//! -r, a connection's handshake is not in its requests' times), and "connect errors:" (a slot
//! whose connection or HTTP/3 setup fails stops, saying why on stderr).
use std::cell::{Cell, RefCell};
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
    let mut body_len = 13usize;
    let mut url = String::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-c" => c = it.next().unwrap().parse().unwrap(),
            "-m" => m = it.next().unwrap().parse().unwrap(),
            "-n" => n = it.next().unwrap().parse().unwrap(),
            "-r" => r = it.next().unwrap().parse().unwrap(),
            "-b" => body_len = it.next().unwrap().parse().unwrap(),
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
    let (ok, failed, connect_errors, mut times, elapsed) = local.block_on(&rt, async move {
        let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        ep.set_default_client_config(client_cfg);
        let claimed = Rc::new(Cell::new(0usize));
        let ok = Rc::new(Cell::new(0usize));
        let failed = Rc::new(Cell::new(0usize));
        let connect_errors = Rc::new(Cell::new(0usize));
        // Microseconds of each succeeded request.
        let times = Rc::new(RefCell::new(Vec::<u32>::with_capacity(n)));
        let start = Instant::now();
        let mut conns = Vec::new();
        for _ in 0..c {
            let ep = ep.clone();
            let uri = uri.clone();
            let (claimed, ok, failed) = (claimed.clone(), ok.clone(), failed.clone());
            let (connect_errors, times) = (connect_errors.clone(), times.clone());
            conns.push(tokio::task::spawn_local(async move {
                while claimed.get() < n {
                    let conn = match ep.connect(addr, "localhost").unwrap().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            eprintln!("h3load: connect: {e}");
                            connect_errors.set(connect_errors.get() + 1);
                            break;
                        }
                    };
                    let used = Rc::new(Cell::new(0usize));
                    let (mut driver, sender) = match h3::client::new(h3_quinn::Connection::new(conn)).await {
                        Ok(pair) => pair,
                        Err(e) => {
                            eprintln!("h3load: HTTP/3 setup: {e}");
                            connect_errors.set(connect_errors.get() + 1);
                            break;
                        }
                    };
                    let drv = tokio::task::spawn_local(async move {
                        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
                    });
                    let mut workers = Vec::new();
                    for _ in 0..m {
                        let mut sender = sender.clone();
                        let uri = uri.clone();
                        let (claimed, ok, failed) = (claimed.clone(), ok.clone(), failed.clone());
                        let (used, times) = (used.clone(), times.clone());
                        workers.push(tokio::task::spawn_local(async move {
                            while claimed.get() < n && used.get() < r {
                                claimed.set(claimed.get() + 1);
                                used.set(used.get() + 1);
                                let req = http::Request::get(uri.clone()).body(()).unwrap();
                                let sent = Instant::now();
                                let res: Result<bool, Box<dyn std::error::Error>> = async {
                                    let mut s = sender.send_request(req).await?;
                                    s.finish().await?;
                                    let resp = s.recv_response().await?;
                                    let mut got = 0;
                                    while let Some(mut b) = s.recv_data().await? {
                                        got += b.remaining();
                                        b.advance(b.remaining());
                                    }
                                    Ok(resp.status() == 200 && got == body_len)
                                }
                                .await;
                                match res {
                                    Ok(true) => {
                                        ok.set(ok.get() + 1);
                                        let us = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
                                        times.borrow_mut().push(us);
                                    }
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
        let times = times.take();
        (ok.get(), failed.get(), connect_errors.get(), times, elapsed)
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
    times.sort_unstable();
    // Nearest rank: the smallest time with at least p% of the times at or below it.
    let pct = |p: f64| -> f64 {
        if times.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0 * times.len() as f64).ceil() as usize).clamp(1, times.len());
        times[rank - 1] as f64 / 1000.0
    };
    println!(
        "latency: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(100.0)
    );
    println!("connect errors: {connect_errors}");
}
