//! The HTTP/1 mux: one client connection past the connection stage
//! ([`crate::http::connection`]): wait for a request without holding a buffer, read its head with
//! the HTTP/1 codec, hand it to the request layer ([`crate::http::request`]), and go on while
//! keep-alive lasts. Pipelined requests wait in the read buffer and are answered in order. An
//! idle connection leaves its task for the parking lot. Its downstream side is
//! [`downstream::H1Downstream`] (request bodies read by [`request_body`]).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use rampart_model::ListenerKey;
use rampart_proto::h1::{parse_request, H1Error};
use rampart_proto::h2map::{preface, Preface};
use rampart_proto::message::RequestHead;

use super::context::RequestContext;
use super::error::HttpError;
use super::filter::FilterRun;
use super::iobuf::IoBuf;
use super::request::{http_listener, RequestPath};
use super::state::HTTP_BUFFER_SIZE;
use crate::slot::Conn;
use crate::stream::Stream;
use crate::worker::{bump, WorkerContext};

mod client_side;
pub mod downstream;
pub mod request_body;

/// Serves an HTTP/1 connection until it closes or parks. Returns the connection when the client
/// sent the HTTP/2 preface instead (in clear, with prior knowledge): its `early` bytes are the
/// preface and whatever came with it, for the HTTP/2 side.
pub(crate) async fn serve_http1(ctx: &WorkerContext, conn: Conn) -> Option<Conn> {
    let mut connection = RequestPath::new(ctx, conn)?;
    let end = connection.run().await;
    if end == Next::Http2 {
        let early = connection.inbuf.filled().to_vec();
        connection.release_idle();
        return connection.into_conn(early);
    }
    connection.release_idle();
    // Bytes read after the last request (a partial head, say) count too.
    let received = connection.inbuf.take_received();
    if let Some(listener) = connection.listener_spec() {
        listener.metrics.worker(ctx.id).bytes_in.add(received);
    }
    if end == Next::Close && matches!(connection.stream, Stream::Tls(_)) {
        // A TLS client is told the close is deliberate (close_notify), as nginx and HAProxy do.
        connection.stream.shutdown_write();
    }
    let keepalive = connection.http().keepalive_timeout;
    // A keep-alive time no longer than the linger is over by now.
    if end == Next::Idle && keepalive > LINGER {
        tracing::debug!("parking idle connection from {}", connection.client);
        let conn = connection.into_conn(Vec::new())?;
        if let Some(parked) = ctx.http.parking.entry(conn, keepalive.saturating_sub(LINGER)) {
            // A refused entry is dropped: the connection closes.
            let _ = ctx.http.parking.park(parked);
        }
    }
    None
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
    /// The client sent the HTTP/2 preface.
    Http2,
}

/// The outcome of reading a request head.
enum HeadRead {
    Head(RequestHead),
    /// The client closed (or reset) between requests.
    Closed,
    Failed(HttpError),
}

impl<'a> RequestPath<'a, Stream> {
    /// The connection's state, or `None` when its listener is no longer an HTTP listener.
    fn new(ctx: &'a WorkerContext, conn: Conn) -> Option<Self> {
        let snapshot = ctx.snapshot();
        let listener_key = conn.listener_key();
        let (listener, http) = http_listener(&snapshot, &listener_key)?;
        let mut inbuf = IoBuf::default();
        inbuf.extend_from(&ctx.http, &conn.early);
        Some(RequestPath {
            ctx,
            stream: conn.stream,
            client: conn.client,
            client_from_header: conn.client_from_header,
            listener_key,
            slot: Some(conn.slot),
            client_ip: conn.client.ip().to_string(),
            snapshot,
            listener,
            http,
            inbuf,
            field_list: Vec::new(),
            out: Vec::new(),
            head_out: Vec::new(),
            log_scratch: Vec::new(),
        })
    }

