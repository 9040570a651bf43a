//! The L4 copy loop: both directions at once, each ending with a half-close of the other side, so
//! a FIN one way keeps the other way flowing. A direction starts with read/write through a pooled
//! buffer; when a read fills the whole buffer (a bulk transfer) it switches to splice(2) through a
//! pooled pipe on Linux (plain TCP on both sides only; TLS goes through rustls in user space). A
//! connection with no byte moving either way for the idle timeout is closed.
//!
//! A relay that gives up on a connection (the client failed or reset it, or the idle timeout
//! struck) before the upstream sent its FIN resets the upstream connection instead of closing it
//! with a FIN: see [`reset_upstream_on_close`].

use std::cell::Cell;
use std::io;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use crate::stream::{write_all, Stream};
use crate::worker::WorkerContext;

/// Which side of the proxy an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
}

/// Why a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both directions reached end of stream.
    Completed,
    IdleTimeout,
    /// A read or write failed on this side (reset, broken pipe, ...).
    Error(Side, io::ErrorKind),
    /// A payload filter of the route closed the connection.
    Filtered,
}

impl RelayEnd {
    /// The name used in session records and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            RelayEnd::Completed => "completed",
            RelayEnd::IdleTimeout => "idle_timeout",
            RelayEnd::Error(Side::Client, _) => "client_error",
            RelayEnd::Error(Side::Upstream, _) => "upstream_error",
            RelayEnd::Filtered => "filter_closed",
        }
    }
}

/// What a relay moved, and when the first byte went each way.
#[derive(Debug, Clone, Copy)]
pub struct RelayOutcome {
    pub end: RelayEnd,
    /// Client to upstream.
    pub bytes_up: u64,
    /// Upstream to client.
    pub bytes_down: u64,
    pub first_byte_up: Option<Instant>,
    pub first_byte_down: Option<Instant>,
    /// Whether the upstream's end of stream (its FIN) was read.
    pub upstream_ended: bool,
}

/// One direction's progress, visible to the caller even when the direction is cancelled.
#[derive(Default)]
pub(crate) struct Flow {
    bytes: Cell<u64>,
    first: Cell<Option<Instant>>,
    /// The source's end of stream was read.
    pub(crate) ended: Cell<bool>,
}

impl Flow {
    #[inline]
    pub(crate) fn moved(&self, n: usize, activity: &Cell<u64>) {
        if self.bytes.get() == 0 {
            self.first.set(Some(Instant::now()));
        }
        self.bytes.set(self.bytes.get() + n as u64);
        activity.set(activity.get().wrapping_add(1));
    }
}

/// Relays between `client` and `upstream` until both directions end, one side fails, or nothing
/// moves for `idle_timeout`.
pub async fn relay(
    ctx: &WorkerContext,
    client: &mut Stream,
    upstream: &mut Stream,
    idle_timeout: Duration,
    buffer_size: usize,
) -> RelayOutcome {
    let outcome = match (&mut *client, &mut *upstream) {
        (Stream::Tcp(client), Stream::Tcp(upstream)) => {
            relay_tcp(ctx, client, upstream, idle_timeout, buffer_size).await
        }
        (client, upstream) => Box::pin(relay_streams(ctx, client, upstream, idle_timeout, buffer_size)).await,
    };
    set_reset_on_close(upstream, &outcome);
    outcome
}

/// Makes `upstream` reset rather than close with a FIN when it is dropped, if
/// [`reset_upstream_on_close`] says so for the relay that just ended.
pub(crate) fn set_reset_on_close(upstream: &Stream, outcome: &RelayOutcome) {
    if reset_upstream_on_close(outcome) {
        // A failure here leaves the ordinary close, which is correct too.
        let _ = socket2::SockRef::from(upstream.tcp()).set_linger(Some(Duration::ZERO));
    }
}

