//! The connection's byte stream with the bytes already read in front (the preface that told
//! HTTP/2 from HTTP/1.1, or bytes behind a PROXY header).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stream::Stream;

pub(super) struct Rewind {
    early: Vec<u8>,
    at: usize,
    inner: Stream,
}

impl Rewind {
    pub fn new(early: Vec<u8>, inner: Stream) -> Self {
        Rewind { early, at: 0, inner }
    }
}

impl AsyncRead for Rewind {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.early.len() {
            let n = (this.early.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.early[this.at..this.at + n]);
            this.at += n;
            if this.at == this.early.len() {
                this.early = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
