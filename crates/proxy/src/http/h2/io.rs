//! An HTTP/2 connection's socket, as its task reads and writes it, on either side: bytes read go
//! through the sans-IO connection ([`ConnIo::process`]) and what they mean to the side's mux
//! ([`Driven`]); what the connection wrote goes out as the socket takes it. Reading and writing
//! are polled together, so a peer that writes while it does not read is not deadlocked against,
//! and reading stops while the output piles up.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::cell::RefCell;

use bytes::{Buf, BytesMut};
use rampart_proto::h2conn::{ConnectionError, Event};
use rampart_proto::h2frame::HEADER_LEN;
use tokio::io::AsyncWrite;
use tokio_util::io::poll_read_buf;

use super::core::MuxCore;
use crate::stream::Stream;

/// A side's mux, as the socket's driver sees it: the shared core (the connection, the streams'
/// slots), and what the side does with an event.
pub(crate) trait Driven {
    /// The side's own part of a stream's slot.
    type Slot: Default;
    fn core(&mut self) -> &mut MuxCore<Self::Slot>;
    /// An event other than DATA (which goes to its stream's slot); `true` stops the reading
    /// there (a new stream to lay out first).
    fn on_event(&mut self, event: Event) -> bool;
}

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
}

impl ConnIo {
    /// The driver of `mux`'s connection over `stream`, `early` bytes already read from it.
    pub fn new(stream: Stream, early: &[u8], mux: &RefCell<impl Driven>) -> Self {
        mux.borrow_mut().core().zero_copy = matches!(stream, Stream::Tcp(_));
        let mut inbuf = BytesMut::with_capacity(READ_ROOM.max(early.len()));
        inbuf.extend_from_slice(early);
        ConnIo {
            stream,
            inbuf,
            written: 0,
            held: !early.is_empty(),
            received: early.len() as u64,
        }
    }

    pub fn take_received(&mut self) -> u64 {
        std::mem::take(&mut self.received)
    }

    /// Writes what it can of the output, then reads what it can.
    pub fn poll_step(&mut self, cx: &mut Context<'_>, mux: &RefCell<impl Driven>) -> Poll<io::Result<Step>> {
        let mut m = mux.borrow_mut();
        m.core().set_driver(cx.waker());
        let mut wrote = false;
        loop {
            let core = m.core();
            let out = core.conn.output();
            if self.written == out.len() && core.payloads.is_empty() {
                if self.written > 0 {
                    out.clear();
                    self.written = 0;
                }
                break;
            }
            let stream = Pin::new(&mut self.stream);
            let polled = match core.payloads.is_empty() {
                true => stream.poll_write(cx, &out[self.written..]),
                false => stream.poll_write_vectored(cx, &core.payloads.gather(out, self.written)),
            };
            match polled {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    core.payloads.advance(&mut self.written, n);
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
        if m.core().conn.wants_input() {
            if self.held {
                self.held = false;
                return Poll::Ready(Ok(Step::Read));
            }
            // The buffer is taken only once the socket is readable (an idle connection gave it
            // back: `release_if_idle`).
            match self.stream.poll_read_ready(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
                Poll::Ready(Ok(())) => {
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
            }
        }
        if wrote {
            Poll::Ready(Ok(Step::Wrote))
        } else {
            Poll::Pending
        }
    }

    /// Reads the frames in the buffer: DATA goes to its stream as a slice of the buffer, every
    /// other event to the mux, until the frames run out or the mux says stop (a new stream, on
    /// the server side, whose head is in the connection's decoded fields until the next call).
    pub fn process(&mut self, mux: &RefCell<impl Driven>) -> Result<(), ConnectionError> {
        let mut m = mux.borrow_mut();
        loop {
            let received = match m.core().conn.receive(&self.inbuf) {
                Ok(r) => r,
                Err(e) => {
                    self.inbuf.clear();
                    return Err(e);
                }
            };
            let Some(event) = received.event else {
                self.inbuf.advance(received.used);
                self.held = !self.inbuf.is_empty() && !m.core().conn.wants_input();
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
                m.core().deliver(stream, frames.slice(at..at + len), end_stream);
                continue;
            }
            self.inbuf.advance(received.used);
            if m.on_event(event) {
                // More input may wait: read it once the mux has done with this event.
                self.held = !self.inbuf.is_empty();
                return Ok(());
            }
        }
    }

    /// Gives back the read buffer and the connection's scratch buffers while nothing is in them
    /// and no stream is open (an idle connection then holds neither). Called now and then, not
    /// per read: a connection between two bursts of requests would otherwise give its buffers
    /// back and take new ones for every burst.
    pub fn release_if_idle(&mut self, mux: &RefCell<impl Driven>) {
        let mut m = mux.borrow_mut();
        let core = m.core();
        let quiet = self.written == 0 && core.payloads.is_empty() && core.slots.is_empty();
        if quiet && self.inbuf.is_empty() && self.inbuf.capacity() > 0 {
            self.inbuf = BytesMut::new();
            core.conn.release_buffers();
        }
    }

    /// Whether all the output has been written.
    pub fn flushed(&self, mux: &RefCell<impl Driven>) -> bool {
        let mut m = mux.borrow_mut();
        let core = m.core();
        core.conn.output().len() == self.written && core.payloads.is_empty()
    }

    /// Writes what output is left (a last GOAWAY), for at most `limit`, and closes.
    pub async fn finish(&mut self, mux: &RefCell<impl Driven>, limit: Duration) {
        let rest = {
            let mut m = mux.borrow_mut();
            let core = m.core();
            let rest = core.payloads.flatten(core.conn.output(), self.written);
            core.payloads = Default::default();
            core.conn.output().clear();
            rest
        };
        let _ = tokio::time::timeout(limit, async {
            use tokio::io::AsyncWriteExt;
            let _ = self.stream.write_all(&rest).await;
            let _ = self.stream.shutdown().await;
        })
        .await;
    }
}
