//! One HTTP client connection: wait for a request without holding a buffer, read its head,
//! route it, answer it (locally or by proxying), log it, and go on while keep-alive lasts.
//! Pipelined requests wait in the read buffer and are answered in order.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use rampart_proto::h1::{parse_request, ChunkedDecoder, Field, Framing, H1Error, RequestHead, Version};
use tokio::net::TcpStream;

use super::access_log::{write_line, AccessRecord};
use super::exchange::{self, Outcome, ProxyRequest};
use super::head_out::{write_request_head, RequestOut};
use super::iobuf::IoBuf;
use super::local::write_response;
use super::park::Parked;
use super::route::{RequestView, Route, RouteAction, RouteFilters};
use crate::relay::write_all;
use crate::snapshot::{HttpListener, ListenerProtocol, Snapshot};
use crate::worker::{bump, drop_by, OpenSlot, WorkerContext};

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
    if end == Next::Idle {
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

/// How long a connection stays in its active state waiting for the next request before it
/// gives its buffers back and waits as idle.
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

    /// Routes and answers one request; returns the outcome and the route taken.
    async fn handle(&mut self, client: &mut TcpStream, head: &RequestHead) -> (Outcome, Option<&'a Route>) {
        if self.wants_access_log() {
            capture_for_log(&mut self.log_scratch, &self.fields, self.inbuf.filled(), head);
        }
        let buf = self.inbuf.filled();
        let slice = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
        let method = slice(head.method);
        let target = slice(head.target);
        let (path, query) = split_target(target);
        let host = head.host.map(|h| strip_port(slice(h))).unwrap_or(b"");
        let view = RequestView {
            method,
            host,
            path,
            query,
            buf,
            fields: &self.fields,
        };
        let routes: &'a [Route] = &self.http.routes;
        let route = routes.iter().find(|r| r.matcher.matches(&view));
        let head_only = method == b"HEAD";
        // A request whose body we do not read ends its connection after a local answer.
        let keep = head.keep_alive && head.framing == Framing::None;
        let Some(route) = route else {
            self.inbuf.consume(head.len);
            return (
                self.answer_local(client, 404, &[], b"404 Not Found\n", keep, head_only)
                    .await,
                None,
            );
        };
        let taken = Some(route);
        match &route.action {
            RouteAction::Respond { status, headers, body } => {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                self.inbuf.consume(head.len);
                let o = self
                    .answer_local(client, *status, &headers, body, keep, head_only)
                    .await;
                (o, taken)
            }
            RouteAction::Redirect {
                status,
                location,
                keep_path,
            } => {
                let mut to = location.clone();
                if *keep_path {
                    to.push_str(&String::from_utf8_lossy(target));
                }
                self.inbuf.consume(head.len);
                let body = format!("{status} redirect to {to}\n");
                let o = self
                    .answer_local(client, *status, &[("location", &to)], body.as_bytes(), keep, head_only)
                    .await;
                (o, taken)
            }
            RouteAction::Proxy { upstream } => (self.proxy(client, head, route, *upstream, head_only).await, taken),
        }
    }

    async fn proxy(
        &mut self,
        client: &mut TcpStream,
        head: &RequestHead,
        route: &Route,
        upstream: usize,
        head_only: bool,
    ) -> Outcome {
        let filters: &RouteFilters = &route.filters;
        if let (Framing::Length(n), Some(max)) = (head.framing, filters.max_body_size) {
            if n > max {
                self.inbuf.consume(head.len);
                return exchange::local(client, &mut self.out, 413, "body_too_large", head_only).await;
            }
        }
        if head.framing == Framing::Chunked {
            // Check the body bytes that came with the head before anything goes upstream, so a
            // malformed or oversized chunked body sent in one piece never reaches a backend.
            let mut decoder = ChunkedDecoder::new();
            let early = decoder.advance(&self.inbuf.filled()[head.len..]);
            let too_large = filters.max_body_size.is_some_and(|max| decoder.declared_size() > max);
            if early.is_err() || too_large {
                self.inbuf.consume(head.len);
                let (status, why) = if too_large {
                    (413, "body_too_large")
                } else {
                    (400, "bad_request_body")
                };
                return exchange::local(client, &mut self.out, status, why, head_only).await;
            }
        }
        let buf = self.inbuf.filled();
        let slice = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
        let method = slice(head.method);
        let target = slice(head.target);
        let rewritten = rewrite_target(target, filters);
        self.head_out.clear();
        write_request_head(
            &mut self.head_out,
            &RequestOut {
                buf,
                fields: &self.fields,
                method,
                target: &rewritten,
                framing: head.framing,
                upgrade: head.upgrade,
                host: head.host.map(slice),
                default_host: &self.snapshot.upstreams[upstream].name,
                client_ip: &self.client_ip,
                forwarded: self.http.forwarded,
                ops: &filters.request_headers,
            },
        );
        let idempotent = matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE");
        let req = ProxyRequest {
            snapshot: self.snapshot,
            listener_name: self.listener_name,
            upstream,
            client_ip: self.peer.ip(),
            hash_key: super::affinity::request_key(
                &self.snapshot.upstreams[upstream],
                self.peer.ip(),
                buf,
                &self.fields,
            ),
            idempotent,
            head_method: head_only,
            framing: head.framing,
            expect_continue: head.expect_continue,
            upgrade: head.upgrade,
            client_keep_alive: head.keep_alive,
            client_http10: head.version == Version::Http10,
            max_body_size: filters.max_body_size,
            response_ops: &filters.response_headers,
            client_body_timeout: self.http.client_header_timeout,
            measure: self.wants_access_log(),
            response_status: Default::default(),
        };
        self.inbuf.consume(head.len);
        // The head now lives in `head_out`; with no body bytes waiting, the read buffer goes back
        // to the pool before the (possibly slow) upstream connect.
        self.inbuf.release_if_empty(self.ctx);
        let head_out = std::mem::take(&mut self.head_out);
        let outcome = exchange::proxy(self.ctx, &req, client, &mut self.inbuf, &head_out, &mut self.out).await;
        self.head_out = head_out;
        outcome
    }

    async fn answer_local(
        &mut self,
        client: &mut TcpStream,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
        keep: bool,
        head_only: bool,
    ) -> Outcome {
        self.out.clear();
        write_response(&mut self.out, status, headers, body, !keep, head_only);
        let ok = write_all(client, &self.out).await.is_ok();
        Outcome {
            status,
            keep_client: keep && ok,
            target: None,
            upstream_time: None,
            bytes_out: if ok { self.out.len() as u64 } else { 0 },
            error: if ok { None } else { Some("client_error") },
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
        let mut parts: [&[u8]; 5] = [b""; 5];
        let mut rest = &self.log_scratch[..];
        for p in parts.iter_mut() {
            if rest.len() < 4 {
                break;
            }
            let n = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            *p = &rest[4..4 + n];
            rest = &rest[4 + n..];
        }
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

/// Copies what the access log needs before the head's bytes are consumed: method, target, host,
/// referer and user agent, each behind its length.
fn capture_for_log(scratch: &mut Vec<u8>, fields: &[Field], buf: &[u8], head: &RequestHead) {
    let field = |name: &[u8]| {
        fields
            .iter()
            .find(|f| f.name(buf).eq_ignore_ascii_case(name))
            .map_or(&b""[..], |f| f.value(buf))
    };
    let slice = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
    scratch.clear();
    for part in [
        slice(head.method),
        slice(head.target),
        head.host.map(slice).unwrap_or(b""),
        field(b"referer"),
        field(b"user-agent"),
    ] {
        scratch.extend_from_slice(&(part.len() as u32).to_le_bytes());
        scratch.extend_from_slice(part);
    }
}

/// The path and query of a request target (origin-form or absolute-form).
pub fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    let path_start = if target.first() == Some(&b'/') {
        0
    } else if let Some(scheme_end) = target.windows(3).position(|w| w == b"://") {
        let authority = scheme_end + 3;
        target[authority..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(target.len(), |p| authority + p)
    } else {
        0
    };
    let rest = &target[path_start..];
    match rest.iter().position(|&b| b == b'?') {
        Some(q) => (&rest[..q], &rest[q + 1..]),
        None => (if rest.is_empty() { b"/" } else { rest }, b""),
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
pub fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return host.iter().position(|&b| b == b']').map_or(host, |e| &host[..=e]);
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(c) if host[c + 1..].iter().all(u8::is_ascii_digit) => &host[..c],
        _ => host,
    }
}

/// The target to send upstream after the route's path rewrites (borrowed when unchanged).
fn rewrite_target<'a>(target: &'a [u8], filters: &RouteFilters) -> Cow<'a, [u8]> {
    if filters.prefix_rewrite.is_none() && filters.regex_rewrite.is_none() {
        return Cow::Borrowed(target);
    }
    let (path, query) = split_target(target);
    let mut path: Cow<'_, [u8]> = Cow::Borrowed(path);
    if let Some((from, to)) = &filters.prefix_rewrite {
        if path.starts_with(from.as_bytes()) {
            let mut p = to.as_bytes().to_vec();
            p.extend_from_slice(&path[from.len()..]);
            if p.first() != Some(&b'/') {
                p.insert(0, b'/');
            }
            path = Cow::Owned(p);
        }
    }
    if let Some((re, replacement)) = &filters.regex_rewrite {
        let replaced = re.replace(&path, replacement.as_bytes()).into_owned();
        path = Cow::Owned(replaced);
    }
    let mut out = path.into_owned();
    if !query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(query);
    }
    Cow::Owned(out)
}

