//! The state one HTTP/2 connection's task shares with its streams: the sans-IO connection
//! (`rampart_proto::h2conn`), and per stream what arrived for it and who waits. Streams reach
//! it through a [`StreamIo`]; everything runs in the connection's one task, so a `RefCell`
//! borrowed only between awaits is all the sharing needs (no lock, no task per stream).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h1::Field;
use rampart_proto::h2conn::{Connection, Event, HeadWriter};
use rampart_proto::h2frame::ErrorCode;
use rampart_proto::h2state::IdHasher;

use super::io::Driven;
use crate::http::error::HttpError;

/// Output past this many octets holds writers back until the connection's task has written it.
const OUTPUT_HIGH: usize = 128 * 1024;

/// A stream's trailers: their octets and fields as ranges into them.
pub(crate) type Trailers = (Vec<u8>, Vec<Field>);

/// What a stream's reader gets next.
pub(crate) enum Incoming {
    Data(Bytes),
    /// The request body ended (with trailers, if any: [`StreamIo::take_trailers`]).
    End,
    /// The stream was reset, or the connection is gone.
    Reset,
}

#[derive(Default)]
struct Slot {
    data: VecDeque<Bytes>,
    trailers: Option<Trailers>,
    ended: bool,
    /// Reset, and by whom (`true`: the client).
    reset: Option<bool>,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

pub(crate) struct Mux {
    pub conn: Connection,
    slots: HashMap<u32, Slot, BuildHasherDefault<IdHasher>>,
    /// Streams opened since the connection's task last looked (each id, and whether its HEADERS
    /// ended it): their heads are to be laid out.
    pub opened: Vec<(u32, bool)>,
    /// Streams the client reset while a request still used them, since the last look.
    pub peer_resets: u32,
    /// The connection's task, woken when there is output to write.
    driver: Option<Waker>,
    /// The connection is gone: every stream reads a reset.
    closed: bool,
}

pub(crate) type SharedMux = Rc<RefCell<Mux>>;

impl Mux {
    pub fn new(conn: Connection) -> SharedMux {
        Rc::new(RefCell::new(Mux {
            conn,
            slots: HashMap::default(),
            opened: Vec::new(),
            peer_resets: 0,
            driver: None,
            closed: false,
        }))
    }

    fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.slots.get_mut(&id)
    }

    /// A stream the connection's task hands to a request.
    fn open(&mut self, id: u32, ended: bool) {
        self.slots.insert(
            id,
            Slot {
                ended,
                ..Slot::default()
            },
        );
    }

    fn wake_driver(&mut self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    fn deliver_trailers(&mut self, id: u32, trailers: Trailers) {
        if let Some(slot) = self.slot(id) {
            slot.trailers = Some(trailers);
            slot.ended = true;
            if let Some(w) = slot.reader.take() {
                w.wake();
            }
        }
    }

    /// Stream `id` was reset; whether a request was still using it.
    fn reset(&mut self, id: u32, by_peer: bool) -> bool {
        let Some(slot) = self.slot(id) else {
            return false;
        };
        slot.reset = Some(by_peer);
        wake_both(slot);
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
            wake_both(slot);
        }
    }
}

