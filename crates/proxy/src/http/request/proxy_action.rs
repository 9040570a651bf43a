//! The proxy action of the request path: the exchange through the route's filters (each attempt
//! writes the head to send from the request's edit view, in the form its connection speaks), and
//! the tunnel a 101 opens.

use rampart_model::cache::RouteCache;
use rampart_proto::message::{BodyLength, RequestHead};

use super::action::Delivery;
use super::RequestPath;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{answer_error, Downstream};
use crate::http::error::HttpError;
use crate::http::exchange::{self, ProxyRequest};
use crate::http::filter::FilterRun;
use crate::http::head_out::RequestParts;

impl<T: ClientSide> RequestPath<'_, T> {
    /// Exchanges a request (its head's edit view `parts`) with the upstream, then runs the
    /// tunnel a 101 may have opened.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn exchange(
        &mut self,
        req: &ProxyRequest<'_>,
        parts: &RequestParts<'_>,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
        delivery: Delivery<'_>,
        cache: Option<(&RouteCache, &RequestHead)>,
    ) {
        // The head is the request's own; with no body bytes waiting, the read buffer goes back
        // to the pool before the (possibly slow) upstream connect.
        self.inbuf.release_if_empty(&self.ctx.http);
        let ctx = self.ctx;
        let scheme = self.stream.scheme();
        let snapshot = self.snapshot.clone();
        let mut down = self.filtered(run, delivery);
        // The body bytes that came with the head are checked before anything goes upstream (a
        // malformed chunked body sent in one piece never reaches a backend), and shown to the
        // filters that inspect bodies.
        let received = match req.body {
            BodyLength::None => Ok(()),
            _ => down.check_received_body(),
        };
        let tunnel = match received {
            Ok(()) => match cache {
                // Boxed: the cache's state stays out of the futures of routes without one.
                Some((cache, head)) => {
                    let through =
                        crate::http::cache::through(ctx, &snapshot, cache, head, scheme, req, &mut down, parts, rctx);
                    Box::pin(through).await
                }
                None => exchange::proxy(ctx, req, &mut down, parts, rctx).await,
            },
            Err(error) => {
                answer_error(&mut down, rctx, error).await;
                None
            }
        };
        rctx.bytes_out = down.bytes_sent();
        rctx.body_bytes_out = down.body_bytes_sent();
        if !rctx.responded() {
            rctx.keep_client = false;
        } else if rctx.error.is_none() {
            rctx.keep_client &= down.keeps_alive();
        }
        // Else the error decided: kept only when answered whole on a request read in full.
        drop(down);
        if let Some(upstream) = tunnel {
            rctx.keep_client = false;
            match req.snapshot.listeners.get(self.listener) {
                Some(listener) => {
                    self.tunnel(upstream, listener.idle_timeout, listener.buffer_size, rctx)
                        .await
                }
                None => rctx.fail(HttpError::MissingConfig),
            }
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
        rctx.body_bytes_out += down;
        if let Some(listener) = self.listener_spec() {
            listener.metrics.worker(self.ctx.id).bytes_in.add(up);
        }
    }
}
