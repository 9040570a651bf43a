//! Echo backends on 127.0.0.1:0, each on its own tokio runtime (so a test may block on the
//! rampart process's log while backends keep serving), and clients that connect to an address.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread;

use hyper::client::conn::http2;
use tonic::codegen::http::{Request as HttpRequest, Response as HttpResponse, Uri};

use tokio::sync::oneshot;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};

use super::echo::{EchoClient, EchoService};
use super::tls::CertPair;

/// How a backend serves.
enum Serving {
    /// tonic's server, h2c (prior knowledge).
    Tonic,
    /// tonic's server over TLS (ALPN h2) with this certificate.
    TonicTls(CertPair),
    /// hyper's HTTP/2 server with the echo service and nothing else: unlike tonic's server it
    /// ignores `grpc-timeout` (which tonic's answers with CANCELLED), so a deadline can only be
    /// enforced by whatever sits between client and backend.
    BareH2c,
    /// hyper's HTTP/2 server that, like a gRPC server enforcing deadlines, resets a call with
    /// RST_STREAM CANCEL the moment its `grpc-timeout` (counted from when the call arrived)
    /// runs out.
    ResetsAtDeadline,
}

/// A running echo backend on a thread of its own; dropping it stops its runtime (and with it
/// every connection it served).
pub struct EchoBackend {
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl EchoBackend {
    /// tonic's server over h2c.
    pub fn start() -> EchoBackend {
        EchoBackend::serve(Serving::Tonic)
    }

    /// tonic's server over TLS with `cert` (its ALPN offers h2).
    pub fn start_tls(cert: &CertPair) -> EchoBackend {
        EchoBackend::serve(Serving::TonicTls(cert.clone()))
    }

    /// hyper's HTTP/2 server (h2c), which does not act on `grpc-timeout`.
    pub fn start_ignoring_deadlines() -> EchoBackend {
        EchoBackend::serve(Serving::BareH2c)
    }

    /// hyper's HTTP/2 server (h2c) that resets a call with CANCEL when its deadline runs out.
    pub fn start_resetting_at_deadline() -> EchoBackend {
        EchoBackend::serve(Serving::ResetsAtDeadline)
    }

    fn serve(serving: Serving) -> EchoBackend {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a backend port");
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let service = EchoService::default();
        let calls = service.counter();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                match serving {
                    Serving::Tonic => {
                        tokio::spawn(Server::builder().serve_with_incoming(service, TcpIncoming::from(listener)));
                    }
                    Serving::TonicTls(cert) => {
                        let identity = Identity::from_pem(&cert.cert_pem, &cert.key_pem);
                        let tls = ServerTlsConfig::new().identity(identity);
                        let server = Server::builder().tls_config(tls).expect("backend TLS config");
                        tokio::spawn(server.serve_with_incoming(service, TcpIncoming::from(listener)));
                    }
                    Serving::BareH2c => {
                        tokio::spawn(serve_bare(listener, service, false));
                    }
                    Serving::ResetsAtDeadline => {
                        tokio::spawn(serve_bare(listener, service, true));
                    }
                }
                let _ = stopped.await;
            });
            // Dropping the runtime here ends the server and every connection task.
        });
        EchoBackend {
            addr,
            calls,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The address as `ip:port`, for a config's `targets`.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    /// Calls that reached this backend so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for EchoBackend {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn serve_bare(listener: tokio::net::TcpListener, service: EchoService, reset_at_deadline: bool) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let service = service.clone();
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut service = service.clone();
                let deadline = reset_at_deadline.then(|| grpc_timeout(req.headers())).flatten();
                let call = service.call(req.map(Body::new));
                answer_by_deadline(call, deadline)
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tcp), handler)
                .await;
        });
    }
}

/// An h2c (prior knowledge) client of `http://addr`.
pub async fn connect(addr: SocketAddr) -> EchoClient {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e:?}"));
    EchoClient::new(channel, origin(addr, "http"))
}

/// An h2c client of 127.0.0.1:`port`.
pub async fn connect_port(port: u16) -> EchoClient {
    connect(SocketAddr::from(([127, 0, 0, 1], port))).await
}

/// A TLS client of `https://addr` that trusts `ca_pem`, checks the name `domain` and insists on
/// ALPN h2 (tonic refuses a server that does not pick it).
pub async fn connect_tls(addr: SocketAddr, ca_pem: &str, domain: &str) -> EchoClient {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(domain);
    let channel: Channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("TLS connect to {addr}: {e:?}"));
    EchoClient::new(channel, origin(addr, "https"))
}

fn origin(addr: SocketAddr, scheme: &str) -> Uri {
    format!("{scheme}://{addr}").parse().unwrap()
}

/// One bare HTTP/2 (h2c prior knowledge) connection from hyper's client, with nothing of
/// tonic's channel around it: unlike the channel, it does not end a call at its `grpc-timeout`
/// (the channel cancels it locally, with CANCELLED "Timeout expired").
#[derive(Clone)]
pub struct BareH2(http2::SendRequest<Body>);

impl Service<HttpRequest<Body>> for BareH2 {
    type Response = HttpResponse<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// An echo client over one bare HTTP/2 connection to `addr` (see [`BareH2`]).
pub async fn connect_bare(addr: SocketAddr) -> EchoClient<BareH2> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    EchoClient::new(BareH2(sender), origin(addr, "http"))
}

/// The service's answer, or RST_STREAM CANCEL when `deadline` (if any) runs out first.
async fn answer_by_deadline(
    call: impl Future<Output = Result<HttpResponse<Body>, std::convert::Infallible>>,
    deadline: Option<std::time::Duration>,
) -> Result<HttpResponse<Body>, BoxError> {
    let Some(limit) = deadline else {
        return call.await.map_err(|never| match never {});
    };
    // A thread's sleep, finer than the runtime's millisecond timer: the reset leaves as close
    // to the deadline as the clock allows.
    let expired = tokio::task::spawn_blocking(move || thread::sleep(limit));
    tokio::select! {
        answer = call => answer.map_err(|never| match never {}),
        _ = expired => Err(Box::new(h2::Error::from(h2::Reason::CANCEL))),
    }
}

/// A call's `grpc-timeout`.
fn grpc_timeout(headers: &tonic::codegen::http::HeaderMap) -> Option<std::time::Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    let per_unit = match unit {
        "H" => 3_600_000_000_000,
        "M" => 60_000_000_000,
        "S" => 1_000_000_000,
        "m" => 1_000_000,
        "u" => 1_000,
        "n" => 1,
        _ => return None,
    };
    Some(std::time::Duration::from_nanos(n.checked_mul(per_unit)?))
}
