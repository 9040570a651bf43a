//! The connection's socket, as its task reads and writes it: bytes read go through the sans-IO
//! connection ([`ConnIo::process`]); what it wrote goes out as the socket takes it. Reading and
//! writing are polled together, so a client that writes while it does not read is not
//! deadlocked against, and reading stops while the output piles up.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rampart_proto::h2conn::{ConnectionError, Event};
use rampart_proto::h2frame::{ErrorCode, HEADER_LEN};
use tokio::io::AsyncWrite;
use tokio_util::io::poll_read_buf;

use super::mux::SharedMux;
use crate::stream::Stream;

/// Room kept free for a read: a whole frame of the largest size this side accepts.
const READ_ROOM: usize = 16_384 + HEADER_LEN;

/// What one poll of the socket did.
pub(super) enum Step {
    /// Bytes arrived (or input held back may now be read): [`ConnIo::process`] them.
    Read,
    /// Output went out: writers waiting for room may go on.
    Wrote,
    /// The client closed the connection.
    Closed,
}

pub(super) struct ConnIo {
    stream: Stream,
    inbuf: BytesMut,
    /// How much of the connection's output has been written.
    written: usize,
    /// Input left unread because the output was full.
    held: bool,
    /// Bytes read since [`ConnIo::take_received`] last ran.
    received: u64,
    /// Streams the client reset while a request still used them, since the last look.
    pub peer_resets: u32,
}

impl ConnIo {
    pub fn new(stream: Stream, early: &[u8]) -> Self {
        let mut inbuf = BytesMut::with_capacity(READ_ROOM.max(early.len()));
        inbuf.extend_from_slice(early);
        ConnIo {
            stream,
            inbuf,
            written: 0,
            held: !early.is_empty(),
            received: early.len() as u64,
            peer_resets: 0,
        }
    }

    pub fn take_received(&mut self) -> u64 {
        std::mem::take(&mut self.received)
    }

    /// Writes what it can of the output, then reads what it can.
    pub fn poll_step(&mut self, cx: &mut Context<'_>, mux: &SharedMux) -> Poll<io::Result<Step>> {
        let mut m = mux.borrow_mut();
        m.set_driver(cx.waker());
        let mut wrote = false;
        loop {
            let out = m.conn.output();
            if self.written == out.len() {
                if self.written > 0 {
                    out.clear();
                    self.written = 0;
                }
                break;
            }
            match Pin::new(&mut self.stream).poll_write(cx, &out[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    wrote = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        if wrote && self.written == 0 {
            if let Poll::Ready(Err(e)) = Pin::new(&mut self.stream).poll_flush(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if m.conn.wants_input() {
            if self.held {
                self.held = false;
                return Poll::Ready(Ok(Step::Read));
            }
            if self.inbuf.capacity() - self.inbuf.len() < READ_ROOM {
                self.inbuf.reserve(2 * READ_ROOM);
            }
            match poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.inbuf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(Step::Closed)),
                Poll::Ready(Ok(n)) => {
                    self.received += n as u64;
                    return Poll::Ready(Ok(Step::Read));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if wrote {
            Poll::Ready(Ok(Step::Wrote))
        } else {
            Poll::Pending
        }
    }

    /// Reads the frames in the buffer: DATA and trailers go to their streams, resets and window
    /// updates wake them, and each new stream is pushed to `opened` (its id, and whether its
    /// HEADERS ended it; its head is in the connection's decoded fields until the next call).
    /// Stops at the first new stream so that its head can be laid out.
    pub fn process(&mut self, mux: &SharedMux, opened: &mut Vec<(u32, bool)>) -> Result<(), ConnectionError> {
        let mut m = mux.borrow_mut();
        loop {
            let received = match m.conn.receive(&self.inbuf) {
                Ok(r) => r,
                Err(e) => {
                    self.inbuf.clear();
                    return Err(e);
                }
            };
            let Some(event) = received.event else {
                self.inbuf.advance(received.used);
                self.held = !self.inbuf.is_empty() && !m.conn.wants_input();
                return Ok(());
            };
            if let Event::Data {
                stream,
                at,
                len,
                end_stream,
            } = event
            {
                let frames = self.inbuf.split_to(received.used).freeze();
                m.deliver(stream, frames.slice(at..at + len), end_stream);
                continue;
            }
            self.inbuf.advance(received.used);
            match event {
                Event::Request { stream, end_stream } => {
                    m.open(stream, end_stream);
                    opened.push((stream, end_stream));
                    // More input may wait: read it once this head is laid out.
                    self.held = !self.inbuf.is_empty();
                    return Ok(());
                }
                Event::Trailers { stream } => {
                    let (bytes, fields) = m.conn.fields();
                    let trailers = (bytes.to_vec(), fields.to_vec());
                    m.deliver_trailers(stream, trailers);
                }
                Event::Reset { stream, by_peer, code } => {
                    if m.reset(stream, by_peer) && by_peer && code != ErrorCode::NoError as u32 {
                        self.peer_resets += 1;
                    }
                }
                Event::WindowOpened => m.wake_writers(),
                Event::GoAway { .. } | Event::Data { .. } | Event::Response { .. } => {}
            }
        }
    }

    /// Whether all the output has been written.
    pub fn flushed(&self, mux: &SharedMux) -> bool {
        mux.borrow_mut().conn.output().len() == self.written
    }

    /// Writes what output is left (a last GOAWAY), for at most `limit`, and closes.
    pub async fn finish(&mut self, mux: &SharedMux, limit: Duration) {
        let out = std::mem::take(mux.borrow_mut().conn.output());
        let rest = out.get(self.written..).unwrap_or_default();
        let _ = tokio::time::timeout(limit, async {
            use tokio::io::AsyncWriteExt;
            let _ = self.stream.write_all(rest).await;
            let _ = self.stream.shutdown().await;
        })
        .await;
    }
}
