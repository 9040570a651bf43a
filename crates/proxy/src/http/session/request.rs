//! Answering one request, phase by phase: [`RequestPath::handle`] routes it and runs its route's
//! filters on the request head (`decide`: they may answer, rewrite, edit headers or pick another
//! upstream), which comes to an [`Action`] that no longer borrows the head; then carries it out
//! (`act`): an answer of Rampart's own (respond, redirect, 404, a filter's), a static file, or the
//! proxy action (`super::proxy_action`: the upstream head written, the exchange, the tunnel a 101
//! opens), everything said to the client passing the filters' response phases. The access log and
//! the filters' log phase are written by the caller.

use std::borrow::Cow;

use rampart_model::error_pages::MediaWeights;
use rampart_model::route::{RedirectTo, RequestView, RouteAction};
use rampart_model::HttpListener;
use rampart_model::Snapshot;
use rampart_proto::h1::{Field, Framing, RequestHead, Version};
use rampart_proto::message::BodyLength;

use super::action::{Action, Delivery, HeadView, OwnAnswer};
use super::{http_settings, RequestPath};
use crate::http::access_log::capture_for_log;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{Downstream, LocalAnswer};
use crate::http::filter::{client_ip, FilterRun, FilteredDownstream, RequestParts, Where};
use crate::http::static_files::{self, StaticRequest};
use crate::http::target::{request_target, split_target, RequestTarget};

