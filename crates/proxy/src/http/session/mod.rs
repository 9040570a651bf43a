//! One HTTP/1 client connection past the connection stage: wait for a request without holding a
//! buffer, read its head, route it with the snapshot current at that moment, answer it (locally
//! or by proxying), log it, and go on while keep-alive lasts. Pipelined requests wait in the read
//! buffer and are answered in order. An idle connection leaves its task for the parking lot.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use rampart_model::metrics::code_class;
use rampart_model::{HttpListener, Snapshot};
use rampart_proto::h1::{parse_request, Field, H1Error, RequestHead};

use super::access_log::{captured, write_line, AccessRecord};
use super::context::RequestContext;
use super::downstream::{Downstream, H1Downstream};
use super::error::HttpError;
use super::exchange::answer_error;
use super::iobuf::IoBuf;
use crate::slot::{Conn, ConnSlot};
use crate::stream::Stream;
use crate::worker::{bump, SharedSnapshot, WorkerContext};

mod request;

/// Serves a connection until it closes or parks.
pub async fn serve(ctx: &WorkerContext, conn: Conn) {
    let Some(mut connection) = Connection::new(ctx, conn) else {
        return;
    };
    let end = connection.run().await;
    connection.release_idle();
    // Bytes read after the last request (a partial head, say) count too.
    let received = connection.inbuf.take_received();
    let listener = &connection.snapshot.listeners[connection.listener];
    listener.metrics.worker(ctx.id).bytes_in.add(received);
    if end == Next::Close && matches!(connection.stream, Stream::Tls(_)) {
        // A TLS client is told the close is deliberate (close_notify), as nginx and HAProxy do.
        connection.stream.shutdown_write();
    }
    let keepalive = connection.http().keepalive_timeout;
    // A keep-alive time no longer than the linger is over by now.
    if end == Next::Idle && keepalive > LINGER {
        tracing::debug!("parking idle connection from {}", connection.client);
        let conn = connection.into_conn();
        if let Some(parked) = ctx.http.parking.entry(conn, keepalive.saturating_sub(LINGER)) {
            // A refused entry is dropped: the connection closes.
            let _ = ctx.http.parking.park(parked);
        }
    }
}

struct Connection<'a> {
    ctx: &'a WorkerContext,
    stream: Stream,
    client: SocketAddr,
    client_from_header: bool,
    slot: ConnSlot,
    /// The client's address as text, for X-Forwarded-For.
    client_ip: String,
    /// The snapshot the current (or last) request is routed with, and this connection's listener
    /// in it.
    snapshot: Rc<SharedSnapshot>,
    listener: usize,
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
    Failed(HttpError),
}

impl<'a> Connection<'a> {
    /// The connection's state, or `None` when its listener is no longer an HTTP listener.
    fn new(ctx: &'a WorkerContext, conn: Conn) -> Option<Self> {
        let snapshot = ctx.snapshot();
        let listener = conn.slot.listener().index_in(&snapshot)?;
        snapshot.listeners[listener].http()?;
        let mut inbuf = IoBuf::default();
        inbuf.extend_from(&ctx.http, &conn.early);
        Some(Connection {
            ctx,
            stream: conn.stream,
            client: conn.client,
            client_from_header: conn.client_from_header,
            slot: conn.slot,
            client_ip: conn.client.ip().to_string(),
            snapshot,
            listener,
            inbuf,
            fields: Vec::new(),
            out: Vec::new(),
            head_out: Vec::new(),
            log_scratch: Vec::new(),
        })
    }

    /// The connection again, for the parking lot.
    fn into_conn(self) -> Conn {
        Conn {
            stream: self.stream,
            client: self.client,
            client_from_header: self.client_from_header,
            early: Vec::new(),
            slot: self.slot,
        }
    }

    /// The HTTP settings of this connection's listener in the current snapshot.
    fn http(&self) -> &HttpListener {
        http_settings(&self.snapshot, self.listener)
    }

    /// Takes the snapshot current now for the next request. When a reload removed this
    /// connection's listener (or made it a TCP listener), the previous snapshot stays and `false`
    /// says the connection must close after this request.
    fn follow_reload(&mut self) -> bool {
        let current = self.ctx.snapshot();
        if Rc::ptr_eq(&current, &self.snapshot) {
            return true;
        }
        match self.slot.listener().index_in(&current) {
            Some(i) if current.listeners[i].http().is_some() => {
                self.snapshot = current;
                self.listener = i;
                true
            }
            _ => false,
        }
    }