fn error_name(e: H1Error) -> &'static str {
    match e.status() {
        414 => "request_line_too_long",
        431 => "header_too_large",
        _ => "bad_request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_into_path_and_query() {
        assert_eq!(split_target(b"/a/b?x=1"), (&b"/a/b"[..], &b"x=1"[..]));
        assert_eq!(split_target(b"/a"), (&b"/a"[..], &b""[..]));
        assert_eq!(split_target(b"http://h:1/p?q"), (&b"/p"[..], &b"q"[..]));
        assert_eq!(split_target(b"http://h"), (&b"/"[..], &b""[..]));
        assert_eq!(strip_port(b"example.com:8080"), b"example.com");
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
        assert_eq!(strip_port(b"example.com"), b"example.com");
    }

    #[test]
    fn rewrites() {
        let mut f = RouteFilters {
            prefix_rewrite: Some(("/api".into(), "".into())),
            ..Default::default()
        };
        assert_eq!(&*rewrite_target(b"/api/users?id=1", &f), b"/users?id=1");
        assert_eq!(&*rewrite_target(b"/api", &f), b"/");
        assert_eq!(&*rewrite_target(b"/other", &f), b"/other");
        f.prefix_rewrite = Some(("/v1/".into(), "/v2/".into()));
        assert_eq!(&*rewrite_target(b"/v1/x", &f), b"/v2/x");
        f.prefix_rewrite = None;
        f.regex_rewrite = Some((
            regex::bytes::Regex::new("^/user/([0-9]+)$").unwrap(),
            "/users?id=$1".into(),
        ));
        assert_eq!(&*rewrite_target(b"/user/42", &f), b"/users?id=42");
    }
}
