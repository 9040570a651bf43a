//! One HTTP client connection: wait for a request without holding a buffer, read its head,
//! route it, answer it (locally or by proxying), log it, and go on while keep-alive lasts.
//! Pipelined requests wait in the read buffer and are answered in order.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use rampart_proto::h1::{parse_request, Field, H1Error, RequestHead, Version};
use tokio::net::TcpStream;

use super::access_log::{captured, write_line, AccessRecord};
use super::exchange::{self, Outcome};
use super::iobuf::IoBuf;
use super::park::Parked;
use crate::relay::write_all;
use crate::worker::{bump, drop_by, OpenSlot, WorkerContext};
use rampart_model::route::{Route, RouteAction};
use rampart_model::{HttpListener, ListenerProtocol, Snapshot};

mod request;

/// Serves one accepted client connection of HTTP listener `listener` (an index into
/// `snapshot.listeners`).
pub async fn serve(ctx: &WorkerContext, snapshot: Arc<Snapshot>, listener: usize, client: TcpStream, peer: SocketAddr) {
    bump(&ctx.counters.accepted, 1);
    let Some(slot) = OpenSlot::take(
        &snapshot.listeners[listener].open_connections,
        snapshot.listeners[listener].max_connections,
    ) else {
        bump(&ctx.counters.rejected_over_limit, 1);
        return;
    };
    // From here the connection's place in the limit and in the `open` gauge is released by
    // whoever ends it: this task, or the parking lot (see [`close_parked`]).
    slot.keep();
    bump(&ctx.counters.open, 1);
    // TCP_NODELAY comes from the listening socket (accepted sockets inherit it on Linux).
    live(ctx, snapshot, listener, client, peer).await;
}

/// Serves a connection the parking lot woke up (its client sent something or closed).
pub async fn resume(ctx: &WorkerContext, parked: Parked) {
    let peer = parked.stream.peer_addr();
    match (peer, TcpStream::from_std(parked.stream)) {
        (Ok(peer), Ok(client)) => live(ctx, parked.snapshot, parked.listener as usize, client, peer).await,
        _ => release(ctx, &parked.snapshot, parked.listener as usize),
    }
}

/// Closes a parked connection (its keep-alive time is over, or the worker drains).
pub fn close_parked(ctx: &WorkerContext, parked: Parked) {
    release(ctx, &parked.snapshot, parked.listener as usize);
}

/// Gives back a connection's place in its listener's limit and in the `open` gauge.
fn release(ctx: &WorkerContext, snapshot: &Snapshot, listener: usize) {
    if let Some(l) = snapshot.listeners.get(listener) {
        drop(OpenSlot::adopt(&l.open_connections));
    }
    drop_by(&ctx.counters.open, 1);
}

/// Runs a connection until it closes, or parks it once it goes idle.
async fn live(ctx: &WorkerContext, snapshot: Arc<Snapshot>, index: usize, mut client: TcpStream, peer: SocketAddr) {
    let listener = &snapshot.listeners[index];
    let ListenerProtocol::Http(http) = &listener.protocol else {
        release(ctx, &snapshot, index);
        return;
    };
    let keepalive = http.keepalive_timeout;
    let mut conn = Connection {
        ctx,
        snapshot: &snapshot,
        listener_name: &listener.name,
        http,
        peer,
        client_ip: peer.ip().to_string(),
        inbuf: IoBuf::default(),
        fields: Vec::new(),
        out: Vec::new(),
        head_out: Vec::new(),
        log_scratch: Vec::new(),
    };
    let end = conn.run(&mut client).await;
    conn.release_idle();
    drop(conn);
    // A keep-alive time no longer than the linger is over by now.
    if end == Next::Idle && keepalive > LINGER {
        log::debug!("listener {}: parking idle connection from {peer}", listener.name);
        if let Ok(stream) = client.into_std() {
            let parked = ctx
                .parking
                .entry(stream, snapshot, index as u32, keepalive.saturating_sub(LINGER));
            if let Err(refused) = ctx.parking.park(parked) {
                close_parked(ctx, refused);
            }
            return;
        }
    }
    release(ctx, &snapshot, index);
}

struct Connection<'a> {
    ctx: &'a WorkerContext,
    snapshot: &'a Snapshot,
    listener_name: &'a str,
    http: &'a HttpListener,
    peer: SocketAddr,
    /// The client's address as text, for X-Forwarded-For.
    client_ip: String,
    inbuf: IoBuf,
    fields: Vec<Field>,
    out: Vec<u8>,
    head_out: Vec<u8>,
    /// Copies of the request's method, target, host, referer and user agent for the access log.
    log_scratch: Vec<u8>,
}