impl Driven for Mux {
    fn conn(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn set_driver(&mut self, waker: &Waker) {
        match &self.driver {
            Some(w) if w.will_wake(waker) => {}
            _ => self.driver = Some(waker.clone()),
        }
    }

    /// Request body data for stream `id`; for a stream no one reads any more, its credit goes
    /// back at once.
    fn deliver(&mut self, id: u32, data: Bytes, end: bool) {
        let len = data.len() as u32;
        match self.slot(id) {
            Some(slot) => {
                if !data.is_empty() {
                    slot.data.push_back(data);
                }
                slot.ended |= end;
                if let Some(w) = slot.reader.take() {
                    w.wake();
                }
            }
            None => self.conn.release(id, len),
        }
    }

    fn idle(&self) -> bool {
        self.slots.is_empty()
    }

    fn on_event(&mut self, event: Event) -> bool {
        match event {
            Event::Request { stream, end_stream } => {
                self.open(stream, end_stream);
                self.opened.push((stream, end_stream));
                return true;
            }
            Event::Trailers { stream } => {
                let (bytes, fields) = self.conn.fields();
                let trailers = (bytes.to_vec(), fields.to_vec());
                self.deliver_trailers(stream, trailers);
            }
            Event::Reset { stream, by_peer, code } => {
                if self.reset(stream, by_peer) && by_peer && code != ErrorCode::NoError as u32 {
                    self.peer_resets += 1;
                }
            }
            Event::WindowOpened => self.wake_writers(),
            Event::GoAway { .. } | Event::Data { .. } | Event::Response { .. } => {}
        }
        false
    }
}

fn wake_both(slot: &mut Slot) {
    if let Some(w) = slot.reader.take() {
        w.wake();
    }
    if let Some(w) = slot.writer.take() {
        w.wake();
    }
}

/// One stream's way to its connection.
#[derive(Clone)]
pub(crate) struct StreamIo {
    pub mux: SharedMux,
    pub id: u32,
}

impl StreamIo {
    fn poll_data(&self, cx: &mut Context<'_>) -> Poll<Incoming> {
        let mut mux = self.mux.borrow_mut();
        let closed = mux.closed;
        let Some(slot) = mux.slot(self.id) else {
            return Poll::Ready(Incoming::Reset);
        };
        if slot.reset.is_some() {
            return Poll::Ready(Incoming::Reset);
        }
        if let Some(data) = slot.data.pop_front() {
            return Poll::Ready(Incoming::Data(data));
        }
        if slot.ended {
            return Poll::Ready(Incoming::End);
        }
        if closed {
            return Poll::Ready(Incoming::Reset);
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The next piece of the request body. Its flow-control credit goes back once it has been
    /// passed on: [`StreamIo::release`].
    pub async fn data(&self) -> Incoming {
        poll_fn(|cx| self.poll_data(cx)).await
    }

    /// The request's trailers, once [`Incoming::End`] was read.
    pub fn take_trailers(&self) -> Option<Trailers> {
        self.mux.borrow_mut().slot(self.id)?.trailers.take()
    }

    /// `n` octets of the request body were passed on: credit for more.
    pub fn release(&self, n: usize) {
        let mut mux = self.mux.borrow_mut();
        mux.conn.release(self.id, n as u32);
        if !mux.conn.output().is_empty() {
            mux.wake_driver();
        }
    }

    /// The client reset the stream (so far as this side has read).
    pub fn reset_by_peer(&self) -> bool {
        let mut mux = self.mux.borrow_mut();
        mux.slot(self.id).is_some_and(|s| s.reset == Some(true))
    }

    /// Sends a head (a response, `status`, or trailers); `end`: nothing follows.
    pub fn send_head(
        &self,
        status: Option<u16>,
        end: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> Result<(), HttpError> {
        let mut mux = self.mux.borrow_mut();
        if mux.closed || !mux.conn.send_head_with(self.id, status, end, fill) {
            return Err(HttpError::ClientGone);
        }
        mux.wake_driver();
        Ok(())
    }

    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        rest: &mut &[u8],
        end: bool,
        sent: &mut u64,
    ) -> Poll<Result<(), HttpError>> {
        let mut mux = self.mux.borrow_mut();
        loop {
            if mux.closed || mux.slot(self.id).is_some_and(|s| s.reset.is_some()) {
                return Poll::Ready(Err(HttpError::ClientGone));
            }
            if mux.conn.output().len() < OUTPUT_HIGH {
                let Some(n) = mux.conn.send_data(self.id, rest, end) else {
                    return Poll::Ready(Err(HttpError::ClientGone));
                };
                mux.wake_driver();
                *sent += n as u64;
                *rest = &rest[n..];
                if rest.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                if n > 0 {
                    continue;
                }
            }
            // The window is shut, or the output is full: wait for a WINDOW_UPDATE or a write.
            if let Some(slot) = mux.slot(self.id) {
                slot.writer = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
    }

    /// Sends `data` as DATA as the client's windows open, each wait at most `limit` (a window
    /// that stays shut fails the stream); `end` ends the stream with the last octets.
    pub async fn send_data(&self, data: &[u8], end: bool, limit: Duration, sent: &mut u64) -> Result<(), HttpError> {
        let mut rest = data;
        loop {
            let before = rest.len();
            let sending = poll_fn(|cx| self.poll_send(cx, &mut rest, end, sent));
            match super::within(limit, sending).await {
                Some(result) => return result,
                None if rest.len() < before => continue,
                None => {
                    tracing::debug!("HTTP/2 stream stalled: the client's window stayed shut");
                    return Err(HttpError::ClientGone);
                }
            }
        }
    }

    /// Ends the response with an empty DATA frame (END_STREAM).
    pub fn end_stream(&self) {
        let mut mux = self.mux.borrow_mut();
        if mux.conn.send_data(self.id, &[], true).is_some() {
            mux.wake_driver();
        }
    }

    /// Resets the stream with `code`.
    pub fn reset(&self, code: ErrorCode) {
        let mut mux = self.mux.borrow_mut();
        if mux.conn.can_send(self.id) || mux.conn.receiving(self.id) {
            mux.conn.reset(self.id, code);
            mux.wake_driver();
        }
    }

    /// The request is done with the stream: what it never read gets its credit back, and a
    /// client still sending a body no one will read is told to stop (RST_STREAM NO_ERROR after
    /// a complete response, RFC 9113 section 8.1).
    pub fn close(&self) {
        let mut mux = self.mux.borrow_mut();
        let Some(slot) = mux.slots.remove(&self.id) else {
            return;
        };
        let unread: usize = slot.data.iter().map(Bytes::len).sum();
        mux.conn.release(self.id, unread as u32);
        if mux.conn.receiving(self.id) && !mux.conn.can_send(self.id) {
            mux.conn.reset(self.id, ErrorCode::NoError);
        }
        if !mux.conn.output().is_empty() {
            mux.wake_driver();
        }
    }
}
