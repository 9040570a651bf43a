//! HTTP/2 toward upstreams: the client side of Rampart's own HTTP/2. A connection
//! ([`handshake`]) is the sans-IO client connection (`rampart_proto::h2conn::Connection::client`)
//! driven by a task of its own on the worker (its requests come and go; the connection stays
//! for the pool), and each request's stream is an [`UpStream`]: state in the connection's
//! [`UpMux`], no task of its own. Response heads are moved out of the connection's decoded field
//! section as they are (no map), DATA arrives as slices of the read buffer, and the response's
//! credit goes back as the client side takes it.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h1::Field;
use rampart_proto::h2conn::{ClientConfig, Connection, Event, HeadWriter, OpenError};
use rampart_proto::h2frame::ErrorCode;
use rampart_proto::h2state::IdHasher;

use super::io::{ConnIo, Driven, Step};
use super::mux::{Incoming, Trailers};
use crate::http::error::HttpError;
use crate::stream::Stream;

/// Output past this many octets holds writers back until the connection's task has written it.
const OUTPUT_HIGH: usize = 128 * 1024;

/// A response head as it came: status, its field section's octets and fields (`:status` left
/// out), and whether it ended the stream.
pub(crate) struct ResponseIn {
    pub status: u16,
    pub bytes: Vec<u8>,
    pub fields: Vec<Field>,
    pub ended: bool,
}

#[derive(Default)]
struct UpSlot {
    head: Option<ResponseIn>,
    data: VecDeque<Bytes>,
    trailers: Option<Trailers>,
    ended: bool,
    /// Reset by the server (or the connection is gone): with REFUSED_STREAM or past a GOAWAY,
    /// the request was never processed.
    reset: Option<bool>,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

pub(crate) struct UpMux {
    conn: Connection,
    slots: HashMap<u32, UpSlot, BuildHasherDefault<IdHasher>>,
    driver: Option<Waker>,
    closed: bool,
    /// No handle to the connection is left: once its streams are done, it closes.
    abandoned: bool,
}

type SharedUpMux = Rc<RefCell<UpMux>>;

impl UpMux {
    fn slot(&mut self, id: u32) -> Option<&mut UpSlot> {
        self.slots.get_mut(&id)
    }

    fn wake_driver(&mut self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    fn reset_slot(&mut self, id: u32, refused: bool) {
        if let Some(slot) = self.slot(id) {
            slot.reset = Some(refused);
            wake(&mut slot.reader);
            wake(&mut slot.writer);
        }
    }

    fn close(&mut self) {
        self.closed = true;
        for slot in self.slots.values_mut() {
            wake(&mut slot.reader);
            wake(&mut slot.writer);
        }
    }
}

fn wake(waker: &mut Option<Waker>) {
    if let Some(w) = waker.take() {
        w.wake();
    }
}

impl Driven for UpMux {
    fn conn(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn set_driver(&mut self, waker: &Waker) {
        match &self.driver {
            Some(w) if w.will_wake(waker) => {}
            _ => self.driver = Some(waker.clone()),
        }
    }

    fn deliver(&mut self, id: u32, data: Bytes, end: bool) {
        let len = data.len() as u32;
        match self.slot(id) {
            Some(slot) => {
                if !data.is_empty() {
                    slot.data.push_back(data);
                }
                slot.ended |= end;
                wake(&mut slot.reader);
            }
            None => self.conn.release(id, len),
        }
    }

    fn idle(&self) -> bool {
        self.slots.is_empty()
    }

    fn on_event(&mut self, event: Event) -> bool {
        match event {
            Event::Response { stream, end_stream } => {
                let (bytes, fields) = self.conn.fields();
                let status = fields.first().map_or(0, |f| parse_status(f.value(bytes)));
                // Interim answers are not passed on: the final head is waited for.
                if status >= 200 {
                    let (bytes, mut fields) = self.conn.take_fields();
                    fields.remove(0);
                    if let Some(slot) = self.slot(stream) {
                        slot.head = Some(ResponseIn {
                            status,
                            bytes,
                            fields,
                            ended: end_stream,
                        });
                        slot.ended |= end_stream;
                        wake(&mut slot.reader);
                    }
                }
            }
            Event::Trailers { stream } => {
                let (bytes, fields) = self.conn.fields();
                let trailers = (bytes.to_vec(), fields.to_vec());
                if let Some(slot) = self.slot(stream) {
                    slot.trailers = Some(trailers);
                    slot.ended = true;
                    wake(&mut slot.reader);
                }
            }
            Event::Reset { stream, code, .. } => {
                self.reset_slot(stream, code == ErrorCode::RefusedStream as u32);
            }
            Event::GoAway { last_stream, code } => {
                // Streams past the last one the server took were never processed; with an error,
                // the others end with it too.
                let ids: Vec<u32> = self.slots.keys().copied().collect();
                for id in ids {
                    if id > last_stream {
                        self.reset_slot(id, true);
                    } else if code != ErrorCode::NoError as u32 {
                        self.reset_slot(id, false);
                    }
                }
            }
            Event::WindowOpened => {
                for slot in self.slots.values_mut() {
                    wake(&mut slot.writer);
                }
            }
            Event::Request { .. } | Event::Data { .. } => {}
        }
        false
    }
}

fn parse_status(value: &[u8]) -> u16 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What the pool holds of a connection: dropping the last handle lets it close once its
/// streams are done.
pub(crate) struct ConnHandle {
    mux: SharedUpMux,
    /// Set by the connection's task when it ends.
    pub closed: Rc<Cell<bool>>,
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        let mut mux = self.mux.borrow_mut();
        mux.abandoned = true;
        mux.wake_driver();
    }
}

impl ConnHandle {
    /// Whether a stream may open on it now (the server's concurrent-stream limit, GOAWAY, the
    /// identifiers left).
    pub fn can_open(&self) -> bool {
        !self.closed.get() && self.mux.borrow().conn.can_open()
    }