/// How long a connection stays in its active state waiting for the next request before it is
/// parked (see [`crate::http::park`]).
const LINGER: Duration = Duration::from_secs(1);

/// What a burst of requests (or a connection) ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The client paused; wait for it as an idle connection.
    Idle,
    Close,
}

/// The outcome of reading a request head.
enum HeadRead {
    Head(RequestHead),
    /// The client closed (or reset) between requests.
    Closed,
    /// Bytes came but not a whole head in time.
    Timeout,
    Invalid(H1Error),
}

impl<'a> Connection<'a> {
    /// Serves requests until the connection must close ([`Next::Close`]) or has been idle long
    /// enough to be parked ([`Next::Idle`]). Without a parking lot it waits here instead.
    async fn run(&mut self, client: &mut TcpStream) -> Next {
        let mut first = true;
        loop {
            if self.inbuf.is_empty() {
                // Idle: hand every buffer back and wait with the smallest possible task.
                self.release_idle();
                let wait = if first {
                    self.http.client_header_timeout
                } else if self.ctx.parking.is_closed() {
                    // The worker drains: an idle connection closes.
                    return Next::Close;
                } else if self.ctx.parking.available() {
                    return Next::Idle;
                } else {
                    self.http
                        .keepalive_timeout
                        .saturating_sub(LINGER)
                        .max(Duration::from_millis(1))
                };
                match tokio::time::timeout(wait, client.readable()).await {
                    Ok(Ok(())) => {}
                    _ => return Next::Close,
                }
                // `readable` may wake without data; only bytes make the connection active. One
                // poll of a read: data or EOF now, or back to waiting (holding nothing).
                let max = self.http.limits.max_head + 1;
                let (ctx, inbuf) = (self.ctx, &mut self.inbuf);
                match std::future::poll_fn(|cx| Poll::Ready(inbuf.poll_read_from(cx, ctx, client, max))).await {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Next::Close,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Pending => continue,
                }
            }
            // Requests are handled in a boxed future that exists only while they keep coming
            // (one allocation per burst, not per request), so an idle connection's task holds
            // none of the request-handling state.
            match self.boxed_active(client).await {
                Next::Idle => first = false,
                Next::Close => return Next::Close,
            }
        }
    }

    /// [`Connection::active`], boxed in a plain function: built inside `run`, the future would
    /// also take room in `run`'s own state, which every idle connection carries.
    fn boxed_active<'c>(&'c mut self, client: &'c mut TcpStream) -> Pin<Box<dyn Future<Output = Next> + 'c>> {
        Box::pin(self.active(client))
    }

    /// Handles requests until the client pauses for [`LINGER`] or the connection must close.
    async fn active(&mut self, client: &mut TcpStream) -> Next {
        loop {
            let measure = self.wants_access_log();
            let started = measure.then(|| (Instant::now(), SystemTime::now()));
            let head = match self.read_head(client).await {
                HeadRead::Head(h) => h,
                HeadRead::Closed => return Next::Close,
                HeadRead::Timeout => {
                    self.ensure_out();
                    self.answer_error(client, 408, "client_header_timeout", started).await;
                    return Next::Close;
                }
                HeadRead::Invalid(e) => {
                    log::debug!("listener {}: bad request from {}: {e}", self.listener_name, self.peer);
                    self.ensure_out();
                    self.answer_error(client, e.status(), error_name(e), started).await;
                    return Next::Close;
                }
            };
            bump(&self.ctx.counters.http_requests, 1);
            self.ensure_out();
            let (outcome, route) = self.handle(client, &head).await;
            if let Some(started) = started {
                self.write_access(Some(&head), &outcome, route, started);
            }
            if !outcome.keep_client {
                return Next::Close;
            }
            if self.inbuf.is_empty() {
                // Between requests the buffers go back to the pools (no allocation either way).
                self.release_buffers();
                let linger = LINGER.min(self.http.keepalive_timeout);
                match tokio::time::timeout(linger, client.readable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Next::Close,
                    Err(_) => return Next::Idle,
                }
            }
        }
    }

    /// Takes output buffers from the pool once a request needs them.
    fn ensure_out(&mut self) {
        if self.out.capacity() == 0 {
            self.out = self.ctx.take_out_buffer();
            self.head_out = self.ctx.take_out_buffer();
        }
    }

