//! The byte stream under both the L4 relay and the HTTP session, on either side of the proxy:
//! plain TCP, or TLS over TCP.
//!
//! Abilities that only plain TCP has (splice(2) in the relay) are reached by matching on the
//! variant; everything else is written against `Stream` and matches on the variant in one
//! place here.

use std::io::{self, BufRead};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::{TlsInfo, TlsSession, TlsStream};

/// A connection's byte stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    /// Boxed: the rustls state is large, and most tasks hold a plain stream.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The TCP socket under the stream.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    /// The TCP socket and, for TLS, the rustls state, apart (to park a connection).
    pub fn into_parts(self) -> (TcpStream, Option<Box<TlsSession>>) {
        match self {
            Stream::Tcp(s) => (s, None),
            Stream::Tls(t) => {
                let (tcp, session) = t.into_parts();
                (tcp, Some(Box::new(session)))
            }
        }
    }

    /// The stream again from [`Stream::into_parts`].
    pub fn from_parts(tcp: TcpStream, tls: Option<Box<TlsSession>>) -> Stream {
        match tls {
            None => Stream::Tcp(tcp),
            Some(session) => Stream::Tls(Box::new(TlsStream::new(tcp, *session))),
        }
    }

    /// The scheme a request that arrived on this stream was sent with.
    pub fn scheme(&self) -> &'static str {
        match self {
            Stream::Tcp(_) => "http",
            Stream::Tls(_) => "https",
        }
    }

    /// What the TLS handshake negotiated, for a TLS stream.
    pub fn tls_info(&self) -> Option<TlsInfo<'_>> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(t) => Some(t.info()),
        }
    }

    /// The verified client certificate as the listener forwards it, if any.
    pub fn client_cert(&self) -> Option<&str> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(t) => t.session.client_cert.as_deref(),
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// Resolves when the stream may have bytes to read (it may also wake without any).
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Tls(t) => t.poll_read_ready(cx),
        }
    }

    /// Resolves when the stream may have bytes to read (it may also wake without any), at once
    /// while decrypted TLS bytes wait. A plain poll function, no future of its own: this is
    /// awaited between every two requests.
    pub fn readable(&mut self) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        std::future::poll_fn(move |cx| self.poll_read_ready(cx))
    }

    /// Whether an idle connection can still carry a request: the peer has not closed it and has
    /// sent nothing unasked. TLS records that carry no data (session tickets) are taken in.
    /// Costs no system call for a plain socket that has seen no event.
    pub fn is_reusable_when_idle(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        match self {
            Stream::Tcp(s) => s.poll_read_ready(&mut cx).is_pending(),
            Stream::Tls(t) => loop {
                match t.session.conn.reader().fill_buf() {
                    // Nothing decrypted waits, and the peer has not closed: see what came in.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // Bytes nobody asked for, or the peer's close_notify.
                    _ => return false,
                }
                match t.poll_fill(&mut cx) {
                    Poll::Pending => return true,
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return false,
                    Poll::Ready(Ok(_)) => {}
                }
            },
        }
    }

    /// Whether the connection holds nothing in flight (no decrypted bytes waiting, nothing left
    /// to send), so it can be parked.
    pub fn is_quiet(&mut self) -> bool {
        match self {
            Stream::Tcp(_) => true,
            Stream::Tls(t) => t.is_quiet(),
        }
    }

    /// Writes all of `data`, waiting for the peer to take it.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all(s, data).await,
            Stream::Tls(t) => t.write_all_within(data, &[], Duration::MAX).await,
        }
    }

    /// Writes `a` then `b` in as few system calls as possible; once the peer stops taking bytes
    /// the rest must go within `limit` (error kind `TimedOut` otherwise).
    pub async fn write_all_within(&mut self, a: &[u8], b: &[u8], limit: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all_vectored_within(s, a, b, limit).await,
            Stream::Tls(t) => t.write_all_within(a, b, limit).await,
        }
    }

    /// Sends end of stream (a FIN; close_notify first on TLS); a peer that is already gone is
    /// not an error here.
    pub fn shutdown_write(&mut self) {
        match self {
            Stream::Tcp(s) => {
                let _ = socket2::SockRef::from(&*s).shutdown(std::net::Shutdown::Write);
            }
            Stream::Tls(t) => t.shutdown_write(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(&mut **t).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(&mut **t).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => Pin::new(&mut **t).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(t) => Pin::new(&mut **t).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(&mut **t).poll_shutdown(cx),
        }
    }
}

/// Writes all of `data`, waiting for the socket to drain when its buffer is full.
pub async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match to.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `data`; a timer is armed only if the socket blocks, and the whole write must
/// finish within `limit` of that moment (error kind `TimedOut` otherwise).
pub async fn write_all_within(to: &TcpStream, data: &[u8], limit: Duration) -> io::Result<()> {
    write_all_vectored_within(to, data, &[], limit).await
}

/// Writes `a` then `b` with vectored writes (one system call when the socket takes both), with
/// the same lazy timeout as [`write_all_within`].
pub async fn write_all_vectored_within(to: &TcpStream, mut a: &[u8], mut b: &[u8], limit: Duration) -> io::Result<()> {
    let mut deadline = None;
    while !a.is_empty() || !b.is_empty() {
        let result = if b.is_empty() {
            to.try_write(a)
        } else if a.is_empty() {
            to.try_write(b)
        } else {
            to.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)])
        };
        match result {
            Ok(n) => {
                let from_a = n.min(a.len());
                a = &a[from_a..];
                b = &b[n - from_a..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + limit);
                match tokio::time::timeout_at(at, to.writable()).await {
                    Ok(ready) => ready?,
                    Err(_) => return Err(io::ErrorKind::TimedOut.into()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
