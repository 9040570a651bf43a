//! HTTP/2 from clients: prior knowledge in clear (the preface, told from HTTP/1.1 on the same
//! port by [`crate::http::connection`]) and `h2` by ALPN over TLS. The `h2` crate does the framing,
//! HPACK, flow control and the protocol's own checks; each stream becomes a request like any
//! other ([`stream`]): its head is written as an HTTP/1.1 head (`rampart_proto::h2map`), read by
//! the HTTP/1 codec, routed and proxied by the same code as HTTP/1, through the [`Downstream`]
//! seam that [`downstream::H2Downstream`] implements for a stream.
//!
//! One task per connection drives the connection and all its streams (a set of futures polled
//! in that task), so a stream borrows the worker's state like an HTTP/1 request does.
//!
//! Protections: the `h2` crate bounds CONTINUATION frames, header lists (a 431 answer or GOAWAY),
//! pending-accept resets, empty and tiny DATA frames, and answers SETTINGS and PING one at a
//! time, reading no more frames while the answer cannot be written; Rampart adds a limit on
//! streams the client resets per second and on streams still being handled after the client
//! let go of them (rapid reset), both answered with GOAWAY `ENHANCE_YOUR_CALM`, and a send
//! timeout on a stream whose window stays shut.
//!
//! [`Downstream`]: crate::http::downstream::Downstream

use rampart_model::ListenerKey;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use h2::Reason;
use tokio::sync::Notify;

use crate::slot::Conn;
use crate::tls::info::OwnedTlsInfo;
use crate::worker::WorkerContext;

mod client_stream;
mod downstream;
mod io;
mod stream;

/// What the streams of one connection share.
pub(crate) struct ConnInfo {
    pub listener_key: ListenerKey,
    pub client: SocketAddr,
    pub client_ip: String,
    pub scheme: &'static str,
    pub local: Option<SocketAddr>,
    pub client_cert: Option<Box<str>>,
    pub tls: Option<OwnedTlsInfo>,
    /// Client resets counted in the current one-second window, and when it began.
    resets: Cell<(u32, Instant)>,
    max_resets: u32,
    /// Set when the client must be told to calm down; wakes the driver.
    calm: Cell<bool>,
    /// Set when the connection is to end gracefully (its listener is gone); wakes the driver.
    retired: Cell<bool>,
    wake: Notify,
}

impl ConnInfo {
    /// Counts a stream the client reset; past the limit, the connection is to end.
    pub fn count_reset(&self) {
        let (count, since) = self.resets.get();
        let now = Instant::now();
        let (count, since) = if now.duration_since(since) >= Duration::from_secs(1) {
            (1, now)
        } else {
            (count + 1, since)
        };
        self.resets.set((count, since));
        if count > self.max_resets {
            self.enhance_your_calm();
        }
    }

    fn enhance_your_calm(&self) {
        if !self.calm.replace(true) {
            self.wake.notify_one();
        }
    }

    /// Ends the connection gracefully: GOAWAY, the streams in flight finish, no new ones.
    pub fn retire(&self) {
        if !self.retired.replace(true) {
            self.wake.notify_one();
        }
    }
}

/// How often the driver looks at drain, idle time and the stream count.
const TICK: Duration = Duration::from_millis(250);

/// Serves an HTTP/2 connection: `conn.early` holds the bytes already read (the preface, for
/// prior knowledge). Ends when the connection closes, after GOAWAY on drain or idle time.
pub async fn serve(ctx: &WorkerContext, conn: Conn) {
    let snapshot = ctx.snapshot();
    let listener_key = conn.listener_key();
    let Some(index) = snapshot.listener_index(&listener_key) else {
        return;
    };
    let Some(http) = snapshot.listeners.get(index).and_then(|l| l.http()) else {
        return;
    };
    // A reload turned HTTP/2 off while this client negotiated it: the connection closes.
    let Some(settings) = http.http2 else {
        return;
    };
    let (handshake_timeout, keepalive) = (http.client_header_timeout, http.keepalive_timeout);
    drop(snapshot);
    let Conn {
        stream,
        client,
        early,
        slot,
        ..
    } = conn;
    let info = ConnInfo {
        listener_key,
        client,
        client_ip: client.ip().to_string(),
        scheme: stream.scheme(),
        local: stream.local_addr().ok(),
        client_cert: stream.client_cert().map(Box::from),
        tls: stream.tls_info().map(|t| t.to_owned_info()),
        resets: Cell::new((0, Instant::now())),
        max_resets: settings.max_resets_per_second,
        calm: Cell::new(false),
        retired: Cell::new(false),
        wake: Notify::new(),
    };
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .initial_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_send_buffer_size(64 * 1024)
        .enable_connect_protocol();
    let received = Rc::new(Cell::new(0u64));
    let handshake = builder.handshake::<_, Bytes>(io::Rewind::new(early, stream, received.clone()));
    let mut connection = match tokio::time::timeout(handshake_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!("HTTP/2 handshake with {client} failed: {e}");
            return;
        }
        Err(_) => return,
    };
    // Streams still handled after the client let go of them count against this: a client that
    // keeps more than twice its stream limit busy is resetting faster than they finish.
    let max_in_flight = 2 * settings.max_concurrent_streams as usize;
    let mut streams = FuturesUnordered::new();
    let mut tick = tokio::time::interval(TICK);
    let mut idle_since = Instant::now();
    let mut shutting_down = false;
    loop {
        // Streams first, then the connection: what every ready stream queued in this pass goes
        // out in one write when the connection is polled after them.
        tokio::select! {
            biased;
            _ = info.wake.notified() => {}
            Some(()) = streams.next(), if !streams.is_empty() => {
                // Every other stream that is done now, before the connection flushes.
                while let Some(Some(())) = streams.next().now_or_never() {}
                if streams.is_empty() {
                    idle_since = Instant::now();
                }
            }
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    streams.push(Box::pin(stream::serve(ctx, &info, request, respond)));
                    if streams.len() > max_in_flight {
                        info.enhance_your_calm();
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!("HTTP/2 connection from {client} failed: {e}");
                    break;
                }
                None => break,
            },
            _ = tick.tick() => count_received(ctx, &info, &received),
        }
        if info.calm.get() {
            tracing::debug!("HTTP/2 client {client} reset too many streams: GOAWAY ENHANCE_YOUR_CALM");
            connection.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            info.calm.set(false);
            shutting_down = true;
        }
        let idle = streams.is_empty() && idle_since.elapsed() >= keepalive;
        if !shutting_down && (ctx.http.parking.is_closed() || idle || info.retired.get()) {
            // In-flight streams complete; no new ones are taken.
            connection.graceful_shutdown();
            shutting_down = true;
        }
    }
    drop(streams);
    count_received(ctx, &info, &received);
    drop(slot);
}

/// Adds the bytes read from the client since the last call to its listener's traffic counter.
fn count_received(ctx: &WorkerContext, info: &ConnInfo, received: &Cell<u64>) {
    let bytes = received.replace(0);
    let snapshot = ctx.snapshot();
    if let Some(listener) = snapshot
        .listener_index(&info.listener_key)
        .and_then(|i| snapshot.listeners.get(i))
    {
        listener.metrics.worker(ctx.id).bytes_in.add(bytes);
    }
}