    /// Gives the read and write buffers back to the worker's pools.
    fn release_buffers(&mut self) {
        self.inbuf.release_if_empty(self.ctx);
        if self.out.capacity() > 0 {
            self.ctx.give_out_buffer(std::mem::take(&mut self.out));
            self.ctx.give_out_buffer(std::mem::take(&mut self.head_out));
        }
    }

    /// Gives everything back before waiting as an idle connection.
    fn release_idle(&mut self) {
        self.inbuf.release(self.ctx);
        self.release_buffers();
        self.fields = Vec::new();
        self.log_scratch = Vec::new();
    }

    async fn read_head(&mut self, client: &mut TcpStream) -> HeadRead {
        let limits = self.http.limits;
        let max = limits.max_head + 1;
        let mut deadline = None;
        loop {
            match parse_request(self.inbuf.filled(), &limits, &mut self.fields) {
                Ok(Some(head)) => return HeadRead::Head(head),
                Ok(None) => {}
                Err(e) => return HeadRead::Invalid(e),
            }
            // The first read takes what is already there without arming a timer; only a head
            // that needs to wait for bytes gets the header deadline.
            let (ctx, inbuf) = (self.ctx, &mut self.inbuf);
            let now = match deadline {
                None => std::future::poll_fn(|cx| Poll::Ready(inbuf.poll_read_from(cx, ctx, client, max))).await,
                Some(_) => Poll::Pending,
            };
            let read = match now {
                Poll::Ready(r) => {
                    deadline = Some(tokio::time::Instant::now() + self.http.client_header_timeout);
                    r
                }
                Poll::Pending => {
                    let at =
                        *deadline.get_or_insert_with(|| tokio::time::Instant::now() + self.http.client_header_timeout);
                    match tokio::time::timeout_at(at, self.inbuf.read_from(self.ctx, client, max)).await {
                        Ok(r) => r,
                        Err(_) if self.inbuf.is_empty() => return HeadRead::Closed,
                        Err(_) => return HeadRead::Timeout,
                    }
                }
            };
            match read {
                Ok(0) => return HeadRead::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    return HeadRead::Invalid(H1Error::HeadTooLarge)
                }
                Err(_) => return HeadRead::Closed,
            }
        }
    }

    async fn answer_error(
        &mut self,
        client: &mut TcpStream,
        status: u16,
        why: &'static str,
        started: Option<(Instant, SystemTime)>,
    ) {
        self.out.clear();
        super::local::write_error(&mut self.out, status, true, false);
        let ok = write_all(client, &self.out).await.is_ok();
        if let Some(started) = started {
            self.log_scratch.clear();
            let outcome = Outcome {
                status,
                keep_client: false,
                target: None,
                upstream_time: None,
                bytes_out: if ok { self.out.len() as u64 } else { 0 },
                error: Some(why),
            };
            self.write_access(None, &outcome, None, started);
        }
        // Let the client read the answer rather than meet a reset from unread bytes.
        let _ = socket2::SockRef::from(&*client).shutdown(std::net::Shutdown::Write);
        exchange::drain_briefly(client).await;
    }

    fn wants_access_log(&self) -> bool {
        self.http.access_log.is_some()
    }

    fn write_access(
        &self,
        head: Option<&RequestHead>,
        outcome: &Outcome,
        route: Option<&Route>,
        (started, wall): (Instant, SystemTime),
    ) {
        let Some((path, format)) = &self.http.access_log else {
            return;
        };
        let parts = captured(&self.log_scratch);
        let upstream_target = match (route.map(|r| &r.action), outcome.target) {
            (Some(RouteAction::Proxy { upstream }), Some(t)) => self.snapshot.upstreams[*upstream]
                .targets
                .get(t)
                .map(|t| t.name.as_str()),
            _ => None,
        };
        let record = AccessRecord {
            time: wall,
            client: self.peer,
            method: parts[0],
            target: parts[1],
            version: match head.map(|h| h.version) {
                Some(Version::Http10) => "HTTP/1.0",
                _ => "HTTP/1.1",
            },
            host: parts[2],
            referer: parts[3],
            user_agent: parts[4],
            status: outcome.status,
            bytes: outcome.bytes_out,
            route: route.map_or("", |r| r.name.as_str()),
            upstream_target,
            upstream_time: outcome.upstream_time,
            total_time: started.elapsed(),
            error: outcome.error,
        };
        self.ctx.push_log_line(path, |out| write_line(out, *format, &record));
    }
}

fn error_name(e: H1Error) -> &'static str {
    match e.status() {
        414 => "request_line_too_long",
        431 => "header_too_large",
        _ => "bad_request",
    }
}
