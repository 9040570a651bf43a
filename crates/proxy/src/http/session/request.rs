//! Answering one request, phase by phase: route it; answer it locally (respond, redirect, 404) or
//! check its body against the route's limit, write the upstream request head, and exchange it with
//! an upstream; run the tunnel a 101 opens. The access log is written by the caller from the
//! request context.

use std::borrow::Cow;

use rampart_model::route::{RedirectTo, RequestView, RouteAction, RouteFilters};
use rampart_proto::h1::{ChunkedDecoder, Framing, RequestHead, Version};

use super::{http_settings, Connection};
use crate::http::access_log::capture_for_log;
use crate::http::context::RequestContext;
use crate::http::downstream::{Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::exchange::{self, ProxyRequest};
use crate::http::head_out::{write_request_head, RequestHeader};
use crate::http::target::{request_target, rewrite_target};
use crate::http::transport::Transport;

impl<T: Transport> Connection<'_, T> {
    /// Routes and answers one request, recording what happened in `rctx`. `may_keep` is false when
    /// the connection is to close after this request: a reload removed its listener (the request
    /// is answered under the previous config), or the worker drains (the answer says
    /// `Connection: close`, so the client does not send another request into a closing
    /// connection).
    pub(crate) async fn handle(&mut self, head: &RequestHead, rctx: &mut RequestContext, may_keep: bool) {
        if rctx.logged_at.is_some() {
            capture_for_log(&mut self.log_scratch, &self.fields, self.inbuf.filled(), head);
        }
        let snapshot = self.snapshot.clone();
        let http = http_settings(&snapshot, self.listener);
        let listener_tls = snapshot.listeners[self.listener].tls.as_deref();
        let buf = self.inbuf.filled();
        let slice = |r: (u32, u32)| &buf[r.0 as usize..r.1 as usize];
        let method = slice(head.method);
        let target = request_target(slice(head.target), head.host.map(slice));
        let view = RequestView {
            method,
            host: target.host,
            path: target.path,
            query: target.query,
            buf,
            fields: &self.fields,
        };
        let route = http.routes.iter().position(|r| r.matcher.matches(&view));
        rctx.route = route;
        let head_only = method == b"HEAD";
        // A request whose body we do not read ends its connection after a local answer.
        let keep = may_keep && head.keep_alive;
        let http10 = head.version == Version::Http10;
        let keep_after_local = keep && head.framing == Framing::None;
        let Some(route) = route.map(|r| &http.routes[r]) else {
            self.inbuf.consume(head.len);
            let answer = LocalAnswer {
                status: 404,
                headers: &[],
                body: b"404 Not Found\n",
                close: !keep_after_local,
            };
            return self.answer_local(rctx, &answer, http10, head_only).await;
        };
        match &route.action {
            RouteAction::Respond { status, headers, body } => {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                self.inbuf.consume(head.len);
                let answer = LocalAnswer {
                    status: *status,
                    headers: &headers,
                    body,
                    close: !keep_after_local,
                };
                self.answer_local(rctx, &answer, http10, head_only).await
            }
            RouteAction::Redirect { status, to } => {
                let to = match to {
                    RedirectTo::Location { location, keep_path } => {
                        let mut to = location.clone();
                        if *keep_path {
                            to.push_str(&String::from_utf8_lossy(&target.origin_form));
                        }
                        to
                    }
                    RedirectTo::Scheme(scheme) => {
                        // The request's host without its port (nginx's `$host`), or this
                        // side's address for a request that named none.
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
                };
                self.inbuf.consume(head.len);
                let body = format!("{status} redirect to {to}\n");
                let answer = LocalAnswer {
                    status: *status,
                    headers: &[("location", &to)],
                    body: body.as_bytes(),
                    close: !keep_after_local,
                };
                self.answer_local(rctx, &answer, http10, head_only).await
            }
            RouteAction::Proxy { upstream } => {
                let upstream = *upstream;
                rctx.upstream = Some(upstream);
                let filters = &route.filters;
                if let Some(error) = self.early_body_error(head, filters) {
                    self.inbuf.consume(head.len);
                    return self.fail(rctx, error, http10, head_only).await;
                }
                // The request head the upstream gets: the route's rewrites and header edits.
                let rewritten = rewrite_target(&target.origin_form, filters);
                // An absolute-form request names its host in the target, which wins over `Host`.
                let host = match target.from_authority {
                    true => Some(target.authority),
                    false => head.host.map(slice),
                };
                self.head_out.clear();
                write_request_head(
                    &mut self.head_out,
                    &RequestHeader {
                        buf,
                        fields: &self.fields,
                        method,
                        target: rewritten,
                        framing: head.framing,
                        upgrade: head.upgrade,
                        host,
                        replace_host: target.from_authority,
                        default_host: &snapshot.upstreams[upstream].name,
                        client_ip: &self.client_ip,
                        scheme: self.stream.scheme(),
                        forwarded: http.forwarded,
                        client_cert: listener_tls
                            .and_then(|t| t.forward_client_cert.as_deref())
                            .map(|name| (name, self.stream.client_cert())),
                        edits: Cow::Borrowed(&filters.request_headers),
                    },
                );
                let up = &snapshot.upstreams[upstream];
                let req = ProxyRequest {
                    snapshot: &snapshot,
                    listener_name: &snapshot.listeners[self.listener].name,
                    upstream,
                    client: self.client,
                    local: up.send_proxy_protocol.and_then(|_| self.stream.local_addr().ok()),
                    hash_key: crate::http::affinity::request_key(up, self.client.ip(), buf, &self.fields),
                    idempotent: matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"),
                    head_method: head_only,
                    framing: head.framing,
                    expect_continue: head.expect_continue,
                    upgrade: head.upgrade,
                    max_body_size: filters.max_body_size,
                    response_ops: &filters.response_headers,
                };
                self.inbuf.consume(head.len);
                self.exchange(&req, rctx, keep, http10).await;
            }
        }
    }

    async fn answer_local(
        &mut self,
        rctx: &mut RequestContext,
        answer: &LocalAnswer<'_>,
        http10: bool,
        head_only: bool,
    ) {
        let mut down = self.downstream(!answer.close, http10, head_only);
        let sent = down.send_local(answer).await;
        rctx.status = answer.status;
        rctx.bytes_out = down.bytes_sent();
        rctx.keep_client = down.keeps_alive();
        if let Err(e) = sent {
            rctx.fail(e);
        }
    }

    /// Exchanges a request whose upstream head is in `head_out` with the upstream, then runs the
    /// tunnel a 101 may have opened.
    async fn exchange(&mut self, req: &ProxyRequest<'_>, rctx: &mut RequestContext, keep: bool, http10: bool) {
        // The head now lives in `head_out`; with no body bytes waiting, the read buffer goes back
        // to the pool before the (possibly slow) upstream connect.
        self.inbuf.release_if_empty(&self.ctx.http);
        let head_out = std::mem::take(&mut self.head_out);
        let ctx = self.ctx;
        let mut down = self.downstream(keep, http10, req.head_method);
        let tunnel = exchange::proxy(ctx, req, &mut down, &head_out, rctx).await;
        rctx.bytes_out = down.bytes_sent();
        if !rctx.responded() || rctx.error.is_some() {
            rctx.keep_client = false;
        } else {
            rctx.keep_client &= down.keeps_alive();
        }
        drop(down);
        self.head_out = head_out;
        if let Some(upstream) = tunnel {
            rctx.keep_client = false;
            let listener = &req.snapshot.listeners[self.listener];
            self.tunnel(upstream, listener.idle_timeout, listener.buffer_size, rctx)
                .await;
        }
    }

    /// Checks what the head says about the body, and the body bytes that came with it, before
    /// anything goes upstream, so a malformed or oversized body sent in one piece never reaches
    /// a backend.
    fn early_body_error(&self, head: &RequestHead, filters: &RouteFilters) -> Option<HttpError> {
        match (head.framing, filters.max_body_size) {
            (Framing::Length(n), Some(max)) if n > max => Some(HttpError::BodyTooLarge),
            (Framing::Chunked, max) => {
                let mut decoder = ChunkedDecoder::new();
                let early = decoder.advance(&self.inbuf.filled()[head.len..]);
                if max.is_some_and(|max| decoder.declared_size() > max) {
                    Some(HttpError::BodyTooLarge)
                } else {
                    early.err().map(|_| HttpError::BadRequestBody)
                }
            }
            _ => None,
        }
    }

    /// Runs the tunnel a 101 opened until either side ends it or it idles out.
    async fn tunnel(
        &mut self,
        mut upstream: crate::stream::Stream,
        idle_timeout: std::time::Duration,
        buffer_size: usize,
        rctx: &mut RequestContext,
    ) {
        // Bytes the client sent right behind its request belong to the tunnel.
        if !self.inbuf.is_empty() && upstream.write_all(self.inbuf.filled()).await.is_err() {
            rctx.fail(HttpError::UpstreamClosedEarly);
            return;
        }
        self.inbuf.release(&self.ctx.http);
        let (up, down) = self
            .stream
            .tunnel(self.ctx, &mut upstream, idle_timeout, buffer_size)
            .await;
        rctx.bytes_out += down;
        let listener = &self.snapshot.listeners[self.listener];
        listener.metrics.worker(self.ctx.id).bytes_in.add(up);
    }
}