    /// Serves requests until the connection must close ([`Next::Close`]) or has been idle long
    /// enough to be parked ([`Next::Idle`]). Without a parking lot it waits here instead.
    async fn run(&mut self) -> Next {
        let mut first = true;
        loop {
            if self.inbuf.is_empty() {
                // Idle: hand every buffer back and wait with the smallest possible task.
                self.release_idle();
                let parking = &self.ctx.http.parking;
                let wait = if first {
                    self.http().client_header_timeout
                } else if parking.is_closed() {
                    // The worker drains: an idle connection closes.
                    return Next::Close;
                } else if parking.available() {
                    return Next::Idle;
                } else {
                    self.http()
                        .keepalive_timeout
                        .saturating_sub(LINGER)
                        .max(Duration::from_millis(1))
                };
                match tokio::time::timeout(wait, self.stream.readable()).await {
                    Ok(Ok(())) => {}
                    _ => return Next::Close,
                }
                // `readable` may wake without data; only bytes make the connection active. One
                // poll of a read: data or EOF now, or back to waiting (holding nothing).
                let max = self.http().limits.max_head + 1;
                let (state, inbuf, stream) = (&self.ctx.http, &mut self.inbuf, &mut self.stream);
                match std::future::poll_fn(|cx| Poll::Ready(inbuf.poll_read_from(cx, state, stream, max))).await {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Next::Close,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Pending => continue,
                }
            }
            // Requests are handled in a boxed future that exists only while they keep coming
            // (one allocation per burst, not per request), so an idle connection's task holds
            // none of the request-handling state.
            match self.boxed_active().await {
                Next::Idle => first = false,
                Next::Close => return Next::Close,
            }
        }
    }