    /// Opens a stream with the request head `fill` writes (pseudo-header fields first); `end`:
    /// no body follows. A connection that cannot take it refuses it (the request may go
    /// elsewhere).
    pub fn open(
        &self,
        end: bool,
        head_request: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> Result<UpStream, HttpError> {
        let mut mux = self.mux.borrow_mut();
        if mux.closed {
            return Err(HttpError::UpstreamRefused);
        }
        let id = match mux.conn.open_stream(end, head_request, fill) {
            Ok(id) => id,
            Err(OpenError::Failed) => return Err(HttpError::UpstreamReset),
            Err(_) => return Err(HttpError::UpstreamRefused),
        };
        mux.slots.insert(id, UpSlot::default());
        mux.wake_driver();
        Ok(UpStream {
            mux: self.mux.clone(),
            id,
        })
    }
}

/// Starts HTTP/2 on a new connection (its preface and SETTINGS go at once) and drives it in a
/// task of its own until it ends.
pub(crate) fn handshake(stream: Stream, stream_window: u32, connection_window: u32) -> ConnHandle {
    let conn = Connection::client(ClientConfig {
        max_header_list_size: 256 * 1024,
        stream_window,
        connection_window,
    });
    let mux = Rc::new(RefCell::new(UpMux {
        conn,
        slots: HashMap::default(),
        driver: None,
        closed: false,
        abandoned: false,
    }));
    let closed = Rc::new(Cell::new(false));
    let (task_mux, ended) = (mux.clone(), closed.clone());
    tokio::task::spawn_local(async move {
        drive(stream, &task_mux).await;
        task_mux.borrow_mut().close();
        ended.set(true);
    });
    ConnHandle { mux, closed }
}

/// The connection's task: reads and writes until the server or the socket ends it, or no one
/// holds the connection and its streams are done (then GOAWAY and a close).
async fn drive(stream: Stream, mux: &SharedUpMux) {
    let mut io = ConnIo::new(stream, &[]);
    loop {
        // Woken with nothing read or written, the connection looks whether it is still wanted.
        let step = poll_fn(|cx| {
            let unwanted = {
                let m = mux.borrow();
                m.abandoned && m.slots.is_empty()
            };
            if unwanted {
                return Poll::Ready(None);
            }
            io.poll_step(cx, &**mux).map(Some)
        })
        .await;
        match step {
            None => {
                mux.borrow_mut().conn.go_away(ErrorCode::NoError);
                break;
            }
            Some(Ok(Step::Read)) => {
                if let Err(e) = io.process(&**mux) {
                    tracing::debug!("upstream HTTP/2 connection failed: {e}");
                    break;
                }
            }
            Some(Ok(Step::Wrote)) => {
                let mut m = mux.borrow_mut();
                for slot in m.slots.values_mut() {
                    wake(&mut slot.writer);
                }
            }
            Some(Ok(Step::Closed)) => break,
            Some(Err(e)) => {
                tracing::debug!("upstream HTTP/2 connection ended: {e}");
                break;
            }
        }
    }
    mux.borrow_mut().close();
    io.finish(&**mux, Duration::from_secs(1)).await;
}

/// One request's stream on an upstream connection. Dropping it resets a stream not yet done.
pub(crate) struct UpStream {
    mux: SharedUpMux,
    id: u32,
}

impl UpStream {
    fn gone(&self, slot_reset: Option<bool>) -> HttpError {
        match slot_reset {
            Some(true) => HttpError::UpstreamRefused,
            _ => HttpError::UpstreamReset,
        }
    }

