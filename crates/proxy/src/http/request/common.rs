//! The parts of a connection's request handling that every protocol shares: the listener's
//! settings in the current snapshot, buffers, the downstream side, and what happens when a
//! request is done (metrics and the access log).

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rampart_model::metrics::code_class;
use rampart_model::ListenerKey;
use rampart_model::{HttpListener, Listener};
use rampart_proto::h1::{Framing, Version};
use rampart_proto::message::RequestHead;

use super::{http_listener, RequestPath};
use crate::http::access_log::{captured, redact_query, write_line, AccessRecord};
use crate::http::attempts::observe;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{answer_error, ClientTerms, Downstream};
use crate::http::error::HttpError;
use crate::http::filter::{FilterRun, Outcome, Where};
use crate::http::iobuf::IoBuf;
use crate::http::trace::span::{self, RequestFacts};
use crate::http::trace::RequestTrace;
use crate::worker::WorkerContext;

impl<'a, T: ClientSide> RequestPath<'a, T> {
    /// The request state of one stream of a multiplexed connection (HTTP/2): `stream` reaches
    /// the client, the rest is the connection's. `stream` comes back when the current snapshot has
    /// no HTTP listener for `listener_key` (a reload removed it or made it a TCP listener).
    pub(crate) fn for_stream(
        ctx: &'a WorkerContext,
        stream: T,
        client: SocketAddr,
        client_ip: String,
        listener_key: ListenerKey,
    ) -> Result<Self, T> {
        let snapshot = ctx.snapshot();
        let Some((listener, http)) = http_listener(&snapshot, &listener_key) else {
            return Err(stream);
        };
        Ok(RequestPath {
            ctx,
            stream,
            client,
            client_from_header: false,
            slot: None,
            listener_key,
            client_ip,
            snapshot,
            listener,
            http,
            inbuf: IoBuf::default(),
            field_list: Vec::new(),
            out: Vec::new(),
            head_out: Vec::new(),
            log_scratch: Vec::new(),
        })
    }

    /// The HTTP settings of this connection's listener in the current snapshot.
    pub(crate) fn http(&self) -> &HttpListener {
        &self.http
    }

    /// This connection's listener in the current snapshot (always there: it is looked up in
    /// the same snapshot its index came from).
    pub(crate) fn listener_spec(&self) -> Option<&Listener> {
        self.snapshot.listeners.get(self.listener)
    }

    /// Takes the snapshot current now for the next request. When a reload removed this
    /// connection's listener (or made it a TCP listener), the previous snapshot stays and `false`
    /// says the connection must close after this request.
    pub(crate) fn follow_reload(&mut self) -> bool {
        let current = self.ctx.snapshot();
        if Rc::ptr_eq(&current, &self.snapshot) {
            return true;
        }
        match http_listener(&current, &self.listener_key) {
            Some((i, http)) => {
                self.snapshot = current;
                self.listener = i;
                self.http = http;
                true
            }
            None => false,
        }
    }

    /// Takes output buffers from the pool once a request needs them.
    pub(crate) fn ensure_out(&mut self) {
        if self.out.capacity() == 0 {
            self.out = self.ctx.http.take_write_buffer();
            self.head_out = self.ctx.http.take_write_buffer();
        }
    }

    /// Gives the read buffer back to the worker's pool between requests (unless a pipelined
    /// request waits in it). The write buffers stay until the connection goes idle
    /// ([`RequestPath::release_idle`]): a keep-alive client's next request usually comes within
    /// the linger, and taking and giving them for every request cost more than they hold.
    pub(crate) fn release_buffers(&mut self) {
        self.inbuf.release_if_empty(&self.ctx.http);
    }

    /// Gives the write buffers back to the worker's pool.
    fn release_write_buffers(&mut self) {
        if self.out.capacity() > 0 {
            self.ctx.http.give_write_buffer(std::mem::take(&mut self.out));
            self.ctx.http.give_write_buffer(std::mem::take(&mut self.head_out));
        }
    }

