//! TLS on either side of the proxy: a rustls connection over a tokio TCP socket.
//!
//! The glue between rustls (which only turns bytes into bytes) and the socket is ours rather than
//! tokio-rustls': a parked keep-alive connection must leave its task as a plain socket plus its
//! rustls state, and come back as a stream later, which tokio-rustls' stream cannot be rebuilt
//! from. The glue is small: read records when rustls wants them, write records when it has them,
//! and answer readiness questions with "yes" while decrypted bytes wait inside rustls.
//!
//! - [`accept`]: the server handshake in the connection stage (first-bytes check, strict SNI,
//!   timeout).
//! - [`connect`]: the client handshake to an upstream target.
//! - [`info`]: what a connection negotiated, for logs and the forwarded client certificate.

use std::io::{self, BufRead, Read, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub mod accept;
pub mod connect;
pub mod info;
#[cfg(test)]
pub(crate) mod tests;

pub use info::{OwnedTlsInfo, TlsInfo};

/// A TLS connection: the socket, the rustls state, and what the connection stage learnt.
pub struct TlsStream {
    pub(crate) tcp: TcpStream,
    pub(crate) session: TlsSession,
}

/// The rustls side of a TLS connection, which a parked connection keeps without its socket.
pub struct TlsSession {
    pub(crate) conn: rustls::Connection,
    /// The verified client certificate as the listener forwards it, if it forwards one.
    pub(crate) client_cert: Option<Box<str>>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

/// `io::Read` over a non-blocking tokio socket (WouldBlock clears its readiness). For the
/// handshake, where an extra read does not matter.
pub(crate) struct SocketRead<'a>(pub &'a TcpStream);

impl Read for SocketRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// `io::Read` through tokio's `AsyncRead` on the socket: a short read clears the socket's
/// readiness, so the next wait is on epoll rather than on a read that would return EAGAIN (one
/// system call per request saved on keep-alive connections). `Pending` reads as `WouldBlock`.
struct PollRead<'a, 'b> {
    tcp: &'a mut TcpStream,
    cx: &'a mut Context<'b>,
}

impl Read for PollRead<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut read_buf = ReadBuf::new(buf);
        match Pin::new(&mut *self.tcp).poll_read(self.cx, &mut read_buf) {
            Poll::Ready(Ok(())) => Ok(read_buf.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// `io::Write` over a non-blocking tokio socket; rustls writes its queued records with one
/// vectored call.
pub(crate) struct SocketWrite<'a>(pub &'a TcpStream);

impl Write for SocketWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    pub fn new(tcp: TcpStream, session: TlsSession) -> Self {
        TlsStream { tcp, session }
    }

    /// The socket and the rustls state, apart (to park the connection).
    pub fn into_parts(self) -> (TcpStream, TlsSession) {
        (self.tcp, self.session)
    }

    pub fn info(&self) -> TlsInfo<'_> {
        TlsInfo::of(&self.session)
    }

    /// Whether decrypted bytes wait inside rustls (so a read would not block).
    pub fn has_plaintext(&mut self) -> bool {
        self.session.conn.reader().fill_buf().is_ok_and(|b| !b.is_empty())
    }

    /// Whether the connection can be put aside: nothing decrypted waits, nothing is left to send.
    pub fn is_quiet(&mut self) -> bool {
        !self.has_plaintext() && !self.session.conn.wants_write()
    }

    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_plaintext() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Reads records from the socket into rustls and decrypts them: ready once anything was
    /// read (or the socket reached its end).
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = match self.session.conn.read_tls(&mut PollRead { tcp: &mut self.tcp, cx }) {
            Ok(n) => n,
            // The socket's waker is registered.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if let Err(e) = self.session.conn.process_new_packets() {
            // rustls queued an alert for the peer: one try to send it.
            let _ = self.session.conn.write_tls(&mut SocketWrite(&self.tcp));
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        if self.session.conn.wants_write() {
            // A key update answer or a session ticket: sent now if the socket takes it,
            // otherwise with the next write.
            let _ = self.session.conn.write_tls(&mut SocketWrite(&self.tcp));
        }
        Poll::Ready(Ok(n))
    }

    /// Writes queued records until rustls has none left.
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.session.conn.wants_write() {
            match self.session.conn.write_tls(&mut SocketWrite(&self.tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_write_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Encrypts `a` then `b` and writes them all, in as few records and system calls as
    /// rustls allows; once the peer stops taking bytes the rest must go within `limit`
    /// (`Duration::MAX`: no limit).
    pub async fn write_all_within(&mut self, mut a: &[u8], mut b: &[u8], limit: Duration) -> io::Result<()> {
        let mut deadline = None;
        loop {
            if !a.is_empty() || !b.is_empty() {
                let n = self
                    .session
                    .conn
                    .writer()
                    .write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])?;
                let from_a = n.min(a.len());
                a = &a[from_a..];
                b = &b[n - from_a..];
            }
            let all_taken = a.is_empty() && b.is_empty();
            // Send what rustls holds; wait only when the socket is full.
            match self.session.conn.write_tls(&mut SocketWrite(&self.tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // No deadline when `limit` reaches past what the clock can say.
                    let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now().checked_add(limit));
                    let writable = self.tcp.writable();
                    match at {
                        Some(at) => match tokio::time::timeout_at(at, writable).await {
                            Ok(ready) => ready?,
                            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
                        },
                        None => writable.await?,
                    }
                }
                Err(e) => return Err(e),
            }
            if all_taken && !self.session.conn.wants_write() {
                return Ok(());
            }
        }
    }

    /// Sends close_notify and a FIN; a peer that is already gone is not an error here.
    pub fn shutdown_write(&mut self) {
        self.session.conn.send_close_notify();
        let _ = self.session.conn.write_tls(&mut SocketWrite(&self.tcp));
        let _ = socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write);
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.session.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: for HTTP framing, an end like any other
                // (message lengths, not the TLS close, say whether a message was whole).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
            ready!(this.poll_fill(cx))?;
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let n = this.session.conn.writer().write(buf)?;
            // Push records out as far as the socket takes them.
            match this.poll_flush_tls(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending if n == 0 => return Poll::Pending,
                _ => {}
            }
            if n > 0 || buf.is_empty() {
                return Poll::Ready(Ok(n));
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_tls(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.session.conn.send_close_notify();
        ready!(this.poll_flush_tls(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}
