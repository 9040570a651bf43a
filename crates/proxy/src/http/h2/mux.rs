//! The state one HTTP/2 connection from a client shares with its streams: the shared core
//! ([`MuxCore`]: the sans-IO connection, each stream's slot), the streams opened since the
//! connection's task last looked, and the client's resets. Streams reach it through a
//! [`StreamIo`]; everything runs in the connection's one task, so a `RefCell` borrowed only
//! between awaits is all the sharing needs (no lock, no task per stream).

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use rampart_proto::h1::Field;
use rampart_proto::h2conn::{Connection, Event, HeadWriter};
use rampart_proto::h2frame::ErrorCode;

use super::core::{send_within, DataOut, MuxCore};
use super::io::Driven;
use crate::http::error::HttpError;

/// A stream's trailers: their octets and fields as ranges into them.
pub(crate) type Trailers = (Vec<u8>, Vec<Field>);

/// What a stream's reader gets next.
pub(crate) enum Incoming {
    Data(Bytes),
    /// The body ended (with trailers, if any: `take_trailers`).
    End,
    /// The stream was reset, or the connection is gone.
    Reset,
}

pub(crate) struct Mux {
    /// The connection and the streams' slots; a slot's reset flag says the client reset it.
    pub core: MuxCore<()>,
    /// Streams opened since the connection's task last looked (each id, and whether its HEADERS
    /// ended it): their heads are to be laid out.
    pub opened: Vec<(u32, bool)>,
    /// Streams the client reset while a request still used them, since the last look.
    pub peer_resets: u32,
}

pub(crate) type SharedMux = Rc<RefCell<Mux>>;

impl Mux {
    pub fn new(conn: Connection) -> SharedMux {
        Rc::new(RefCell::new(Mux {
            core: MuxCore::new(conn),
            opened: Vec::new(),
            peer_resets: 0,
        }))
    }
}

impl Driven for Mux {
    type Slot = ();

    fn core(&mut self) -> &mut MuxCore<()> {
        &mut self.core
    }

    fn on_event(&mut self, event: Event) -> bool {
        match event {
            Event::Request { stream, end_stream } => {
                let slot = self.core.slots.entry(stream).or_default();
                slot.ended = end_stream;
                self.opened.push((stream, end_stream));
                return true;
            }
            Event::Trailers { stream } => self.core.deliver_trailers(stream),
            Event::Reset { stream, by_peer, code } => {
                if self.core.reset_slot(stream, by_peer) && by_peer && code != ErrorCode::NoError as u32 {
                    self.peer_resets += 1;
                }
            }
            Event::WindowOpened => self.core.wake_writers(),
            Event::GoAway { .. } | Event::Data { .. } | Event::Response { .. } => {}
        }
        false
    }
}

/// One stream's way to its connection.
#[derive(Clone)]
pub(crate) struct StreamIo {
    pub mux: SharedMux,
    pub id: u32,
}

impl StreamIo {
    /// The next piece of the request body. Its flow-control credit goes back once it has been
    /// passed on: [`StreamIo::release`].
    pub async fn data(&self) -> Incoming {
        poll_fn(|cx| self.mux.borrow_mut().core.poll_data(self.id, cx)).await
    }

    /// The request's trailers, once [`Incoming::End`] was read.
    pub fn take_trailers(&self) -> Option<Trailers> {
        self.mux.borrow_mut().core.slot(self.id)?.trailers.take()
    }

    /// `n` octets of the request body were passed on: credit for more.
    pub fn release(&self, n: usize) {
        self.mux.borrow_mut().core.release(self.id, n);
    }

    /// The client reset the stream (so far as this side has read).
    pub fn reset_by_peer(&self) -> bool {
        let mut mux = self.mux.borrow_mut();
        mux.core.slot(self.id).is_some_and(|s| s.reset == Some(true))
    }

    /// Sends a head (a response, `status`, or trailers); `end`: nothing follows.
    pub fn send_head(
        &self,
        status: Option<u16>,
        end: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> Result<(), HttpError> {
        match self.mux.borrow_mut().core.send_head(self.id, status, end, fill) {
            true => Ok(()),
            false => Err(HttpError::ClientGone),
        }
    }

    /// Sends `data` as DATA as the client's windows open, each wait at most `limit` (a window
    /// that stays shut fails the stream); `end` ends the stream with the last octets.
    pub async fn send_data(
        &self,
        data: impl DataOut,
        end: bool,
        limit: Duration,
        sent: &mut u64,
    ) -> Result<(), HttpError> {
        let sending = send_within(data, limit, |cx, rest| {
            let before = rest.left();
            let polled = self.mux.borrow_mut().core.poll_send(self.id, cx, rest, end);
            *sent += (before - rest.left()) as u64;
            polled
        });
        match sending.await {
            Some(result) => result.map_err(|_| HttpError::ClientGone),
            None => {
                tracing::debug!("HTTP/2 stream stalled: the client's window stayed shut");
                Err(HttpError::ClientGone)
            }
        }
    }

    /// Ends the response with an empty DATA frame (END_STREAM).
    pub fn end_stream(&self) {
        self.mux.borrow_mut().core.end_now(self.id);
    }

    /// Resets the stream with `code`.
    pub fn reset(&self, code: ErrorCode) {
        self.mux.borrow_mut().core.reset_stream(self.id, code);
    }

    /// The request is done with the stream: what it never read gets its credit back, and a
    /// client still sending a body no one will read is told to stop (RST_STREAM NO_ERROR after
    /// a complete response, RFC 9113 section 8.1).
    pub fn close(&self) {
        let stop = |can_send: bool, receiving: bool| (receiving && !can_send).then_some(ErrorCode::NoError);
        self.mux.borrow_mut().core.close_stream(self.id, stop);
    }
}