    /// [`Connection::active`], boxed in a plain function: built inside `run`, the future would
    /// also take room in `run`'s own state, which every idle connection carries.
    fn boxed_active(&mut self) -> Pin<Box<dyn Future<Output = Next> + '_>> {
        Box::pin(self.active())
    }

    /// Handles requests until the client pauses for [`LINGER`] or the connection must close.
    async fn active(&mut self) -> Next {
        loop {
            let mut rctx = RequestContext::new(self.http().access_log.is_some());
            let head = match self.read_head().await {
                HeadRead::Head(h) => h,
                HeadRead::Closed => return Next::Close,
                HeadRead::Failed(error) => {
                    tracing::debug!("bad request from {}: {error}", self.client);
                    self.answer_bad_request(&mut rctx, error).await;
                    return Next::Close;
                }
            };
            bump(&self.ctx.counters.http_requests, 1);
            self.ensure_out();
            let follows = self.follow_reload();
            if rctx.logged_at.is_none() && self.http().access_log.is_some() {
                // A reload turned the access log on for this listener.
                rctx.logged_at = Some(std::time::SystemTime::now());
            }
            self.handle(&head, &mut rctx, follows).await;
            self.finish(Some(&head), &rctx);
            if !rctx.keep_client {
                return Next::Close;
            }
            if self.inbuf.is_empty() {
                // Between requests the buffers go back to the pools (no allocation either way).
                self.release_buffers();
                let linger = LINGER.min(self.http().keepalive_timeout);
                match tokio::time::timeout(linger, self.stream.readable()).await {
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
            self.out = self.ctx.http.take_write_buffer();
            self.head_out = self.ctx.http.take_write_buffer();
        }
    }

    /// Gives the read and write buffers back to the worker's pools.
    fn release_buffers(&mut self) {
        self.inbuf.release_if_empty(&self.ctx.http);
        if self.out.capacity() > 0 {
            self.ctx.http.give_write_buffer(std::mem::take(&mut self.out));
            self.ctx.http.give_write_buffer(std::mem::take(&mut self.head_out));
        }
    }

    /// Gives everything back before waiting as an idle connection.
    fn release_idle(&mut self) {
        self.inbuf.release(&self.ctx.http);
        self.release_buffers();
        self.fields = Vec::new();
        self.log_scratch = Vec::new();
    }

    async fn read_head(&mut self) -> HeadRead {
        let limits = self.http().limits;
        let header_timeout = self.http().client_header_timeout;
        let max = limits.max_head + 1;
        let mut deadline = None;
        loop {
            match parse_request(self.inbuf.filled(), &limits, &mut self.fields) {
                Ok(Some(head)) => return HeadRead::Head(head),
                Ok(None) => {}
                Err(e) => return HeadRead::Failed(HttpError::BadRequest(e)),
            }
            // The first read takes what is already there without arming a timer; only a head
            // that needs to wait for bytes gets the header deadline.
            let (state, inbuf, stream) = (&self.ctx.http, &mut self.inbuf, &mut self.stream);
            let now = match deadline {
                None => std::future::poll_fn(|cx| Poll::Ready(inbuf.poll_read_from(cx, state, stream, max))).await,
                Some(_) => Poll::Pending,
            };
            let read = match now {
                Poll::Ready(r) => {
                    deadline = Some(tokio::time::Instant::now() + header_timeout);
                    r
                }
                Poll::Pending => {
                    let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + header_timeout);
                    match tokio::time::timeout_at(at, inbuf.read_from(state, stream, max)).await {
                        Ok(r) => r,
                        Err(_) if inbuf.is_empty() => return HeadRead::Closed,
                        Err(_) => return HeadRead::Failed(HttpError::ClientHeaderTimeout),
                    }
                }
            };
            match read {
                Ok(0) => return HeadRead::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    return HeadRead::Failed(HttpError::BadRequest(H1Error::HeadTooLarge))
                }
                Err(_) => return HeadRead::Closed,
            }
        }
    }

    /// A downstream side for one request on this connection.
    fn downstream(&mut self, keep_alive: bool, http10: bool, head_only: bool) -> H1Downstream<'_> {
        let body_timeout = self.http().client_header_timeout;
        H1Downstream::new(
            &mut self.stream,
            &mut self.inbuf,
            &mut self.out,
            &self.ctx.http,
            body_timeout,
            keep_alive,
            http10,
            head_only,
        )
    }

    /// Fails the request with `error`: its error answer, and the connection closes after it.
    async fn fail(&mut self, rctx: &mut RequestContext, error: HttpError, http10: bool, head_only: bool) {
        let mut down = self.downstream(false, http10, head_only);
        answer_error(&mut down, rctx, error).await;
        rctx.bytes_out = down.bytes_sent();
    }

    /// Answers a request whose head could not be read, then lets the client read the answer
    /// before the connection closes (rather than meet a reset from unread bytes).
    async fn answer_bad_request(&mut self, rctx: &mut RequestContext, error: HttpError) {
        self.ensure_out();
        self.log_scratch.clear();
        self.fail(rctx, error, false, false).await;
        self.finish(None, rctx);
        self.stream.shutdown_write();
        drain_briefly(&mut self.stream).await;
    }

    /// Counts a finished request in the listener's and route's metrics, and logs it.
    fn finish(&mut self, head: Option<&RequestHead>, rctx: &RequestContext) {
        let took = rctx.began.elapsed();
        let id = self.ctx.id;
        let listener = &self.snapshot.listeners[self.listener];
        let cells = listener.metrics.worker(id);
        cells.bytes_in.add(self.inbuf.take_received());
        cells.bytes_out.add(rctx.bytes_out);
        let http = self.http();
        let route = rctx.route.and_then(|r| http.routes.get(r));
        let route_cells = route.map_or(&http.unrouted, |r| &r.metrics).worker(id);
        // A request that got no answer (its client went away first) has no status to count.
        if rctx.status != 0 {
            route_cells.requests[code_class(rctx.status)].add(1);
            route_cells.duration.observe(took);
        }
        self.write_access(head, rctx, took);
    }

    fn write_access(&self, head: Option<&RequestHead>, rctx: &RequestContext, took: Duration) {
        let (Some((path, format)), Some(wall)) = (&self.http().access_log, rctx.logged_at) else {
            return;
        };
        let parts = captured(&self.log_scratch);
        let route = rctx.route.and_then(|r| self.http().routes.get(r));
        let upstream_target = rctx
            .upstream
            .zip(rctx.target)
            .and_then(|(u, t)| self.snapshot.upstreams[u].targets.get(t))
            .map(|t| t.name.as_str());
        let record = AccessRecord {
            time: wall,
            client: self.client,
            method: parts[0],
            target: parts[1],
            version: match head.map(|h| h.version) {
                Some(rampart_proto::h1::Version::Http10) => "HTTP/1.0",
                _ => "HTTP/1.1",
            },
            host: parts[2],
            referer: parts[3],
            user_agent: parts[4],
            status: rctx.status,
            bytes: rctx.bytes_out,
            route: route.map_or("", |r| r.name.as_str()),
            upstream_target,
            upstream_time: rctx.upstream_time,
            total_time: took,
            error: rctx.error.map(HttpError::reason),
            tls: self.stream.tls_info(),
        };
        self.ctx.push_log_line(path, |out| write_line(out, *format, &record));
    }
}

/// The HTTP settings of listener `index` of `snapshot`. A connection keeps only snapshots in which
/// its listener speaks HTTP (`Connection::new` and `Connection::follow_reload` check it).
fn http_settings(snapshot: &Snapshot, index: usize) -> &HttpListener {
    snapshot.listeners[index]
        .http()
        .expect("a connection keeps only snapshots where its listener speaks HTTP")
}

/// Reads whatever the client sent and discards it (used before closing after an error, so the
/// client sees our answer rather than a reset).
async fn drain_briefly(client: &mut Stream) {
    use tokio::io::AsyncReadExt;
    // Small on purpose: this buffer lives in the request's future.
    let mut sink = [0u8; 256];
    let _ = tokio::time::timeout(Duration::from_millis(50), async {
        while let Ok(n) = client.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests;