    /// A downstream side for one request on this connection, whose body (if it is read) is
    /// delimited as `body` says.
    pub(crate) fn downstream(&mut self, keep_alive: bool, http10: bool, head_only: bool, body: Framing) -> T::Down<'_> {
        let terms = ClientTerms {
            body_timeout: self.http().client_header_timeout,
            keep_alive,
            http10,
            head_only,
            body,
        };
        self.stream
            .downstream(&mut self.inbuf, &mut self.out, &self.ctx.http, terms)
    }

    /// Fails the request with `error`: its error answer, and the connection closes after it.
    pub(crate) async fn fail(&mut self, rctx: &mut RequestContext, error: HttpError, http10: bool, head_only: bool) {
        let mut down = self.downstream(false, http10, head_only, Framing::None);
        answer_error(&mut down, rctx, error).await;
        rctx.bytes_out = down.bytes_sent();
        rctx.body_bytes_out = down.body_bytes_sent();
    }

    /// The end of every request, whatever its protocol and however it ended (refused before
    /// routing, answered locally, proxied): its attempts' last word ([`observe::request_ended`]),
    /// the listener's and route's metrics, the access log, and the filters' log phase. Returns
    /// when it finished (the clock read once for all that follows).
    pub(crate) fn finish(&mut self, head: Option<&RequestHead>, rctx: &RequestContext, run: &mut FilterRun) -> Instant {
        observe::request_ended(self.ctx, &self.snapshot, rctx);
        let now = Instant::now();
        let took = now.saturating_duration_since(rctx.began);
        let id = self.ctx.id;
        let received = self.inbuf.take_received();
        if let Some(listener) = self.listener_spec() {
            let cells = listener.metrics.worker(id);
            cells.bytes_in.add(received);
            cells.bytes_out.add(rctx.bytes_out);
        }
        let http = self.http();
        let route = rctx.route.and_then(|r| http.routes.get(r));
        let route_cells = route.map_or(&http.unrouted, |r| &r.metrics).worker(id);
        // A request that got no answer (its client went away first) has no status to count.
        if rctx.status != 0 {
            route_cells.requests[code_class(rctx.status)].add(1);
            route_cells.duration.observe(took);
        }
        if let Some(outcome) = rctx.cache {
            route_cells.cache[outcome as usize].add(1);
        }
        // A request refused before its head could be read has a trace of its own made here, for
        // its span and its log line.
        let refused = self.refused_trace(head, rctx);
        let trace = rctx.trace.as_deref().or(refused.as_ref());
        self.record_spans(head, rctx, run, (took, trace));
        self.write_access(head, rctx, run, (took, trace));
        if run.is_active() {
            let snapshot = self.snapshot.clone();
            let route_index = rctx.route.unwrap_or_default();
            let route = self.http.routes.get(route_index);
            let at = Where {
                worker: self.ctx,
                snapshot: &snapshot,
                listener: snapshot.listeners.get(self.listener).map_or("", |l| l.name.as_str()),
                route: route.map_or("", |r| r.name.as_str()),
                route_index,
                peer: self.client,
                scheme: self.stream.scheme(),
            };
            let outcome = Outcome {
                status: rctx.status,
                bytes_out: rctx.bytes_out,
                duration: took,
                error: rctx.error.map(HttpError::reason).or(rctx.filter_reason),
            };
            run.finish(route.map(|r| &r.filters), at, &outcome);
        }
        now
    }

    /// The trace of a request refused before its head could be read (none other has one of its
    /// own), when its spans go to a collector.
    fn refused_trace(&self, head: Option<&RequestHead>, rctx: &RequestContext) -> Option<RequestTrace> {
        let settings = self.snapshot.tracing.as_deref().filter(|s| s.export.is_some())?;
        let listener = self.snapshot.listeners.get(self.listener)?;
        if rctx.trace.is_some() || head.is_some() || !listener.traced {
            return None;
        }
        let random = || self.ctx.http.filters.random();
        Some(RequestTrace::continuing(None, None, settings, random))
    }

    /// The request's spans, when a collector takes them.
    fn record_spans(
        &self,
        head: Option<&RequestHead>,
        rctx: &RequestContext,
        run: &FilterRun,
        (took, trace): (Duration, Option<&RequestTrace>),
    ) {
        let Some(settings) = self.snapshot.tracing.as_deref().filter(|s| s.export.is_some()) else {
            return;
        };
        let Some(trace) = trace.filter(|t| t.recording) else {
            return;
        };
        let listener = self.snapshot.listeners.get(self.listener);
        let route = rctx.route.and_then(|r| self.http().routes.get(r));
        let facts = RequestFacts {
            head,
            listener: listener.map_or("", |l| l.name.as_str()),
            route: route.map(|r| r.name.as_str()),
            upstream: rctx.upstream.and_then(|u| self.snapshot.upstreams.get(u)),
            client_ip: &self.client_ip,
            scheme: self.stream.scheme(),
            protocol: head.map_or_else(|| self.stream.protocol(Version::Http11), |h| h.protocol),
            tls: self.stream.tls_info(),
            user: run.facts.user.as_deref(),
            request_id: run.facts.request_id.as_deref(),
            took,
        };
        span::record(self.ctx, settings, trace, rctx, &facts);
    }

    fn write_access(
        &self,
        head: Option<&RequestHead>,
        rctx: &RequestContext,
        run: &FilterRun,
        (took, trace): (Duration, Option<&RequestTrace>),
    ) {
        let (Some((path, format)), Some(wall)) = (&self.http().access_log, rctx.logged_at) else {
            return;
        };
        let parts = captured(&self.log_scratch);
        let route = rctx.route.and_then(|r| self.http().routes.get(r));
        // Query parameters that carry credentials (`api_key`) are blanked.
        let secrets: Vec<&str> = route.map_or(Vec::new(), |r| {
            r.filters
                .filters
                .iter()
                .filter_map(|f| f.secret_query_param())
                .collect()
        });
        let target = redact_query(parts[1], &secrets);
        let upstream = rctx.upstream.and_then(|u| self.snapshot.upstreams.get(u));
        let upstream_target = upstream
            .zip(rctx.target)
            .and_then(|(u, t)| u.targets.get(t))
            .map(|t| t.name.as_str());
        let record = AccessRecord {
            time: wall,
            client: self.client,
            method: parts[0],
            target: &target,
            version: head
                .map_or_else(|| self.stream.protocol(Version::Http11), |h| h.protocol)
                .as_str(),
            host: parts[2],
            referer: parts[3],
            user_agent: parts[4],
            status: rctx.status,
            bytes: rctx.bytes_out,
            body_bytes: rctx.body_bytes_out,
            route: route.map_or("", |r| r.name.as_str()),
            upstream_target,
            upstream_time: rctx.upstream_time,
            attempts: &rctx.attempts,
            upstream,
            total_time: took,
            error: rctx.error.map(HttpError::reason).or(rctx.filter_reason),
            tls: self.stream.tls_info(),
            request_id: run.facts.request_id.as_deref(),
            user: run.facts.user.as_deref(),
            cache: rctx.cache.map(|o| o.as_str()),
            trace,
        };
        let span = trace.map(|t| (t.outgoing.trace_id, t.outgoing.parent_id, t.outgoing.flags));
        self.ctx
            .push_traced_log_line(path, ("access", span), |out| write_line(out, *format, &record));
    }
    /// Gives everything back before waiting as an idle connection.
    pub(crate) fn release_idle(&mut self) {
        self.inbuf.release(&self.ctx.http);
        self.release_write_buffers();
        self.log_scratch = Vec::new();
        self.field_list = Vec::new();
    }
}
