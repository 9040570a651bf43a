//! What both sides' muxes keep and do alike: the sans-IO connection, each stream's slot (what
//! arrived for it and who waits), the connection task's waker; a stream's reads, credit, DATA out
//! as the windows open, heads, resets. The server side ([`super::mux`]) and the client side
//! ([`super::upstream`]) add only what differs: how a stream opens, and what its errors mean.

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::hash::BuildHasherDefault;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use rampart_proto::h2conn::{Connection, HeadWriter};
use rampart_proto::h2frame::ErrorCode;
use rampart_proto::h2state::IdHasher;

use super::mux::{Incoming, Trailers};
use super::payloads::{Payloads, ZERO_COPY_MIN};

/// Output past this many octets holds writers back until the connection's task has written it.
const OUTPUT_HIGH: usize = 128 * 1024;

/// One stream's state in its connection's mux; `extra` is the side's own.
#[derive(Default)]
pub(crate) struct Slot<X> {
    pub data: VecDeque<Bytes>,
    pub trailers: Option<Trailers>,
    pub ended: bool,
    /// Reset, with the side's flag (the server side: by the client; the client side: refused,
    /// so the request may go elsewhere).
    pub reset: Option<bool>,
    pub reader: Option<Waker>,
    pub writer: Option<Waker>,
    pub extra: X,
}

