//! HTTP/2 from clients: prior knowledge in clear (the preface, told from HTTP/1.1 on the same
//! port by [`crate::http::connection`]) and `h2` by ALPN over TLS, served by Rampart's own
//! HTTP/2: the sans-IO connection (`rampart_proto::h2conn`: frames, HPACK, streams, flow
//! control and the protocol's checks) driven by one task per connection ([`serve`]), which reads
//! and writes the socket and hands each stream to a request ([`stream`]). Streams are state in
//! the connection's [`mux::Mux`], not tasks: a stream's request is a future polled in the same
//! task, so it borrows the worker's state like an HTTP/1 request does, and reaches its stream
//! through a [`mux::StreamIo`]. Its head is laid out as the owned request head from the decoded
//! field block (no HTTP/1 text), routed and proxied by the same code as HTTP/1 through the
//! [`Downstream`] seam that [`downstream::H2Downstream`] implements for a stream. Request DATA
//! reaches the request as slices of the read buffer (no copy); its credit goes back to the
//! client as the request passes it on, so a slow upstream holds the client back.
//!
//! Protections (each tested in `rampart_proto::h2conn` and end to end): rapid reset, a
//! CONTINUATION flood and field blocks past the limit, the HPACK bomb, empty-frame floods,
//! SETTINGS and PING answers the client does not read (reading stops while the output is
//! full), a 431 answer for a head past `http2_max_header_list_size`; Rampart adds a limit on
//! streams the client resets per second and on streams still being handled after the client
//! let go of them, both answered with GOAWAY `ENHANCE_YOUR_CALM`, and a send timeout on a
//! stream whose window stays shut.
//!
//! The same connection and socket driver serve the other direction: [`upstream`] is the client
//! side, for requests to HTTP/2 upstreams.
//!
//! [`Downstream`]: crate::http::downstream::Downstream

use rampart_model::ListenerKey;
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use rampart_proto::h2conn::{Connection, ServerConfig};
use rampart_proto::h2frame::ErrorCode;
use tokio::sync::Notify;

pub(crate) use mux::Incoming;
use mux::{Mux, StreamIo};

use crate::slot::Conn;
use crate::tls::info::OwnedTlsInfo;
use crate::worker::WorkerContext;

mod client_stream;
mod core;
mod downstream;
mod io;
mod mux;
mod payloads;
mod stream;
mod within;
pub(crate) use within::within;
pub(crate) mod upstream;

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
/// prior knowledge). Ends when the connection closes, after GOAWAY on drain or idle time, or
/// after a connection error (its GOAWAY written first).
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
    let mux = Mux::new(Connection::server(ServerConfig {
        max_concurrent_streams: settings.max_concurrent_streams,
        max_header_list_size: settings.max_header_list_size,
        stream_window: settings.stream_window,
        connection_window: settings.connection_window,
        connect_protocol: true,
    }));
    let mut io = io::ConnIo::new(stream, &early, &mux);
    // Streams still handled after the client let go of them count against this: a client that
    // keeps more than twice its stream limit busy is resetting faster than they finish.
    let max_in_flight = 2 * settings.max_concurrent_streams as usize;
    let mut streams = FuturesUnordered::new();
    let mut tick = tokio::time::interval(TICK);
    let began = Instant::now();
    let mut idle_since = began;
    let mut shutting_down = false;
    // A connection error or a client told to calm down: the connection ends once its GOAWAY is
    // written.
    let mut ending = false;
    loop {
        // Streams first, then the socket: what every ready stream wrote in this pass goes out
        // in one write.
        tokio::select! {
            biased;
            _ = info.wake.notified() => {}
            Some(()) = streams.next(), if !streams.is_empty() => {
                // Every other stream that is done now, before the connection writes.
                while let Some(Some(())) = streams.next().now_or_never() {}
                if streams.is_empty() {
                    idle_since = Instant::now();
                }
            }
            step = std::future::poll_fn(|cx| io.poll_step(cx, &*mux)) => match step {
                Ok(io::Step::Read) => {
                    if let Err(e) = io.process(&*mux) {
                        tracing::debug!("HTTP/2 connection from {client}: {e}");
                        ending = true;
                    }
                    let (opened, resets) = {
                        let mut m = mux.borrow_mut();
                        (m.opened.pop(), std::mem::take(&mut m.peer_resets))
                    };
                    if let Some((id, end_stream)) = opened {
                        let head = stream::lay_out_head(ctx, &info, &mut mux.borrow_mut().core.conn, end_stream);
                        let io = StreamIo { mux: mux.clone(), id };
                        streams.push(Box::pin(stream::serve(ctx, &info, io, head, end_stream)));
                    }
                    for _ in 0..resets {
                        info.count_reset();
                    }
                    if streams.len() > max_in_flight {
                        info.enhance_your_calm();
                    }
                }
                Ok(io::Step::Wrote) => mux.borrow_mut().core.wake_writers(),
                Ok(io::Step::Closed) => break,
                Err(e) => {
                    tracing::debug!("HTTP/2 connection from {client} failed: {e}");
                    break;
                }
            },
            _ = tick.tick() => {
                count_received(ctx, &info, io.take_received());
                if streams.is_empty() {
                    io.release_if_idle(&*mux);
                }
                if !mux.borrow().core.conn.established() && began.elapsed() >= handshake_timeout {
                    break;
                }
            }
        }
        if info.calm.get() {
            tracing::debug!("HTTP/2 client {client} reset too many streams: GOAWAY ENHANCE_YOUR_CALM");
            mux.borrow_mut().core.conn.go_away(ErrorCode::EnhanceYourCalm);
            info.calm.set(false);
            ending = true;
        }
        let idle = streams.is_empty() && idle_since.elapsed() >= keepalive;
        if !shutting_down && (ctx.http.parking.is_closed() || idle || info.retired.get()) {
            // In-flight streams complete; no new ones are taken.
            mux.borrow_mut().core.conn.go_away(ErrorCode::NoError);
            shutting_down = true;
        }
        let flushed = io.flushed(&*mux);
        if flushed && (ending || (shutting_down && streams.is_empty())) {
            break;
        }
    }
    mux.borrow_mut().core.close();
    drop(streams);
    io.finish(&*mux, Duration::from_secs(1)).await;
    count_received(ctx, &info, io.take_received());
    drop(slot);
}

/// Adds the bytes read from the client since the last call to its listener's traffic counter.
fn count_received(ctx: &WorkerContext, info: &ConnInfo, bytes: u64) {
    let snapshot = ctx.snapshot();
    if let Some(listener) = snapshot
        .listener_index(&info.listener_key)
        .and_then(|i| snapshot.listeners.get(i))
    {
        listener.metrics.worker(ctx.id).bytes_in.add(bytes);
    }
}
