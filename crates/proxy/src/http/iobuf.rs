//! A read buffer with start and end cursors: bytes are read in at the end, parsed or forwarded
//! from the start. The storage comes from the worker's pool and goes back to it when empty, so an
//! idle keep-alive connection holds no buffer.

use std::io;

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::state::HttpWorkerState;
use crate::stream::Stream;

#[derive(Default)]
pub struct IoBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes read from the stream since [`IoBuf::take_received`] last ran.
    received: u64,
}

impl IoBuf {
    /// The bytes read and not yet consumed.
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Marks `n` bytes at the start as used.
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.end - self.start);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads once from `stream` into free space (0 at EOF). No buffer is held while waiting: the
    /// wait is for readiness, storage comes from the pool only when the socket says it is
    /// readable, and goes back if that was a false alarm. It grows (up to `max`) when full.
    /// Reading through tokio's `AsyncRead` clears readiness after a short read, so the next wait
    /// is on epoll rather than on a read that would return EAGAIN.
    pub async fn read_from(&mut self, ctx: &HttpWorkerState, stream: &mut Stream, max: usize) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_read_from(cx, ctx, stream, max)).await
    }

    /// [`IoBuf::read_from`] as a poll function.
    pub fn poll_read_from(
        &mut self,
        cx: &mut Context<'_>,
        ctx: &HttpWorkerState,
        stream: &mut Stream,
        max: usize,
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = ready!(stream.poll_read_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        if let Err(e) = self.make_room(ctx, max) {
            return Poll::Ready(Err(e));
        }
        let mut read_buf = ReadBuf::new(&mut self.data[self.end..]);
        match Pin::new(&mut *stream).poll_read(cx, &mut read_buf) {
            Poll::Ready(Ok(())) => {
                let n = read_buf.filled().len();
                self.end += n;
                self.received += n as u64;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.release_if_empty(ctx);
                Poll::Pending
            }
        }
    }

    fn make_room(&mut self, ctx: &HttpWorkerState, max: usize) -> io::Result<()> {
        if self.data.is_empty() {
            self.data = ctx.take_read_buffer();
        }
        if self.end == self.data.len() {
            if self.start > 0 {
                self.data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.data.len() < max {
                let grown = (self.data.len() * 2).min(max.max(self.data.len()));
                self.data.resize(grown, 0);
            } else {
                return Err(io::Error::new(io::ErrorKind::OutOfMemory, "buffer full"));
            }
        }
        Ok(())
    }

    /// The bytes read from the stream since the last call (for the traffic counters).
    pub fn take_received(&mut self) -> u64 {
        std::mem::take(&mut self.received)
    }

    /// Appends `bytes` (received before this buffer existed, such as those behind a PROXY header).
    pub fn extend_from(&mut self, ctx: &HttpWorkerState, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.data.is_empty() {
            self.data = ctx.take_read_buffer();
        }
        if self.data.len() < self.end + bytes.len() {
            self.data.resize(self.end + bytes.len(), 0);
        }
        self.data[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Gives the storage back to the pool if no bytes are waiting in it (a buffer
    /// [`IoBuf::adopt`] took in goes back to the write buffers it came from).
    pub fn release_if_empty(&mut self, ctx: &HttpWorkerState) {
        if self.is_empty() && self.data.capacity() > 0 {
            ctx.give_bytes(std::mem::take(&mut self.data));
        }
    }

    /// Gives up the head just parsed, its first `len` bytes, as bytes of its own: the storage
    /// itself (with the offset the head starts at) when nothing follows the head, so a request
    /// with no body waiting costs no copy (the next read takes storage from the pool again);
    /// else a copy of the head in a write buffer from the pool, the bytes behind it staying here.
    pub fn take_head(&mut self, ctx: &HttpWorkerState, len: usize) -> (Vec<u8>, usize) {
        let len = len.min(self.len());
        if self.start + len == self.end {
            let at = self.start;
            self.start = 0;
            self.end = 0;
            return (std::mem::take(&mut self.data), at);
        }
        let mut copy = ctx.take_write_buffer();
        copy.extend_from_slice(&self.filled()[..len]);
        self.consume(len);
        (copy, 0)
    }

    /// Gives up the storage and what it holds: the storage, where the bytes read and not yet
    /// consumed start and where they end. The buffer is empty after (its next read takes storage
    /// from the pool).
    pub fn take_all(&mut self) -> (Vec<u8>, usize, usize) {
        let (start, end) = (self.start, self.end);
        self.start = 0;
        self.end = 0;
        (std::mem::take(&mut self.data), start, end)
    }

    /// Takes `buf` (a write buffer from the worker's pool, holding bytes laid out there: an
    /// HTTP/2 request's head) as this buffer's content, without a copy. The buffer must be empty.
    pub fn adopt(&mut self, ctx: &HttpWorkerState, buf: Vec<u8>) {
        self.release(ctx);
        self.end = buf.len();
        self.data = buf;
    }

    /// Gives the storage back to the pool, dropping any bytes in it.
    pub fn release(&mut self, ctx: &HttpWorkerState) {
        self.start = 0;
        self.end = 0;
        self.release_if_empty(ctx);
    }
}