/// Whether the upstream connection of a finished relay is to be reset (SO_LINGER 0) rather than
/// closed with a FIN when it is dropped: when the relay gave up on the connection (the client
/// failed or reset it, or nothing moved for the idle timeout) before the upstream sent its FIN.
///
/// A FIN would make the proxy the side that closes first, so its socket would sit in TIME_WAIT
/// on an ephemeral port for a minute: under churn (clients that reset after their response, at
/// thousands of connections per second) that is tens of thousands of ports, which every later
/// connect to the same target has to search past. The reset leaves no TIME_WAIT anywhere, and
/// loses nothing anyone still waits for: the client is gone or silent, and whatever the upstream
/// had yet to receive from it would only have produced an answer nobody reads. An upstream that
/// already sent its FIN is closed normally: its close is then passive and leaves no TIME_WAIT
/// here. HAProxy does the same with its server connections ("linger risk").
fn reset_upstream_on_close(outcome: &RelayOutcome) -> bool {
    let gave_up = matches!(
        outcome.end,
        RelayEnd::Error(Side::Client, _) | RelayEnd::IdleTimeout | RelayEnd::Filtered
    );
    gave_up && !outcome.upstream_ended
}

/// [`relay`] where either side speaks TLS: bytes pass through user space both ways (rustls
/// encrypts and decrypts them), each direction through its own buffer.
async fn relay_streams(
    ctx: &WorkerContext,
    client: &mut Stream,
    upstream: &mut Stream,
    idle_timeout: Duration,
    buffer_size: usize,
) -> RelayOutcome {
    let activity = Cell::new(0u64);
    let (up, down) = (Flow::default(), Flow::default());
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = tokio::io::split(upstream);
    let up_dir = (Side::Client, Side::Upstream);
    let down_dir = (Side::Upstream, Side::Client);
    let directions = async {
        tokio::try_join!(
            pump_streams(ctx, client_read, upstream_write, up_dir, &up, &activity, buffer_size),
            pump_streams(
                ctx,
                upstream_read,
                client_write,
                down_dir,
                &down,
                &activity,
                buffer_size
            ),
        )
    };
    until_done(directions, &activity, idle_timeout, (&up, &down)).await
}

/// Copies `from` to `to` until end of stream, then ends `to`'s direction (close_notify and a FIN
/// on TLS).
async fn pump_streams(
    ctx: &WorkerContext,
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    (from_side, to_side): (Side, Side),
    flow: &Flow,
    activity: &Cell<u64>,
    buffer_size: usize,
) -> Result<(), SideError> {
    let mut buf = ctx.buffer(buffer_size);
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                flow.ended.set(true);
                break;
            }
            Ok(n) => n,
            Err(e) => return Err((from_side, e.kind())),
        };
        to.write_all(&buf[..n]).await.map_err(|e| (to_side, e.kind()))?;
        to.flush().await.map_err(|e| (to_side, e.kind()))?;
        flow.moved(n, activity);
    }
    let _ = to.shutdown().await;
    Ok(())
}

/// [`relay`] between two plain TCP sockets, which may splice.
async fn relay_tcp(
    ctx: &WorkerContext,
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    idle_timeout: Duration,
    buffer_size: usize,
) -> RelayOutcome {
    let activity = Cell::new(0u64);
    let (up, down) = (Flow::default(), Flow::default());
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    let up_dir = (Side::Client, Side::Upstream);
    let down_dir = (Side::Upstream, Side::Client);
    let directions = async {
        tokio::try_join!(
            pump(ctx, client_read, upstream_write, up_dir, &up, &activity, buffer_size),
            pump(
                ctx,
                upstream_read,
                client_write,
                down_dir,
                &down,
                &activity,
                buffer_size
            ),
        )
    };
    until_done(directions, &activity, idle_timeout, (&up, &down)).await
}

