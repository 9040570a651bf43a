//! Answering one request: route it, then answer locally (respond, redirect, 404) or proxy it.

use rampart_proto::h1::{ChunkedDecoder, Framing, RequestHead, Version};
use tokio::net::TcpStream;

use super::Connection;
use crate::http::access_log::capture_for_log;
use crate::http::exchange::{self, Outcome, ProxyRequest};
use crate::http::head_out::{write_request_head, RequestOut};
use crate::http::local::write_response;
use crate::http::target::{rewrite_target, split_target, strip_port};
use crate::relay::write_all;
use rampart_model::route::{RequestView, Route, RouteAction, RouteFilters};

impl<'a> Connection<'a> {
    /// Routes and answers one request; returns the outcome and the route taken.
    pub(super) async fn handle(&mut self, client: &mut TcpStream, head: &RequestHead) -> (Outcome, Option<&'a Route>) {
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
            hash_key: crate::http::affinity::request_key(
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
}
