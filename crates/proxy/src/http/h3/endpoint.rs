//! A worker's QUIC endpoint for one HTTP/3 listener: quinn on the worker's own SO_REUSEPORT UDP
//! socket, with the listener's TLS configuration (its rustls `ServerConfig`: certificates, SNI
//! choice, client certificates, session tickets, ACME; ALPN `h3`, TLS 1.3 only as QUIC requires)
//! and its HTTP/3 limits, rebuilt when a reload changes the snapshot. New connections are taken
//! here: counted against the listener's connection limit, asked to prove their address (Retry)
//! when too many handshakes are in flight on this worker, and handed to [`super::serve`] once
//! the handshake is done (or under way, with 0-RTT enabled).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{HandshakeData, QuicServerConfig};
use quinn::{EndpointConfig, IdleTimeout, TransportConfig, VarInt};
use rampart_model::http3::Http3Settings;
use rampart_model::metrics::RefusedReason;
use rampart_model::{ListenerKey, Snapshot, Transport};

use super::socket::StoppableSocket;
use super::ConnInfo;
use crate::slot::{BoundListener, ConnSlot};
use crate::tls::info::{client_cert_header, TlsInfo};
use crate::worker::WorkerContext;

/// Handshakes in flight on one worker past which new clients must prove their address first
/// (a Retry round trip): a flood of Initial packets from spoofed addresses then costs one
/// stateless packet each, and no handshake state.
const RETRY_ABOVE_HANDSHAKES: usize = 64;

/// Uni streams a client may open: HTTP/3 needs three (control, QPACK encoder and decoder); the
/// rest leaves room for reserved (grease) types.
const MAX_UNI_STREAMS: u32 = 16;

/// The key stateless resets are derived with, one per process: every worker's endpoint answers
/// for every connection ID alike, so a client whose datagrams reach another worker (a new path
/// hashes elsewhere) is told at once that its connection is gone.
fn reset_key() -> Arc<dyn quinn::crypto::HmacKey> {
    static KEY: OnceLock<Arc<aws_lc_rs::hmac::Key>> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let key = aws_lc_rs::hmac::Key::generate(aws_lc_rs::hmac::HMAC_SHA256, &rng)
            .expect("the system's random source works");
        Arc::new(key)
    })
    .clone()
}

/// Why a listener cannot speak HTTP/3 in a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum QuicSetupError {
    #[error("no HTTP listener with http3 on {0}")]
    NoListener(SocketAddr),
    #[error("its TLS settings do not allow QUIC (TLS 1.3 with AES-128-GCM is needed): {0}")]
    Tls(String),
    #[error("cannot use its UDP socket: {0}")]
    Socket(#[from] std::io::Error),
}

/// One worker's QUIC endpoint for the HTTP listener bound to `addr`.
pub struct QuicListener {
    endpoint: quinn::Endpoint,
    socket: Arc<StoppableSocket>,
    addr: SocketAddr,
    bound: Rc<BoundListener>,
    /// The snapshot generation the endpoint's server configuration was built from.
    generation: Cell<u64>,
    /// Handshakes under way on this endpoint.
    handshakes: Rc<Cell<usize>>,
}

impl QuicListener {
    /// An endpoint on `socket` (bound to `addr`) for the HTTP/3 listener there in the current
    /// snapshot.
    pub fn new(ctx: &WorkerContext, addr: SocketAddr, socket: std::net::UdpSocket) -> Result<Self, QuicSetupError> {
        let snapshot = ctx.snapshot();
        let server = server_config(&snapshot, addr)?;
        let bound = BoundListener::new(&ctx.counters, &snapshot, Transport::Tcp, addr)
            .ok_or(QuicSetupError::NoListener(addr))?;
        let config = EndpointConfig::new(reset_key());
        let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
        let socket = Arc::new(StoppableSocket::new(runtime.wrap_udp_socket(socket)?));
        let endpoint = quinn::Endpoint::new_with_abstract_socket(config, Some(server), socket.clone(), runtime)?;
        Ok(QuicListener {
            endpoint,
            socket,
            addr,
            bound,
            generation: Cell::new(snapshot.generation),
            handshakes: Rc::new(Cell::new(0)),
        })
    }