/// Runs both directions until they end, one fails, or nothing moves for `idle_timeout`; then
/// what they moved.
pub(crate) async fn until_done(
    directions: impl std::future::Future<Output = Result<((), ()), SideError>>,
    activity: &Cell<u64>,
    idle_timeout: Duration,
    (up, down): (&Flow, &Flow),
) -> RelayOutcome {
    let end = tokio::select! {
        biased;
        result = directions => match result {
            Ok(_) => RelayEnd::Completed,
            Err((side, kind)) => RelayEnd::Error(side, kind),
        },
        _ = idle_watch(activity, idle_timeout) => RelayEnd::IdleTimeout,
    };
    RelayOutcome {
        end,
        bytes_up: up.bytes.get(),
        bytes_down: down.bytes.get(),
        first_byte_up: up.first.get(),
        first_byte_down: down.first.get(),
        upstream_ended: down.ended.get(),
    }
}

/// Resolves once `activity` has not changed for `idle` (checked every quarter of it, so the close
/// comes between 1 and 1.25 times `idle` after the last byte).
async fn idle_watch(activity: &Cell<u64>, idle: Duration) {
    let tick = (idle / 4).max(Duration::from_millis(1));
    let mut seen = activity.get();
    let mut quiet = Duration::ZERO;
    loop {
        tokio::time::sleep(tick).await;
        let now = activity.get();
        if now == seen {
            quiet += tick;
            if quiet >= idle {
                return;
            }
        } else {
            seen = now;
            quiet = Duration::ZERO;
        }
    }
}

pub(crate) type SideError = (Side, io::ErrorKind);

/// Copies `from` to `to` until end of stream, then half-closes `to`.
///
/// Reads go through tokio's `AsyncRead`, which treats a short read as "socket drained" and waits
/// for the next readiness event instead of paying for a read that would return EAGAIN.
async fn pump(
    ctx: &WorkerContext,
    mut from: ReadHalf<'_>,
    to: WriteHalf<'_>,
    (from_side, to_side): (Side, Side),
    flow: &Flow,
    activity: &Cell<u64>,
    buffer_size: usize,
) -> Result<(), SideError> {
    let (to, mut buf) = (to.as_ref(), ctx.buffer(buffer_size));
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                flow.ended.set(true);
                break;
            }
            Ok(n) => n,
            Err(e) => return Err((from_side, e.kind())),
        };
        write_all(to, &buf[..n]).await.map_err(|e| (to_side, e.kind()))?;
        flow.moved(n, activity);
        if n == buf.len() && ctx.splice {
            drop(buf);
            return splice_pump(ctx, from.as_ref(), to, (from_side, to_side), flow, activity).await;
        }
    }
    half_close(to);
    Ok(())
}

/// The bulk half of [`pump`]: socket to pipe to socket, never through user space.
async fn splice_pump(
    ctx: &WorkerContext,
    from: &TcpStream,
    to: &TcpStream,
    (from_side, to_side): (Side, Side),
    flow: &Flow,
    activity: &Cell<u64>,
) -> Result<(), SideError> {
    let mut pipe = ctx.take_pipe().map_err(|e| (from_side, e.kind()))?;
    let result = async {
        loop {
            from.readable().await.map_err(|e| (from_side, e.kind()))?;
            let n = match from.try_io(Interest::READABLE, || pipe.fill_from(from.as_raw_fd())) {
                Ok(0) => {
                    flow.ended.set(true);
                    return Ok(());
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err((from_side, e.kind())),
            };
            while !pipe.is_empty() {
                match to.try_io(Interest::WRITABLE, || pipe.drain_into(to.as_raw_fd())) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        to.writable().await.map_err(|e| (to_side, e.kind()))?;
                    }
                    Err(e) => return Err((to_side, e.kind())),
                }
            }
            flow.moved(n, activity);
        }
    }
    .await;
    ctx.return_pipe(pipe);
    result?;
    half_close(to);
    Ok(())
}

/// Sends FIN on `stream`; a peer that is already gone is not an error here.
fn half_close(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Write);
}