    /// The final response head.
    pub async fn response(&self) -> Result<ResponseIn, HttpError> {
        poll_fn(|cx| {
            let mut mux = self.mux.borrow_mut();
            let closed = mux.closed;
            let Some(slot) = mux.slot(self.id) else {
                return Poll::Ready(Err(HttpError::UpstreamReset));
            };
            if let Some(head) = slot.head.take() {
                return Poll::Ready(Ok(head));
            }
            if slot.reset.is_some() || closed {
                let reset = slot.reset;
                return Poll::Ready(Err(self.gone(reset)));
            }
            slot.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    fn poll_data(&self, cx: &mut Context<'_>) -> Poll<Incoming> {
        let mut mux = self.mux.borrow_mut();
        let closed = mux.closed;
        let Some(slot) = mux.slot(self.id) else {
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

    /// The next piece of the response body; its credit goes back with [`UpStream::release`].
    pub async fn data(&self) -> Incoming {
        poll_fn(|cx| self.poll_data(cx)).await
    }

    /// The response's trailers, once [`Incoming::End`] was read.
    pub fn take_trailers(&self) -> Option<Trailers> {
        self.mux.borrow_mut().slot(self.id)?.trailers.take()
    }

    /// `n` octets of the response were passed on: credit for more.
    pub fn release(&self, n: usize) {
        let mut mux = self.mux.borrow_mut();
        mux.conn.release(self.id, n as u32);
        if !mux.conn.output().is_empty() {
            mux.wake_driver();
        }
    }

    fn poll_send(&self, cx: &mut Context<'_>, rest: &mut &[u8], end: bool) -> Poll<Result<(), HttpError>> {
        let mut mux = self.mux.borrow_mut();
        loop {
            let reset = mux.slot(self.id).and_then(|s| s.reset);
            if mux.closed || reset.is_some() {
                return Poll::Ready(Err(self.gone(reset)));
            }
            if mux.conn.output().len() < OUTPUT_HIGH {
                let Some(n) = mux.conn.send_data(self.id, rest, end) else {
                    return Poll::Ready(Err(HttpError::UpstreamReset));
                };
                mux.wake_driver();
                *rest = &rest[n..];
                if rest.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                if n > 0 {
                    continue;
                }
            }
            if let Some(slot) = mux.slot(self.id) {
                slot.writer = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
    }

    /// Sends `data` as DATA as the server's windows open, each wait at most `limit`; `end` ends
    /// the request with the last octets.
    pub async fn send_data(&self, data: &[u8], end: bool, limit: Duration) -> Result<(), HttpError> {
        let mut rest = data;
        loop {
            let before = rest.len();
            match super::within(limit, poll_fn(|cx| self.poll_send(cx, &mut rest, end))).await {
                Some(result) => return result,
                None if rest.len() < before => continue,
                None => return Err(HttpError::UpstreamWriteTimeout),
            }
        }
    }

    /// Ends the request with trailers.
    pub fn send_trailers(&self, fill: impl FnOnce(&mut HeadWriter<'_>)) -> Result<(), HttpError> {
        let mut mux = self.mux.borrow_mut();
        if !mux.conn.send_head_with(self.id, None, true, fill) {
            return Err(HttpError::UpstreamReset);
        }
        mux.wake_driver();
        Ok(())
    }

    /// Ends the request with an empty DATA frame (END_STREAM), which needs no window.
    pub fn end_now(&self) -> Result<(), HttpError> {
        let mut mux = self.mux.borrow_mut();
        if mux.conn.send_data(self.id, &[], true).is_none() {
            return Err(HttpError::UpstreamReset);
        }
        mux.wake_driver();
        Ok(())
    }

    /// Resets the stream (CANCEL).
    pub fn cancel(&self) {
        let mut mux = self.mux.borrow_mut();
        if mux.conn.can_send(self.id) || mux.conn.receiving(self.id) {
            mux.conn.reset(self.id, ErrorCode::Cancel);
            mux.wake_driver();
        }
    }
}

impl Drop for UpStream {
    /// The request is done with the stream: one still open is reset (the response is not
    /// wanted), and what was never read gets its credit back.
    fn drop(&mut self) {
        let Ok(mut mux) = self.mux.try_borrow_mut() else {
            return;
        };
        let Some(slot) = mux.slots.remove(&self.id) else {
            return;
        };
        let unread: usize = slot.data.iter().map(Bytes::len).sum();
        mux.conn.release(self.id, unread as u32);
        if mux.conn.can_send(self.id) || mux.conn.receiving(self.id) {
            mux.conn.reset(self.id, ErrorCode::Cancel);
        }
        mux.wake_driver();
    }
}