impl<X> Slot<X> {
    pub fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    pub fn wake_both(&mut self) {
        self.wake_reader();
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

/// Why DATA could not go: the stream's reset flag (`None`: the stream or the connection is gone).
pub(crate) type Gone = Option<bool>;

pub(crate) struct MuxCore<X> {
    pub conn: Connection,
    pub slots: HashMap<u32, Slot<X>, BuildHasherDefault<IdHasher>>,
    driver: Option<Waker>,
    /// The connection is gone: every stream reads a reset.
    pub closed: bool,
    /// DATA payloads written beside the output, not copied into it.
    pub payloads: Payloads,
    /// Whether large payloads go out without a copy (a plain socket, written with vectored
    /// writes; TLS copies into its records anyway).
    pub zero_copy: bool,
}

/// Body data a stream sends: a slice (copied into the output) or [`Bytes`] (large ones written
/// without a copy where the socket allows).
pub(crate) trait DataOut {
    fn left(&self) -> usize;
    /// Sends what the windows let of it as one DATA frame on stream `id`, taking it off;
    /// how many octets went (`None`: the stream is gone).
    fn send_on(&mut self, core: &mut MuxCoreParts<'_>, id: u32, end: bool) -> Option<usize>;
}

/// The parts of a [`MuxCore`] a [`DataOut`] writes to.
pub(crate) struct MuxCoreParts<'a> {
    conn: &'a mut Connection,
    payloads: &'a mut Payloads,
    zero_copy: bool,
}

impl DataOut for &[u8] {
    fn left(&self) -> usize {
        self.len()
    }

    fn send_on(&mut self, core: &mut MuxCoreParts<'_>, id: u32, end: bool) -> Option<usize> {
        let n = core.conn.send_data(id, self, end)?;
        *self = &self[n..];
        Some(n)
    }
}

impl DataOut for Bytes {
    fn left(&self) -> usize {
        self.len()
    }

    fn send_on(&mut self, core: &mut MuxCoreParts<'_>, id: u32, end: bool) -> Option<usize> {
        if !core.zero_copy || self.len() < ZERO_COPY_MIN {
            let n = core.conn.send_data(id, self, end)?;
            self.advance(n);
            return Some(n);
        }
        let n = core.conn.send_data_header(id, self.len(), end)?;
        let at = core.conn.output().len();
        core.payloads.push(at, self.split_to(n));
        Some(n)
    }
}

impl<X: Default> MuxCore<X> {
    pub fn new(conn: Connection) -> Self {
        MuxCore {
            conn,
            slots: HashMap::default(),
            driver: None,
            closed: false,
            payloads: Payloads::default(),
            zero_copy: false,
        }
    }

    pub fn slot(&mut self, id: u32) -> Option<&mut Slot<X>> {
        self.slots.get_mut(&id)
    }

    /// The task that writes the output, to be woken when there is some.
    pub fn set_driver(&mut self, waker: &Waker) {
        match &self.driver {
            Some(w) if w.will_wake(waker) => {}
            _ => self.driver = Some(waker.clone()),
        }
    }

    pub fn wake_driver(&mut self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    /// Body data for stream `id`; for a stream no one reads any more, its credit goes back at
    /// once.
    pub fn deliver(&mut self, id: u32, data: Bytes, end: bool) {
        let len = data.len() as u32;
        match self.slots.get_mut(&id) {
            Some(slot) => {
                if !data.is_empty() {
                    slot.data.push_back(data);
                }
                slot.ended |= end;
                slot.wake_reader();
            }
            None => self.conn.release(id, len),
        }
    }

    /// The trailers the connection just decoded, for stream `id`.
    pub fn deliver_trailers(&mut self, id: u32) {
        let (bytes, fields) = self.conn.fields();
        let trailers = (bytes.to_vec(), fields.to_vec());
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.trailers = Some(trailers);
            slot.ended = true;
            slot.wake_reader();
        }
    }

    /// Stream `id` was reset (with the side's `flag`); whether a request was still using it.
    pub fn reset_slot(&mut self, id: u32, flag: bool) -> bool {
        let Some(slot) = self.slots.get_mut(&id) else {
            return false;
        };
        slot.reset = Some(flag);
        slot.wake_both();
        true
    }

    /// Windows opened, or output was written: every writer looks again.
    pub fn wake_writers(&mut self) {
        for slot in self.slots.values_mut() {
            if let Some(w) = slot.writer.take() {
                w.wake();
            }
        }
    }

    /// The connection ended: every stream reads a reset.
    pub fn close(&mut self) {
        self.closed = true;
        for slot in self.slots.values_mut() {
            slot.wake_both();
        }
    }

    /// The next piece of stream `id`'s body, its end, or its reset.
    pub fn poll_data(&mut self, id: u32, cx: &mut Context<'_>) -> Poll<Incoming> {
        let closed = self.closed;
        let Some(slot) = self.slots.get_mut(&id) else {
            return Poll::Ready(Incoming::Reset);
        };
        if let Some(data) = slot.data.pop_front() {
            return Poll::Ready(Incoming::Data(data));
        }
        if slot.ended {
            return Poll::Ready(Incoming::End);
        }
        if slot.reset.is_some() || closed {
            return Poll::Ready(Incoming::Reset);
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// `n` octets of stream `id`'s body were passed on: credit for more.
    pub fn release(&mut self, id: u32, n: usize) {
        self.conn.release(id, n as u32);
        if !self.conn.output().is_empty() {
            self.wake_driver();
        }
    }

    /// Sends a head on stream `id` (`status`, or trailers); `end`: nothing follows. False when
    /// the stream or the connection is gone.
    pub fn send_head(
        &mut self,
        id: u32,
        status: Option<u16>,
        end: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> bool {
        if self.closed || !self.conn.send_head_with(id, status, end, fill) {
            return false;
        }
        self.wake_driver();
        true
    }

    /// Sends what the windows let of `rest` as DATA on stream `id` (`end`: the last octets end
    /// the stream), taking it off `rest`; waits for a window or for the output to drain.
    pub fn poll_send(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
        rest: &mut impl DataOut,
        end: bool,
    ) -> Poll<Result<(), Gone>> {
        loop {
            let reset = self.slots.get(&id).and_then(|s| s.reset);
            if self.closed || reset.is_some() {
                return Poll::Ready(Err(reset));
            }
            if self.conn.output().len() + self.payloads.bytes() < OUTPUT_HIGH {
                let mut parts = MuxCoreParts {
                    conn: &mut self.conn,
                    payloads: &mut self.payloads,
                    zero_copy: self.zero_copy,
                };
                let Some(n) = rest.send_on(&mut parts, id, end) else {
                    return Poll::Ready(Err(None));
                };
                self.wake_driver();
                if rest.left() == 0 {
                    return Poll::Ready(Ok(()));
                }
                if n > 0 {
                    continue;
                }
            }
            // The window is shut, or the output is full: wait for a WINDOW_UPDATE or a write.
            if let Some(slot) = self.slots.get_mut(&id) {
                slot.writer = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
    }

    /// Ends stream `id` with an empty DATA frame (END_STREAM, which needs no window); false
    /// when it is gone.
    pub fn end_now(&mut self, id: u32) -> bool {
        let sent = self.conn.send_data(id, &[], true).is_some();
        if sent {
            self.wake_driver();
        }
        sent
    }

    /// Resets stream `id` with `code` while it is open either way.
    pub fn reset_stream(&mut self, id: u32, code: ErrorCode) {
        if self.conn.can_send(id) || self.conn.receiving(id) {
            self.conn.reset(id, code);
            self.wake_driver();
        }
    }

    /// The request is done with stream `id`: its slot goes, what it never read gets its credit
    /// back, and `reset` says with what code (if any) a stream still open is reset, given
    /// whether this side may still send and whether the peer still does.
    pub fn close_stream(&mut self, id: u32, reset: impl FnOnce(bool, bool) -> Option<ErrorCode>) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        let unread: usize = slot.data.iter().map(Bytes::len).sum();
        self.conn.release(id, unread as u32);
        if let Some(code) = reset(self.conn.can_send(id), self.conn.receiving(id)) {
            self.conn.reset(id, code);
        }
        if !self.conn.output().is_empty() {
            self.wake_driver();
        }
    }
}

/// Sends all of `data` with `poll_send` (a stream's [`MuxCore::poll_send`]), each wait for a
/// window at most `limit`: `None` when a window stayed shut that long.
pub(crate) async fn send_within<D: DataOut, E, P>(data: D, limit: Duration, mut poll_send: P) -> Option<Result<(), E>>
where
    P: FnMut(&mut Context<'_>, &mut D) -> Poll<Result<(), E>>,
{
    let mut rest = data;
    loop {
        let before = rest.left();
        let sending = poll_fn(|cx| poll_send(cx, &mut rest));
        match super::within(limit, sending).await {
            Some(result) => return Some(result),
            None if rest.left() < before => continue,
            None => return None,
        }
    }
}
