//! The worker's UDP socket as quinn drives it (quinn's own tokio socket: GSO on send and GRO on
//! receive where the kernel has them), with one addition: reading can be stopped for good. A
//! binary upgrade hands the same socket to the new process; from then on the old one must not
//! take datagrams from it, or each process would get a random share of the other's packets.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// A UDP socket whose reading stops once [`StoppableSocket::stop_reading`] is called.
pub(super) struct StoppableSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    stopped: AtomicBool,
}

impl StoppableSocket {
    pub(super) fn new(inner: Arc<dyn AsyncUdpSocket>) -> Self {
        StoppableSocket {
            inner,
            stopped: AtomicBool::new(false),
        }
    }

    /// No datagram is read from now on (sending goes on: the connections' CONNECTION_CLOSE).
    pub(super) fn stop_reading(&self) {
        self.stopped.store(true, Ordering::Release);
    }
}

impl fmt::Debug for StoppableSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoppableSocket")
            .field("stopped", &self.stopped.load(Ordering::Relaxed))
            .finish()
    }
}

impl AsyncUdpSocket for StoppableSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        if self.stopped.load(Ordering::Acquire) {
            // Never woken: the endpoint lives on only to send its connections' last words.
            return Poll::Pending;
        }
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
