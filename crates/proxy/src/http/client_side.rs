//! What the request path needs from the connection a request came on, whatever its protocol:
//! an HTTP/1 connection's [`Stream`], or one stream of an HTTP/2 connection
//! ([`crate::http::h2::H2Stream`]). Routing, local answers, the exchange and the access log are
//! written once against [`ClientSide`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rampart_proto::h1::Version;
use rampart_proto::message::Protocol;

use super::downstream::{ClientTerms, Downstream, H1Downstream};
use super::iobuf::IoBuf;
use super::state::HttpWorkerState;
use crate::relay::relay;
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

impl ClientSide for Stream {
    type Down<'b> = H1Downstream<'b>;

    fn downstream<'b>(
        &'b mut self,
        inbuf: &'b mut IoBuf,
        out: &'b mut Vec<u8>,
        state: &'b HttpWorkerState,
        terms: ClientTerms,
    ) -> H1Downstream<'b> {
        H1Downstream::new(self, inbuf, out, state, terms)
    }

    fn scheme(&self) -> &'static str {
        Stream::scheme(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Stream::local_addr(self)
    }

    fn client_cert(&self) -> Option<&str> {
        Stream::client_cert(self)
    }

    fn tls_info(&self) -> Option<TlsInfo<'_>> {
        Stream::tls_info(self)
    }

    fn protocol(&self, version: Version) -> Protocol {
        version.into()
    }

    async fn tunnel(
        &mut self,
        ctx: &WorkerContext,
        upstream: &mut Stream,
        idle_timeout: Duration,
        buffer_size: usize,
    ) -> (u64, u64) {
        // Boxed: tunnels are rare, and the relay's state would otherwise enlarge every request.
        let done = Box::pin(relay(ctx, self, upstream, idle_timeout, buffer_size)).await;
        (done.bytes_up, done.bytes_down)
    }
}
