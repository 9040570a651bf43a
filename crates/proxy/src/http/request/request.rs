//! Answering one request, phase by phase, in [`RequestPath::handle`]: route it (`route_of`);
//! run its route's filters on the request head (they may answer, rewrite, edit headers or pick
//! another upstream); then the route's action: an answer of Rampart's own (respond, redirect,
//! 404), a static file (`super::static_answer`), or the upstream head written and the exchange
//! (`super::proxy_action`), everything said to the client passing the filters' response phases.
//! The access log and the filters' log phase are written by the caller.
//!
//! `handle` stays one function on purpose: split into a decision (route and filters) and an act
//! carried out by another future, the decision had to move between futures, which cost 350 to
//! 590 instructions per keep-alive request (measured with `bench/instructions.sh h1`, 2.4–4%).

use std::borrow::Cow;

use rampart_model::error_pages::MediaWeights;
use rampart_model::route::{RedirectTo, RequestView, RouteAction};
use rampart_model::split::SplitWay;
use rampart_model::HttpListener;
use rampart_proto::h1::Framing;
use rampart_proto::message::{BodyLength, RequestHead};

use super::action::{request_framing, Delivery};
use super::RequestPath;
use crate::http::access_log::capture_for_log;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::exchange::ProxyRequest;
use crate::http::filter::{client_ip, FilterRun, FilteredDownstream, RequestParts, Where};
use crate::http::head_out::Forwarding;
use crate::http::mirror;
use crate::http::static_files::{self, StaticRequest};
use crate::http::target::{request_target, split_target, RequestTarget};

