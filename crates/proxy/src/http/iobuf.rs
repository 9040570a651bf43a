//! A read buffer with start and end cursors: bytes are read in at the end, parsed or forwarded
//! from the start. The storage comes from the worker's pool and goes back to it when empty, so an
//! idle keep-alive connection holds no buffer.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::worker::WorkerContext;

/// Initial size of an HTTP read buffer; it grows (up to the head limit) only for large heads.
/// Upstream responses are read into one too: 32 KiB takes a head and a 16 KiB body in one read.
pub const HTTP_BUFFER_SIZE: usize = 32 * 1024;

#[derive(Default)]
pub struct IoBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
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

    /// Reads once from `stream` into free space, taking storage from the pool if this buffer has
    /// none, and growing it (up to `max`) when it is full. Returns the bytes read (0 at EOF).
    pub async fn read_from(&mut self, ctx: &WorkerContext, stream: &mut TcpStream, max: usize) -> io::Result<usize> {
        self.make_room(ctx, max)?;
        let n = stream.read(&mut self.data[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    /// Reads what is there now without waiting (`WouldBlock` when nothing is).
    pub fn try_read_from(&mut self, ctx: &WorkerContext, stream: &TcpStream, max: usize) -> io::Result<usize> {
        self.make_room(ctx, max)?;
        let n = stream.try_read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }

    fn make_room(&mut self, ctx: &WorkerContext, max: usize) -> io::Result<()> {
        if self.data.is_empty() {
            self.data = ctx.take_http_buffer();
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

    /// Gives the storage back to the pool if no bytes are waiting in it.
    pub fn release_if_empty(&mut self, ctx: &WorkerContext) {
        if self.is_empty() && !self.data.is_empty() {
            ctx.give_http_buffer(std::mem::take(&mut self.data));
        }
    }

    /// Gives the storage back to the pool, dropping any bytes in it.
    pub fn release(&mut self, ctx: &WorkerContext) {
        self.start = 0;
        self.end = 0;
        self.release_if_empty(ctx);
    }
}
