//! An HTTP/1 connection's [`Stream`] as the client side of its requests.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rampart_proto::h1::Version;
use rampart_proto::message::Protocol;

use super::downstream::H1Downstream;
use crate::http::client_side::ClientSide;
use crate::http::downstream::ClientTerms;
use crate::http::iobuf::IoBuf;
use crate::http::state::HttpWorkerState;
use crate::relay::relay;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use crate::worker::WorkerContext;

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
