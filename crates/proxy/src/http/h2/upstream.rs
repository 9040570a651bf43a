//! HTTP/2 toward upstreams: the client side of Rampart's own HTTP/2. A connection
//! ([`handshake`]) is the sans-IO client connection (`rampart_proto::h2conn::Connection::client`)
//! driven by a task of its own on the worker (its requests come and go; the connection stays
//! for the pool), and each request's stream is an [`UpStream`]: state in the connection's
//! [`UpMux`] (the shared [`MuxCore`]), no task of its own. Response heads are moved out of the
//! connection's decoded field section as they are (no map), DATA arrives as slices of the read
//! buffer, and the response's credit goes back as the client side takes it.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use rampart_proto::h1::Field;
use rampart_proto::h2conn::{ClientConfig, Connection, Event, HeadWriter, OpenError};
use rampart_proto::h2frame::ErrorCode;

use super::core::{send_within, DataOut, Gone, MuxCore};
use super::io::{ConnIo, Driven, Step};
use super::mux::{Incoming, Trailers};
use crate::http::error::HttpError;
use crate::stream::Stream;

/// A response head as it came: status, its field section's octets and fields (`:status` left
/// out), and whether it ended the stream.
pub(crate) struct ResponseIn {
    pub status: u16,
    pub bytes: Vec<u8>,
    pub fields: Vec<Field>,
    pub ended: bool,
}

pub(crate) struct UpMux {
    /// The connection and the streams' slots: each slot's own part is its final response head
    /// once it came, and its reset flag says the stream was refused (REFUSED_STREAM, or past a
    /// GOAWAY: never processed, so the request may go elsewhere).
    core: MuxCore<Option<ResponseIn>>,
    /// No handle to the connection is left: once its streams are done, it closes.
    abandoned: bool,
}

type SharedUpMux = Rc<RefCell<UpMux>>;

impl Driven for UpMux {
    type Slot = Option<ResponseIn>;

    fn core(&mut self) -> &mut MuxCore<Option<ResponseIn>> {
        &mut self.core
    }

    fn on_event(&mut self, event: Event) -> bool {
        let core = &mut self.core;
        match event {
            Event::Response { stream, end_stream } => {
                let (bytes, fields) = core.conn.fields();
                let status = fields.first().map_or(0, |f| parse_status(f.value(bytes)));
                // Interim answers are not passed on: the final head is waited for.
                if status >= 200 {
                    let (bytes, mut fields) = core.conn.take_fields();
                    fields.remove(0);
                    if let Some(slot) = core.slot(stream) {
                        slot.extra = Some(ResponseIn {
                            status,
                            bytes,
                            fields,
                            ended: end_stream,
                        });
                        slot.ended |= end_stream;
                        slot.wake_reader();
                    }
                }
            }
            Event::Trailers { stream } => core.deliver_trailers(stream),
            Event::Reset { stream, code, .. } => {
                core.reset_slot(stream, code == ErrorCode::RefusedStream as u32);
            }
            Event::GoAway { last_stream, code } => {
                // Streams past the last one the server took were never processed; with an error,
                // the others end with it too.
                let ids: Vec<u32> = core.slots.keys().copied().collect();
                for id in ids {
                    if id > last_stream {
                        core.reset_slot(id, true);
                    } else if code != ErrorCode::NoError as u32 {
                        core.reset_slot(id, false);
                    }
                }
            }
            Event::WindowOpened => core.wake_writers(),
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
        mux.core.wake_driver();
    }
}

impl ConnHandle {
    /// Whether a stream may open on it now (the server's concurrent-stream limit, GOAWAY, the
    /// identifiers left).
    pub fn can_open(&self) -> bool {
        !self.closed.get() && self.mux.borrow().core.conn.can_open()
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
        let core = &mut self.mux.borrow_mut().core;
        if core.closed {
            return Err(HttpError::UpstreamRefused);
        }
        let id = match core.conn.open_stream(end, head_request, fill) {
            Ok(id) => id,
            Err(OpenError::Failed) => return Err(HttpError::UpstreamReset),
            Err(_) => return Err(HttpError::UpstreamRefused),
        };
        core.slots.insert(id, Default::default());
        core.wake_driver();
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
        core: MuxCore::new(conn),
        abandoned: false,
    }));
    let closed = Rc::new(Cell::new(false));
    let (task_mux, ended) = (mux.clone(), closed.clone());
    tokio::task::spawn_local(async move {
        drive(stream, &task_mux).await;
        ended.set(true);
    });
    ConnHandle { mux, closed }
}