    /// The next connection attempt, with the server configuration brought up to date first when
    /// a reload changed the snapshot. `None` once the endpoint is closed.
    pub async fn accept(&self, ctx: &WorkerContext) -> Option<quinn::Incoming> {
        let incoming = self.endpoint.accept().await?;
        let snapshot = ctx.snapshot();
        if snapshot.generation != self.generation.get() {
            self.generation.set(snapshot.generation);
            match server_config(&snapshot, self.addr) {
                Ok(server) => self.endpoint.set_server_config(Some(server)),
                Err(e) => tracing::warn!("HTTP/3 on {}: {e}; new connections are refused", self.addr),
            }
        }
        Some(incoming)
    }

    /// Takes (or refuses) one connection attempt and serves the connection to its end.
    pub async fn serve(&self, ctx: &WorkerContext, incoming: quinn::Incoming) {
        let snapshot = ctx.snapshot();
        let key = ListenerKey::Bound(Transport::Tcp, self.addr);
        let Some((listener, settings)) = snapshot
            .listener_index(&key)
            .and_then(|i| snapshot.listeners.get(i))
            .and_then(|l| Some((l, l.http()?.http3.clone()?)))
        else {
            incoming.refuse();
            return;
        };
        let metrics = listener.metrics.clone();
        let cells = metrics.worker(ctx.id);
        let under_load = self.handshakes.get() >= RETRY_ABOVE_HANDSHAKES;
        if !incoming.remote_address_validated() && (settings.always_retry || under_load) {
            // Under load: the client proves its address with a Retry round trip first.
            if incoming.may_retry() {
                let _ = incoming.retry();
                return;
            }
        }
        cells.accepted.add(1);
        let Some(slot) = ConnSlot::take(&self.bound, listener.max_connections) else {
            cells.refused(RefusedReason::Limit).add(1);
            incoming.refuse();
            return;
        };
        let handshake_timeout = listener
            .tls
            .as_ref()
            .map_or(Duration::from_secs(10), |t| t.handshake_timeout);
        let max_field_section = listener.http().map_or(64 << 10, |h| h.limits.max_head as u64);
        drop(snapshot);
        let counted = Handshake::start(&self.handshakes);
        let Ok(connecting) = incoming.accept() else {
            cells.refused(RefusedReason::Tls).add(1);
            return;
        };
        let (conn, confirmed) = match settings.early_data {
            // 0-RTT: requests may come before the handshake is confirmed (see `ConnInfo::early`).
            true => match connecting.into_0rtt() {
                Ok((conn, confirmed)) => (conn, Some(confirmed)),
                Err(connecting) => match within(handshake_timeout, connecting).await {
                    Some(conn) => (conn, None),
                    None => return refused_tls(ctx, &key),
                },
            },
            false => match within(handshake_timeout, connecting).await {
                Some(conn) => (conn, None),
                None => return refused_tls(ctx, &key),
            },
        };
        // With 0-RTT the handshake goes on while requests are served: it stays counted (and
        // timed) until confirmed.
        let under_way = confirmed
            .as_ref()
            .map(|_| (counted, Instant::now() + handshake_timeout));
        let client = conn.remote_address();
        let tls = conn
            .handshake_data()
            .and_then(|d| d.downcast::<HandshakeData>().ok())
            .map(|d| {
                TlsInfo {
                    version: Some("TLSv1.3"),
                    cipher: None,
                    sni: d.server_name.as_deref(),
                    alpn: d.protocol.as_deref(),
                }
                .to_owned_info()
            });
        let client_cert = conn
            .peer_identity()
            .and_then(|id| id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
            .and_then(|chain| client_cert_header(&chain));
        let info = ConnInfo {
            listener_key: key,
            client,
            client_ip: client.ip().to_string(),
            local: conn.local_ip().map(|ip| SocketAddr::new(ip, self.addr.port())),
            client_cert,
            tls,
            early: Cell::new(confirmed.is_some()),
            resets: Cell::new((0, Instant::now())),
            max_resets: settings.max_resets_per_second,
            calm: Cell::new(false),
        };
        let confirmed = confirmed.zip(under_way);
        super::serve(ctx, info, conn, confirmed, &settings, max_field_section, slot).await;
    }
}

impl QuicListener {
    /// A binary upgrade gave the socket to a new process: no datagram is read here any more, and
    /// every connection is closed at once (H3_NO_ERROR), so that its client opens a new one,
    /// which reaches the new process. Requests in flight on them are lost; see docs/http3.md.
    pub fn hand_over(&self) {
        self.socket.stop_reading();
        self.endpoint
            .close(VarInt::from_u32(super::code::NO_ERROR), b"server upgraded");
    }
}

impl Drop for QuicListener {
    /// The listener is gone (a reload, or the worker drains): new connections are refused, open
    /// ones go on until they end.
    fn drop(&mut self) {
        self.endpoint.set_server_config(None);
    }
}

/// Counts a handshake under way for as long as it lives.
pub(super) struct Handshake(Rc<Cell<usize>>);

impl Handshake {
    fn start(count: &Rc<Cell<usize>>) -> Handshake {
        count.set(count.get() + 1);
        Handshake(count.clone())
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// A handshake that failed or timed out, counted as the listener's TLS refusals are.
fn refused_tls(ctx: &WorkerContext, key: &ListenerKey) {
    let snapshot = ctx.snapshot();
    if let Some(l) = snapshot.listener_index(key).and_then(|i| snapshot.listeners.get(i)) {
        l.metrics.worker(ctx.id).refused(RefusedReason::Tls).add(1);
    }
}

/// The handshake's result within `limit`; `None` if it failed or took longer.
async fn within(limit: Duration, connecting: quinn::Connecting) -> Option<quinn::Connection> {
    tokio::time::timeout(limit, connecting).await.ok()?.ok()
}

/// The QUIC server configuration of the HTTP/3 listener bound to `addr` in `snapshot`: its
/// rustls configuration with ALPN `h3` (and early data as configured), its limits.
fn server_config(snapshot: &Snapshot, addr: SocketAddr) -> Result<quinn::ServerConfig, QuicSetupError> {
    let key = ListenerKey::Bound(Transport::Tcp, addr);
    let listener = snapshot
        .listener_index(&key)
        .and_then(|i| snapshot.listeners.get(i))
        .ok_or(QuicSetupError::NoListener(addr))?;
    let (Some(tls), Some(settings)) = (&listener.tls, listener.http().and_then(|h| h.http3.as_ref())) else {
        return Err(QuicSetupError::NoListener(addr));
    };
    let mut rustls_config = (*tls.config).clone();
    rustls_config.alpn_protocols = vec![b"h3".to_vec()];
    if settings.early_data {
        // 0-RTT needs resumption the server keeps state for: each session in the listener's
        // session cache is taken once, so a replayed ClientHello finds none (rustls refuses
        // early data on stateless tickets, which any number of replays could present).
        rustls_config.max_early_data_size = u32::MAX;
        rustls_config.ticketer = Arc::new(NoTickets);
    } else {
        rustls_config.max_early_data_size = 0;
    }
    let crypto = QuicServerConfig::try_from(rustls_config).map_err(|e| QuicSetupError::Tls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport(settings)));
    Ok(server)
}

/// Session tickets off: resumption goes through the session cache (see `server_config`).
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// QUIC transport limits from the listener's HTTP/3 settings.
fn transport(settings: &Http3Settings) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(settings.max_concurrent_streams));
    t.max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS));
    t.stream_receive_window(VarInt::from_u32(settings.stream_window));
    t.receive_window(VarInt::from_u32(settings.connection_window));
    t.max_idle_timeout(IdleTimeout::try_from(settings.idle_timeout).ok());
    t
}