    /// The connection again (for the parking lot, or for HTTP/2 with `early`, the bytes read and
    /// not yet used).
    fn into_conn(self, early: Vec<u8>) -> Option<Conn> {
        Some(Conn {
            stream: self.stream,
            client: self.client,
            client_from_header: self.client_from_header,
            early,
            handed_to: self.slot.as_ref().and_then(|slot| {
                let accepted = ListenerKey::Bound(rampart_model::Transport::Tcp, slot.listener().bind);
                (accepted != self.listener_key).then(|| self.listener_key.clone())
            }),
            slot: self.slot?,
        })
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
            if first && matches!(self.stream, Stream::Tcp(_)) {
                if let Some(h2) = self.http().http2 {
                    match self.sniff_preface().await {
                        Some(Preface::Http2) => return Next::Http2,
                        Some(Preface::Invalid) | None => return Next::Close,
                        // `http2 = "only"`: no HTTP/1.1 on this port, not even a 400.
                        Some(_) if h2.prior_knowledge_only => return Next::Close,
                        Some(_) => {}
                    }
                }
            }
            // Requests are handled in a boxed future that exists only while they keep coming
            // (one allocation per burst, not per request), so an idle connection's task holds
            // none of the request-handling state.
            match self.boxed_active().await {
                Next::Idle => first = false,
                Next::Close | Next::Http2 => return Next::Close,
            }
        }
    }

    /// Reads until the first bytes say whether they are the HTTP/2 preface (prior knowledge
    /// in clear); `None` when the client closed or stalled first.
    async fn sniff_preface(&mut self) -> Option<Preface> {
        let wait = self.http().client_header_timeout;
        loop {
            match preface(self.inbuf.filled()) {
                Preface::NeedMore => {}
                decided => return Some(decided),
            }
            let read = self.inbuf.read_from(&self.ctx.http, &mut self.stream, HTTP_BUFFER_SIZE);
            match tokio::time::timeout(wait, read).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return None,
            }
        }
    }

    /// [`RequestPath::active`], boxed in a plain function: built inside `run`, the future would
    /// also take room in `run`'s own state, which every idle connection carries.
    fn boxed_active(&mut self) -> Pin<Box<dyn Future<Output = Next> + '_>> {
        Box::pin(self.active())
    }

    /// Handles requests until the client pauses for [`LINGER`] or the connection must close.
    async fn active(&mut self) -> Next {
        // One timer for every pause of the burst, moved on after each request (later deadlines
        // cost tokio's timer wheel nothing).
        let pause = tokio::time::sleep_until(tokio::time::Instant::now() + LINGER);
        tokio::pin!(pause);
        loop {
            let mut rctx = RequestContext::new(self.http().access_log.is_some());
            let mut run = FilterRun::default();
            let head = match self.read_head().await {
                HeadRead::Head(h) => h,
                HeadRead::Closed => return Next::Close,
                HeadRead::Failed(error) => {
                    tracing::debug!("bad request from {}: {error}", self.client);
                    self.answer_bad_request(&mut rctx, &mut run, error).await;
                    return Next::Close;
                }
            };
            bump(&self.ctx.counters.http_requests, 1);
            self.ensure_out();
            // A draining worker answers this request and closes, saying so in the response.
            let may_keep = self.follow_reload() && !self.ctx.http.parking.is_closed();
            if rctx.logged_at.is_none() && self.http().access_log.is_some() {
                // A reload turned the access log on for this listener.
                rctx.logged_at = Some(std::time::SystemTime::now());
            }
            self.handle(&head, &mut rctx, &mut run, may_keep).await;
            let done = self.finish(Some(&head), &rctx, &mut run);
            // The head's bytes go back to the pool; its field list stays for the next head.
            let (bytes, field_list) = head.into_storage();
            self.ctx.http.give_bytes(bytes);
            self.field_list = field_list;
            if !rctx.keep_client {
                return Next::Close;
            }
            if self.inbuf.is_empty() {
                // Between requests the read buffer goes back (the write buffers stay for the linger).
                self.release_buffers();
                let linger = LINGER.min(self.http().keepalive_timeout);
                pause.as_mut().reset(tokio::time::Instant::from_std(done) + linger);
                tokio::select! {
                    biased;
                    readable = self.stream.readable() => {
                        if readable.is_err() {
                            return Next::Close;
                        }
                    }
                    () = &mut pause => return Next::Idle,
                }
            }
        }
    }

    async fn read_head(&mut self) -> HeadRead {
        let limits = self.http().limits;
        let header_timeout = self.http().client_header_timeout;
        let max = limits.max_head + 1;
        // The first read takes what is already there without arming a timer (or reading the
        // clock); only a head that needs to wait for bytes gets the header deadline.
        let (mut polled, mut deadline) = (false, None);
        // The head is parsed in place; once whole, it takes the bytes it was read into.
        let mut head = RequestHead::with_storage(Vec::new(), std::mem::take(&mut self.field_list));
        let read = loop {
            match parse_request(self.inbuf.filled(), &limits, &mut head) {
                Ok(Some(parsed)) => break Ok(parsed.len),
                Ok(None) => {}
                Err(e) => break Err(HeadRead::Failed(HttpError::BadRequest(e))),
            }
            let (state, inbuf, stream) = (&self.ctx.http, &mut self.inbuf, &mut self.stream);
            let now = match polled {
                false => std::future::poll_fn(|cx| Poll::Ready(inbuf.poll_read_from(cx, state, stream, max))).await,
                true => Poll::Pending,
            };
            let read = match now {
                Poll::Ready(r) => {
                    polled = true;
                    r
                }
                Poll::Pending => {
                    polled = true;
                    let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + header_timeout);
                    match tokio::time::timeout_at(at, inbuf.read_from(state, stream, max)).await {
                        Ok(r) => r,
                        Err(_) if inbuf.is_empty() => break Err(HeadRead::Closed),
                        Err(_) => break Err(HeadRead::Failed(HttpError::ClientHeaderTimeout)),
                    }
                }
            };
            match read {
                Ok(0) => break Err(HeadRead::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    break Err(HeadRead::Failed(HttpError::BadRequest(H1Error::HeadTooLarge)))
                }
                Err(_) => break Err(HeadRead::Closed),
            }
        };
        match read {
            Ok(len) => {
                let (bytes, at) = self.inbuf.take_head(&self.ctx.http, len);
                head.attach(bytes, at, len);
                HeadRead::Head(head)
            }
            Err(failed) => {
                self.field_list = head.into_storage().1;
                failed
            }
        }
    }

    /// Answers a request whose head could not be read, then lets the client read the answer
    /// before the connection closes (rather than meet a reset from unread bytes).
    async fn answer_bad_request(&mut self, rctx: &mut RequestContext, run: &mut FilterRun, error: HttpError) {
        self.ensure_out();
        self.log_scratch.clear();
        self.fail(rctx, error, false, false).await;
        self.finish(None, rctx, run);
        self.stream.shutdown_write();
        drain_briefly(&mut self.stream).await;
    }
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