impl<T: ClientSide> RequestPath<'_, T> {
    /// Routes and answers one request, recording what happened in `rctx` and the filters' run in
    /// `run`. `may_keep` is false when the connection is to close after this request: a reload
    /// removed its listener (the request is answered under the previous config), or the worker
    /// drains (the answer says `Connection: close`, so the client does not send another request
    /// into a closing connection).
    pub(crate) async fn handle(
        &mut self,
        head: &RequestHead,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
        may_keep: bool,
    ) {
        if rctx.logged_at.is_some() {
            capture_for_log(&mut self.log_scratch, head);
        }
        let snapshot = self.snapshot.clone();
        // The listener and its HTTP settings, read from the snapshot held for this request (the
        // settings are the ones `self.http` holds: both were set from this snapshot).
        let Some((listener, http)) = snapshot.listeners.get(self.listener).and_then(|l| Some((l, l.http()?))) else {
            return self.fail(rctx, HttpError::MissingConfig, false, false).await;
        };
        let listener_tls = listener.tls.as_deref();
        let method = head.method();
        let target = request_target(head.target(), head.host());
        let route = route_of(http, method, &target, head).and_then(|i| Some((i, http.routes.get(i)?)));
        rctx.route = route.map(|(i, _)| i);
        if let Some(settings) = snapshot.tracing.as_deref() {
            // A listener or route with `tracing = false` leaves the trace context as it came.
            if listener.traced && route.is_none_or(|(_, r)| r.traced) {
                let random = || self.ctx.http.filters.random();
                let trace = crate::http::trace::RequestTrace::of(head, settings, random);
                rctx.trace = Some(std::rc::Rc::new(trace));
            }
        }
        let head_only = method == b"HEAD";
        // A request whose body we do not read ends its connection after a local answer.
        let keep = may_keep && head.keep_alive;
        let http10 = head.http10();
        let framing = request_framing(head.body);
        let keep_after_local = keep && framing == Framing::None;
        // Read only where a page may be chosen by it.
        let pages = match route {
            Some((_, route)) => route.error_pages.as_deref(),
            None => http.error_pages.as_deref(),
        };
        let error_pages = pages.map(|p| (p, accept_weights(head)));
        let mut delivery = Delivery {
            filters: None,
            keep: keep_after_local,
            http10,
            head_only,
            framing,
            error_pages,
        };
        let Some((route_index, route)) = route else {
            let answer = LocalAnswer {
                status: 404,
                headers: &[],
                body: b"404 Not Found\n",
                close: !keep_after_local,
                error_page: true,
            };
            return self.answer_local(rctx, run, delivery, &answer).await;
        };
        let chain = &route.filters;
        let at = Where {
            worker: self.ctx,
            snapshot: &snapshot,
            listener: &listener.name,
            route: &route.name,
            route_index,
            peer: self.client,
            scheme: self.stream.scheme(),
        };
        delivery.filters = Some((chain, at));
        let mut parts = RequestParts::new(
            head,
            &target,
            Cow::Borrowed(&chain.request_edits),
            match route.action {
                RouteAction::Proxy { upstream } => Some(upstream),
                _ => None,
            },
        );
        if let RouteAction::Split(split) = &route.action {
            let draw = self.ctx.http.filters.random() as u32;
            let carries = |way: &SplitWay| {
                way.header.as_deref().is_some_and(|h| parts.header(h).is_some())
                    || way.cookie.as_deref().is_some_and(|c| parts.cookie(c).is_some())
            };
            parts.upstream = Some(split.choose(carries, draw));
        }
        if !chain.is_empty() {
            let client = client_ip(self.client.ip(), &http.trusted_proxies, &parts);
            run.start(self.ctx, chain, client);
            // Boxed: the filters' futures stay out of every request's state.
            if let Some(answer) = Box::pin(run.request_head(chain, at, &mut parts)).await {
                drop(parts);
                rctx.filter_reason = answer.reason;
                if let Some(trace) = rctx.trace.as_deref().filter(|t| t.recording) {
                    trace.refused_at.set(Some(std::time::Instant::now()));
                }
                let headers: Vec<(&str, &str)> = answer.headers.iter().map(|(n, v)| (n.as_ref(), v.as_str())).collect();
                let local = LocalAnswer {
                    status: answer.status,
                    headers: &headers,
                    body: &answer.body,
                    close: !keep_after_local,
                    error_page: answer.status >= 400,
                };
                return self.answer_local(rctx, run, delivery, &local).await;
            }
        }
        match &route.action {
            RouteAction::Respond { status, headers, body } => {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                drop(parts);
                let answer = LocalAnswer {
                    status: *status,
                    headers: &headers,
                    body,
                    close: !keep_after_local,
                    error_page: false,
                };
                self.answer_local(rctx, run, delivery, &answer).await
            }
            RouteAction::AcmeChallenge(acme) => {
                let token = target.path.strip_prefix(rampart_model::acme::HTTP01_PREFIX.as_bytes());
                // A token this instance does not know may be another's in a fleet: looked up in
                // the shared store by the control plane (rare: the CA's validations only).
                let answer = match token.and_then(|t| std::str::from_utf8(t).ok()) {
                    Some(t) => acme.http_answer_or_lookup(t).await,
                    None => None,
                };
                drop(parts);
                let local = match &answer {
                    Some(key_authorization) => LocalAnswer {
                        status: 200,
                        headers: &[("content-type", "application/octet-stream")],
                        body: key_authorization.as_bytes(),
                        close: !keep_after_local,
                        error_page: false,
                    },
                    None => LocalAnswer {
                        status: 404,
                        headers: &[],
                        body: b"no such ACME challenge\n",
                        close: !keep_after_local,
                        error_page: true,
                    },
                };
                self.answer_local(rctx, run, delivery, &local).await
            }
            RouteAction::Redirect { status, to } => {
                let to = self.redirect_location(to, &target);
                drop(parts);
                let body = format!("{status} redirect to {to}\n");
                let answer = LocalAnswer {
                    status: *status,
                    headers: &[("location", &to)],
                    body: body.as_bytes(),
                    close: !keep_after_local,
                    error_page: false,
                };
                self.answer_local(rctx, run, delivery, &answer).await
            }
            RouteAction::Static(files) => {
                let mut out = std::mem::take(&mut self.head_out);
                let mut fields = self.ctx.http.take_field_list();
                let request = StaticRequest {
                    method,
                    path: split_target(&parts.target).0,
                    client_path: target.path,
                    client_query: target.query,
                    headers: &parts,
                };
                let prepared = static_files::prepare(files, &request, &mut out, &mut fields);
                drop(parts);
                self.answer_static(rctx, run, delivery, prepared, &out, &fields, &chain.response_edits)
                    .await;
                self.head_out = out;
                self.ctx.http.give_field_list(fields);
            }
            RouteAction::Proxy { .. } | RouteAction::Split(_) => {
                // A filter may have picked another upstream.
                let upstream = parts.upstream.unwrap_or_default();
                rctx.upstream = Some(upstream);
                let Some(up) = snapshot.upstreams.get(upstream) else {
                    drop(parts);
                    return self.fail(rctx, HttpError::MissingConfig, http10, head_only).await;
                };
                let sticky_target = crate::http::exchange::sticky_target(up, |name| parts.cookie(name));
                // An absolute-form request names its host in the target, which wins over `Host`.
                let host = match target.from_authority {
                    true => Some(target.authority),
                    false => head.host(),
                };
                // Held aside while the exchange borrows the connection (and given back after).
                let client_ip = std::mem::take(&mut self.client_ip);
                let cert_field = listener_tls.and_then(|t| t.forward_client_cert.as_deref());
                let cert = cert_field.and_then(|_| self.stream.client_cert().map(str::to_owned));
                // Held aside as the client's address is: the exchange borrows the context (the
                // heads of its attempts and the context share it).
                let trace = rctx.trace.clone();
                let forwarding = Forwarding {
                    host,
                    replace_host: target.from_authority,
                    default_host: &up.name,
                    client_ip: &client_ip,
                    scheme: self.stream.scheme(),
                    forwarded: http.forwarded,
                    client_cert: cert_field.map(|name| (name, cert.as_deref())),
                    internal: false,
                    trace: trace.as_deref(),
                };
                parts.forwarding = Some(&forwarding);
                let (retries, retry_on) = ProxyRequest::retry_settings(up, route.retry);
                let mut req = ProxyRequest {
                    snapshot: &snapshot,
                    listener_name: &listener.name,
                    upstream,
                    up,
                    client: self.client,
                    local: up.send_proxy_protocol.and_then(|_| self.stream.local_addr().ok()),
                    hash_key: crate::http::affinity::request_key(up, self.client.ip(), head.bytes(), &head.fields),
                    idempotent: matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"),
                    head_method: head_only,
                    body: head.body,
                    expect_continue: head.expect_continue,
                    upgrade: head.upgrade,
                    response_ops: &chain.response_edits,
                    sticky_target,
                    retries,
                    retry_on,
                    mirror: None,
                    pinned: None,
                };
                if let Some(mirror) = route
                    .mirror
                    .as_ref()
                    .filter(|m| !head.upgrade && mirror::drawn(self.ctx, m))
                {
                    if head.body == BodyLength::None {
                        mirror::copy(self.ctx, &snapshot, mirror, &parts, mirror::CopyBody::None);
                    } else {
                        // Copied once the exchange has sent the body (and kept it).
                        req.mirror = Some(mirror);
                    }
                }
                delivery.keep = keep;
                rctx.bodyless = head.body == BodyLength::None && !head.upgrade;
                let cache = route.cache.as_ref().map(|c| (c, head));
                self.exchange(&req, &parts, rctx, run, delivery, cache).await;
                drop(parts);
                self.client_ip = client_ip;
            }
        }
    }

    /// Where a `redirect` route sends the request: its location (with the request's path and
    /// query when it keeps them), or the same request under another scheme.
    fn redirect_location(&self, to: &RedirectTo, target: &RequestTarget<'_>) -> String {
        match to {
            RedirectTo::Location { location, keep_path } => {
                let mut to = location.clone();
                if *keep_path {
                    to.push_str(&String::from_utf8_lossy(&target.origin_form));
                }
                to
            }
            RedirectTo::Scheme { scheme, port } => {
                // The request's host without its port (nginx's `$host`), or this side's address
                // for a request that named none.
                let host = match target.host {
                    b"" => self.stream.local_addr().map(|a| a.ip().to_string()).unwrap_or_default(),
                    host => String::from_utf8_lossy(host).into_owned(),
                };
                let host = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]")
                } else {
                    host
                };
                let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                format!(
                    "{scheme}://{host}{port}{}",
                    String::from_utf8_lossy(&target.origin_form)
                )
            }
        }
    }

    /// The downstream side for this request, with its route's filters on it.
    pub(super) fn filtered<'d>(
        &'d mut self,
        run: &'d mut FilterRun,
        delivery: Delivery<'d>,
    ) -> FilteredDownstream<'d, T::Down<'d>> {
        let down = self.downstream(delivery.keep, delivery.http10, delivery.head_only, delivery.framing);
        let filtered = match delivery.filters {
            None => FilteredDownstream::plain(down),
            Some((chain, at)) => {
                let transformable = !delivery.http10 && !delivery.head_only;
                FilteredDownstream::new(down, chain, run, at, delivery.framing, transformable)
            }
        };
        filtered.with_error_pages(delivery.error_pages)
    }

    pub(super) async fn answer_local(
        &mut self,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
        delivery: Delivery<'_>,
        answer: &LocalAnswer<'_>,
    ) {
        let mut down = self.filtered(run, delivery);
        let sent = down.send_local(answer).await;
        rctx.status = answer.status;
        rctx.bytes_out = down.bytes_sent();
        rctx.body_bytes_out = down.body_bytes_sent();
        rctx.keep_client = down.keeps_alive();
        if let Err(e) = sent {
            rctx.fail(e);
        }
    }
}

/// How the request's `Accept` field weighs the media types of error pages (`None`: no field).
fn accept_weights(head: &RequestHead) -> Option<MediaWeights> {
    head.field(b"accept").map(MediaWeights::from_accept)
}

/// The first of the listener's routes that takes the request.
fn route_of(http: &HttpListener, method: &[u8], target: &RequestTarget<'_>, head: &RequestHead) -> Option<usize> {
    let view = RequestView {
        method,
        host: target.host,
        path: target.path,
        query: target.query,
        buf: head.bytes(),
        fields: &head.fields,
    };
    http.routes.iter().position(|r| r.matcher.matches(&view))
}
