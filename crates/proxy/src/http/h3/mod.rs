//! HTTP/3 from clients: QUIC (quinn) on each worker's own UDP socket of a TLS HTTP listener with
//! `http3 = true`, HTTP/3 framing and QPACK (`h3`), each request stream laid out as the owned
//! request head and handed to the same request layer as HTTP/1 and HTTP/2 through the
//! [`Downstream`] seam ([`downstream::H3Downstream`]). Nothing above the seam knows HTTP/3.
//!
//! - [`endpoint`]: the worker's QUIC endpoint on its socket, its TLS (the listener's own rustls
//!   configuration, certificates, SNI choice, reloads and ACME included, with ALPN `h3`), its
//!   limits, address validation (Retry) under load, and the new connections it takes.
//! - [`serve`]: one connection: its requests, GOAWAY on drain, the limit on client resets.
//! - [`stream`]: one request stream, from its head to its end; [`downstream`]: its side of the
//!   seam.
//!
//! Protections: QUIC's own (the amplification limit before the client's address is validated,
//! stream limits, flow control, all quinn's), Retry when too many handshakes are in flight,
//! a limit on streams the client resets per second (as HTTP/2's rapid-reset guard), 0-RTT off
//! unless enabled and then answering unsafe methods that arrive in early data with 425 Too
//! Early (RFC 8470).
//!
//! [`Downstream`]: crate::http::downstream::Downstream

use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use rampart_model::http3::Http3Settings;
use rampart_model::ListenerKey;

use crate::slot::ConnSlot;
use crate::tls::info::OwnedTlsInfo;
use crate::worker::WorkerContext;

mod downstream;
pub mod endpoint;
mod socket;
mod stream;

pub use endpoint::QuicListener;

/// HTTP/3 error codes (RFC 9114 §8.1) Rampart sends.
pub(crate) mod code {
    pub const NO_ERROR: u32 = 0x100;
    pub const INTERNAL_ERROR: u32 = 0x102;
    pub const EXCESSIVE_LOAD: u32 = 0x107;
    pub const REQUEST_CANCELLED: u32 = 0x10c;
}

/// How often a connection looks at drain and at its clients' resets.
const TICK: Duration = Duration::from_millis(250);

/// What the streams of one connection share.
pub(crate) struct ConnInfo {
    pub listener_key: ListenerKey,
    pub client: SocketAddr,
    pub client_ip: String,
    pub local: Option<SocketAddr>,
    pub client_cert: Option<Box<str>>,
    pub tls: Option<OwnedTlsInfo>,
    /// The handshake is not confirmed yet: requests now came in 0-RTT (early data).
    pub early: Cell<bool>,
    /// Streams the client reset (or opened without a request) in the current one-second window,
    /// and when it began.
    resets: Cell<(u32, Instant)>,
    max_resets: u32,
    /// Set once the client reset too many: the connection closes with H3_EXCESSIVE_LOAD.
    calm: Cell<bool>,
}

impl ConnInfo {
    /// Counts a stream the client reset; past the limit, the connection is to end.
    pub fn count_reset(&self) {
        let (count, since) = self.resets.get();
        let now = Instant::now();
        let (count, since) = match now.duration_since(since) >= Duration::from_secs(1) {
            true => (1, now),
            false => (count + 1, since),
        };
        self.resets.set((count, since));
        if count > self.max_resets {
            self.calm.set(true);
        }
    }
}

/// Serves one QUIC connection once its handshake is done (or, with 0-RTT, under way): each
/// request stream as a request, in this task (streams are futures polled here, not tasks, so
/// they borrow the worker's state as HTTP/2's do). Ends when the client closes, when the
/// connection idles out (QUIC's idle timeout), after GOAWAY on drain once the requests in flight
/// are answered, or at once when the client resets streams past the limit.
async fn serve(
    ctx: &WorkerContext,
    info: ConnInfo,
    conn: quinn::Connection,
    confirmed: Option<(quinn::ZeroRttAccepted, (endpoint::Handshake, Instant))>,
    settings: &Http3Settings,
    max_field_section: u64,
    slot: ConnSlot,
) {
    let built = h3::server::builder()
        .max_field_section_size(max_field_section)
        .build::<_, bytes::Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await;
    let mut h3 = match built {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!("HTTP/3 connection from {}: {e}", info.client);
            return;
        }
    };
    let max_in_flight = 2 * settings.max_concurrent_streams as usize;
    let mut streams = FuturesUnordered::new();
    let mut tick = tokio::time::interval(TICK);
    // 0-RTT: the handshake's confirmation, the count it holds in the endpoint's handshakes in
    // flight, and when it must be done by.
    let (mut confirmed, mut counted, deadline) = match confirmed {
        Some((accepted, (counted, deadline))) => (Some(accepted), Some(counted), deadline),
        None => (None, None, Instant::now()),
    };
    let mut shutting_down = false;
    loop {
        tokio::select! {
            biased;
            Some(()) = streams.next(), if !streams.is_empty() => {}
            // Streams before the handshake's confirmation: one that was opened in early data is
            // never taken for one opened after it (at worst the reverse, which is safe).
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    streams.push(Box::pin(stream::serve(ctx, &info, resolver, info.early.get())));
                    if streams.len() > max_in_flight {
                        info.calm.set(true);
                    }
                }
                // GOAWAY sent and every request answered, or the client went away.
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("HTTP/3 connection from {}: {e}", info.client);
                    break;
                }
            },
            // 0-RTT: the handshake's confirmation ends early data.
            _ = async { confirmed.as_mut().expect("guarded").await }, if confirmed.is_some() => {
                confirmed = None;
                counted = None;
                info.early.set(false);
            }
            _ = tokio::time::sleep_until(deadline.into()), if confirmed.is_some() => {
                tracing::debug!("HTTP/3 client {}: handshake not done in time", info.client);
                conn.close(code::NO_ERROR.into(), b"handshake timeout");
                break;
            }
            _ = tick.tick() => {
                if !shutting_down && ctx.http.parking.is_closed() {
                    // Draining: the requests in flight are answered, no new one is taken. GOAWAY
                    // names the first stream not processed: the one after the last accepted.
                    shutting_down = true;
                    if h3.shutdown(1).await.is_err() {
                        break;
                    }
                }
            }
        }
        if info.calm.get() {
            tracing::debug!("HTTP/3 client {} reset too many streams: closing", info.client);
            conn.close(code::EXCESSIVE_LOAD.into(), b"too many resets");
            break;
        }
    }
    drop(counted);
    // What is still in flight ends with the connection (answered, if the client still listens).
    while streams.next().await.is_some() {}
    drop(h3);
    // Said once more at the QUIC layer, so the client need not wait for its idle timeout.
    conn.close(code::NO_ERROR.into(), b"");
    count_traffic(ctx, &info, &conn);
    drop(slot);
}

/// Adds a closed connection's UDP bytes to its listener's traffic counters.
fn count_traffic(ctx: &WorkerContext, info: &ConnInfo, conn: &quinn::Connection) {
    let stats = conn.stats();
    let snapshot = ctx.snapshot();
    if let Some(listener) = snapshot
        .listener_index(&info.listener_key)
        .and_then(|i| snapshot.listeners.get(i))
    {
        let cells = listener.metrics.worker(ctx.id);
        cells.bytes_in.add(stats.udp_rx.bytes);
        cells.bytes_out.add(stats.udp_tx.bytes);
    }
}