impl<'a, T: ClientSide> RequestPath<'a, T> {
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
            capture_for_log(&mut self.log_scratch, &self.fields, self.inbuf.filled(), head);
        }
        let snapshot = self.snapshot.clone();
        // The head's bytes and fields stay out of the path while the request is routed, filtered
        // and its action prepared (all of which read them), and are back, the head consumed,
        // before anything is said to the client or read of the body behind the head.
        let mut inbuf = std::mem::take(&mut self.inbuf);
        let fields = std::mem::take(&mut self.fields);
        let read = HeadView {
            head,
            buf: inbuf.filled(),
            fields: &fields,
        };
        let (action, delivery) = self.decide(&snapshot, read, rctx, run, may_keep).await;
        inbuf.consume(head.len);
        self.inbuf = inbuf;
        self.fields = fields;
        self.act(action, delivery, rctx, run).await;
    }

    /// Routes the request and runs its route's filters on its head: what to do, and how the
    /// answer is to be delivered.
    async fn decide<'s>(
        &mut self,
        snapshot: &'s Snapshot,
        read: HeadView<'_>,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
        may_keep: bool,
    ) -> (Action<'s>, Delivery<'s>)
    where
        'a: 's,
    {
        let http = http_settings(snapshot, self.listener);
        let listener = &snapshot.listeners[self.listener];
        let HeadView { head, buf, fields } = read;
        let method = read.slice(head.method);
        let target = request_target(read.slice(head.target), head.host.map(|h| read.slice(h)));
        let route = route_of(http, method, &target, buf, fields);
        rctx.route = route;
        let head_only = method == b"HEAD";
        // A request whose body we do not read ends its connection after a local answer.
        let keep = may_keep && head.keep_alive;
        let keep_after_local = keep && head.framing == Framing::None;
        // Read only where a page may be chosen by it.
        let pages = match route {
            Some(i) => http.routes[i].error_pages.as_deref(),
            None => http.error_pages.as_deref(),
        };
        let mut delivery = Delivery {
            filters: None,
            keep: keep_after_local,
            http10: head.version == Version::Http10,
            head_only,
            framing: head.framing,
            error_pages: pages.map(|p| (p, accept_weights(buf, fields))),
        };
        let Some(route_index) = route else {
            return (Action::Local(OwnAnswer::not_found()), delivery);
        };
        let route = &http.routes[route_index];
        let chain = &route.filters;
        let at = Where {
            worker: self.ctx,
            snapshot,
            listener: &listener.name,
            route: &route.name,
            route_index,
            peer: self.client,
            scheme: self.stream.scheme(),
        };
        delivery.filters = Some((chain, at));
        let mut parts = RequestParts::new(
            method,
            target.host,
            target.path,
            target.query,
            self.stream.protocol(head.version),
            BodyLength::of_framing(head.framing),
            buf,
            fields,
            target.origin_form.clone(),
            Cow::Borrowed(&chain.request_edits),
            match route.action {
                RouteAction::Proxy { upstream } => Some(upstream),
                _ => None,
            },
        );
        if !chain.is_empty() {
            let client = client_ip(self.client.ip(), &http.trusted_proxies, &parts);
            run.start(self.ctx, chain, client);
            // Boxed: the filters' futures stay out of every request's state.
            if let Some(answer) = Box::pin(run.request_head(chain, at, &mut parts)).await {
                rctx.filter_reason = answer.reason;
                return (Action::Local(OwnAnswer::filters(answer)), delivery);
            }
        }
        let action = match &route.action {
            RouteAction::Respond { status, headers, body } => Action::Local(OwnAnswer {
                status: *status,
                headers: headers
                    .iter()
                    .map(|(n, v)| (Cow::Borrowed(n.as_str()), Cow::Borrowed(v.as_str())))
                    .collect(),
                body: Cow::Borrowed(body),
                error_page: false,
            }),
            RouteAction::Redirect { status, to } => {
                let to = self.redirect_location(to, &target);
                Action::Local(OwnAnswer {
                    status: *status,
                    body: Cow::Owned(format!("{status} redirect to {to}\n").into_bytes()),
                    headers: vec![(Cow::Borrowed("location"), Cow::Owned(to))],
                    error_page: false,
                })
            }
            RouteAction::Static(files) => {
                let (mut out, mut list) = (std::mem::take(&mut self.head_out), self.ctx.http.take_field_list());
                let request = StaticRequest {
                    method,
                    path: split_target(&parts.target).0,
                    client_path: target.path,
                    client_query: target.query,
                    headers: &parts,
                };
                let prepared = static_files::prepare(files, &request, &mut out, &mut list);
                Action::Static {
                    prepared,
                    out,
                    fields: list,
                    edits: &chain.response_edits,
                }
            }
            RouteAction::Proxy { .. } => {
                // A filter may have picked another upstream.
                let upstream = parts.upstream.unwrap_or_default();
                rctx.upstream = Some(upstream);
                rctx.bodyless = head.framing == Framing::None && !head.upgrade;
                delivery.keep = keep;
                self.prepare_proxy(snapshot, read, &target, parts, upstream, &chain.response_edits)
            }
        };
        (action, delivery)
    }

    /// Carries out what [`RequestPath::decide`] decided.
    async fn act(
        &mut self,
        action: Action<'_>,
        delivery: Delivery<'_>,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
    ) {
        match action {
            Action::Local(answer) => {
                let headers: Vec<(&str, &str)> = answer.headers.iter().map(|(n, v)| (n.as_ref(), v.as_ref())).collect();
                let local = LocalAnswer {
                    status: answer.status,
                    headers: &headers,
                    body: &answer.body,
                    close: !delivery.keep,
                    error_page: answer.error_page,
                };
                self.answer_local(rctx, run, delivery, &local).await;
            }
            Action::Static {
                prepared,
                out,
                fields,
                edits,
            } => {
                self.answer_static(rctx, run, delivery, prepared, &out, &fields, edits)
                    .await;
                self.head_out = out;
                self.ctx.http.give_field_list(fields);
            }
            Action::Proxy { req, text, laid } => self.exchange(&req, text, laid, rctx, run, delivery).await,
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
            RedirectTo::Scheme(scheme) => {
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
                format!("{scheme}://{host}{}", String::from_utf8_lossy(&target.origin_form))
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
fn accept_weights(buf: &[u8], fields: &[rampart_proto::h1::Field]) -> Option<MediaWeights> {
    fields
        .iter()
        .find(|f| f.name(buf).eq_ignore_ascii_case(b"accept"))
        .map(|f| MediaWeights::from_accept(f.value(buf)))
}

/// The first of the listener's routes that takes the request.
fn route_of(
    http: &HttpListener,
    method: &[u8],
    target: &RequestTarget<'_>,
    buf: &[u8],
    fields: &[Field],
) -> Option<usize> {
    let view = RequestView {
        method,
        host: target.host,
        path: target.path,
        query: target.query,
        buf,
        fields,
    };
    http.routes.iter().position(|r| r.matcher.matches(&view))
}
