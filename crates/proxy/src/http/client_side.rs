//! What the request path needs from the connection a request came on, whatever its protocol:
//! an HTTP/1 connection's [`Stream`], or one stream of an HTTP/2 connection
//! ([`crate::http::h2::H2Stream`]). Routing, local answers, the exchange and the access log are
//! written once against [`ClientSide`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rampart_proto::h1::Version;
use rampart_proto::message::Protocol;

use super::downstream::{ClientTerms, Downstream};
use super::iobuf::IoBuf;
use super::state::HttpWorkerState;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::WorkerContext;

/// How one request's connection is reached.
// Workers are single-threaded: the futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait ClientSide {
    /// The downstream side of one request on it.
    type Down<'b>: Downstream
    where
        Self: 'b;

    /// A downstream side for one request: `inbuf` holds its body bytes (behind its head, for
    /// HTTP/1), `out` is a write buffer.
    fn downstream<'b>(
        &'b mut self,
        inbuf: &'b mut IoBuf,
        out: &'b mut Vec<u8>,
        state: &'b HttpWorkerState,
        terms: ClientTerms,
    ) -> Self::Down<'b>;

    /// The scheme the request came with (`X-Forwarded-Proto`).
    fn scheme(&self) -> &'static str;
    /// The address the client connected to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
    /// The verified client certificate as the listener forwards it, if any.
    fn client_cert(&self) -> Option<&str>;
    /// What the TLS handshake negotiated.
    fn tls_info(&self) -> Option<TlsInfo<'_>>;
    /// The protocol a request with an HTTP/1 head of `version` came in (HTTP/2 for a stream).
    fn protocol(&self, version: Version) -> Protocol;

    /// Runs the tunnel a 101 opened (`early`: client bytes already read behind the request) until
    /// either side ends it or it idles out. Returns the bytes moved up and down.
    async fn tunnel(
        &mut self,
        ctx: &WorkerContext,
        upstream: &mut Stream,
        idle_timeout: Duration,
        buffer_size: usize,
    ) -> (u64, u64);
}
