//! The byte stream under both the L4 relay and the HTTP session, on either side of the proxy.
//!
//! Today a stream is plain TCP; TLS becomes a second variant. Abilities that only plain TCP has
//! (splice(2) in the relay, parking an idle connection in the worker's epoll set) are reached
//! through [`Stream::as_tcp`] / [`Stream::into_tcp`]; everything else is written against
//! `Stream` and matches on the variant in one place here.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connection's byte stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
}

impl Stream {
    /// The plain TCP socket, for the abilities only it has (splice, parking).
    pub fn as_tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
        }
    }

    /// The plain TCP socket, by value.
    pub fn into_tcp(self) -> TcpStream {
        match self {
            Stream::Tcp(s) => s,
        }
    }

    /// The scheme a request that arrived on this stream was sent with.
    pub fn scheme(&self) -> &'static str {
        match self {
            Stream::Tcp(_) => "http",
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.as_tcp().local_addr()
    }

    /// Resolves when the stream may have bytes to read (it may also wake without any).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
        }
    }

    /// Resolves when the stream may have bytes to read (the socket's own future, no extra
    /// layer: this is awaited between every two requests).
    pub fn readable(&self) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        match self {
            Stream::Tcp(s) => s.readable(),
        }
    }

    /// Writes all of `data`, waiting for the peer to take it.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all(s, data).await,
        }
    }

    /// Writes `a` then `b` in as few system calls as possible; once the peer stops taking bytes
    /// the rest must go within `limit` (error kind `TimedOut` otherwise).
    pub async fn write_all_within(&mut self, a: &[u8], b: &[u8], limit: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => write_all_vectored_within(s, a, b, limit).await,
        }
    }

    /// Sends end of stream (a FIN); a peer that is already gone is not an error here.
    pub fn shutdown_write(&self) {
        match self {
            Stream::Tcp(s) => {
                let _ = socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write);
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
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
