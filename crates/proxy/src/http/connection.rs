//! The connection stage of HTTP: which protocol a client connection speaks, and the side that
//! serves it. ALPN `h2` over TLS, or the HTTP/2 preface in clear (prior knowledge, seen by the
//! HTTP/1 side in the connection's first bytes), go to [`crate::http::h2`]; everything else to
//! the HTTP/1 mux ([`crate::http::h1`]). Both hand their requests to the same request layer
//! ([`crate::http::request`]). A third protocol over TCP plugs in here.

use crate::slot::Conn;
use crate::worker::WorkerContext;

/// Serves an HTTP connection until it closes or parks.
pub async fn serve(ctx: &WorkerContext, conn: Conn) {
    if conn.stream.tls_info().is_some_and(|t| t.alpn == Some(b"h2")) {
        // Boxed: an HTTP/2 connection's state would otherwise enlarge every HTTP/1 task.
        return Box::pin(super::h2::serve(ctx, conn)).await;
    }
    if let Some(preface) = super::h1::serve_http1(ctx, conn).await {
        Box::pin(super::h2::serve(ctx, preface)).await;
    }
}