/// The connection's task: reads and writes until the server or the socket ends it, or no one
/// holds the connection and its streams are done (then GOAWAY and a close).
async fn drive(stream: Stream, mux: &SharedUpMux) {
    let mut io = ConnIo::new(stream, &[], mux);
    loop {
        // Woken with nothing read or written, the connection looks whether it is still wanted.
        let step = poll_fn(|cx| {
            let unwanted = {
                let m = mux.borrow();
                m.abandoned && m.core.slots.is_empty()
            };
            if unwanted {
                return Poll::Ready(None);
            }
            io.poll_step(cx, &**mux).map(Some)
        })
        .await;
        match step {
            None => {
                mux.borrow_mut().core.conn.go_away(ErrorCode::NoError);
                break;
            }
            Some(Ok(Step::Read)) => {
                if let Err(e) = io.process(&**mux) {
                    tracing::debug!("upstream HTTP/2 connection failed: {e}");
                    break;
                }
            }
            Some(Ok(Step::Wrote)) => mux.borrow_mut().core.wake_writers(),
            Some(Ok(Step::Closed)) => break,
            Some(Err(e)) => {
                tracing::debug!("upstream HTTP/2 connection ended: {e}");
                break;
            }
        }
    }
    mux.borrow_mut().core.close();
    io.finish(&**mux, Duration::from_secs(1)).await;
}

/// One request's stream on an upstream connection. Dropping it resets a stream not yet done.
pub(crate) struct UpStream {
    mux: SharedUpMux,
    id: u32,
}

/// What a stream's end means for the request: refused (never processed) or reset.
fn gone(reset: Gone) -> HttpError {
    match reset {
        Some(true) => HttpError::UpstreamRefused,
        _ => HttpError::UpstreamReset,
    }
}

impl UpStream {
    /// The final response head.
    pub async fn response(&self) -> Result<ResponseIn, HttpError> {
        poll_fn(|cx| {
            let core = &mut self.mux.borrow_mut().core;
            let closed = core.closed;
            let Some(slot) = core.slot(self.id) else {
                return Poll::Ready(Err(HttpError::UpstreamReset));
            };
            if let Some(head) = slot.extra.take() {
                return Poll::Ready(Ok(head));
            }
            if slot.reset.is_some() || closed {
                return Poll::Ready(Err(gone(slot.reset)));
            }
            slot.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The next piece of the response body; its credit goes back with [`UpStream::release`].
    pub async fn data(&self) -> Incoming {
        poll_fn(|cx| self.mux.borrow_mut().core.poll_data(self.id, cx)).await
    }

    /// The response's trailers, once [`Incoming::End`] was read.
    pub fn take_trailers(&self) -> Option<Trailers> {
        self.mux.borrow_mut().core.slot(self.id)?.trailers.take()
    }

    /// `n` octets of the response were passed on: credit for more.
    pub fn release(&self, n: usize) {
        self.mux.borrow_mut().core.release(self.id, n);
    }

    /// Sends `data` as DATA as the server's windows open, each wait at most `limit`; `end` ends
    /// the request with the last octets.
    pub async fn send_data(&self, data: impl DataOut, end: bool, limit: Duration) -> Result<(), HttpError> {
        let sending = send_within(data, limit, |cx, rest| {
            self.mux.borrow_mut().core.poll_send(self.id, cx, rest, end)
        });
        match sending.await {
            Some(result) => result.map_err(gone),
            None => Err(HttpError::UpstreamWriteTimeout),
        }
    }

    /// Ends the request with trailers.
    pub fn send_trailers(&self, fill: impl FnOnce(&mut HeadWriter<'_>)) -> Result<(), HttpError> {
        match self.mux.borrow_mut().core.send_head(self.id, None, true, fill) {
            true => Ok(()),
            false => Err(HttpError::UpstreamReset),
        }
    }

    /// Ends the request with an empty DATA frame (END_STREAM), which needs no window.
    pub fn end_now(&self) -> Result<(), HttpError> {
        match self.mux.borrow_mut().core.end_now(self.id) {
            true => Ok(()),
            false => Err(HttpError::UpstreamReset),
        }
    }

    /// Resets the stream (CANCEL).
    pub fn cancel(&self) {
        self.mux.borrow_mut().core.reset_stream(self.id, ErrorCode::Cancel);
    }
}

impl Drop for UpStream {
    /// The request is done with the stream: one still open is reset (the response is not
    /// wanted), and what was never read gets its credit back.
    fn drop(&mut self) {
        let Ok(mut mux) = self.mux.try_borrow_mut() else {
            return;
        };
        let cancel = |can_send: bool, receiving: bool| (can_send || receiving).then_some(ErrorCode::Cancel);
        mux.core.close_stream(self.id, cancel);
        mux.core.wake_driver();
    }
}
