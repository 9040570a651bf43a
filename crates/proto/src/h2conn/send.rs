//! Writing: heads, DATA as the windows allow, resets, GOAWAY, and credit given back.

use super::{Connection, OpenError, Phase, RESETS_REMEMBERED};
use crate::h2frame::{
    write_data_header, write_goaway, write_headers, write_rst_stream, write_window_update, ErrorCode,
};
use crate::h2state::StreamState;
use crate::hpack::Encoder;

/// Fields going into a head being sent ([`Connection::send_head_with`]).
pub struct HeadWriter<'a> {
    encoder: &'a mut Encoder,
    block: &'a mut Vec<u8>,
}

impl HeadWriter<'_> {
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        self.encoder.field(name, value, self.block);
    }

    /// A field of the writer's own making, unchecked: see [`Encoder::fresh_value_field`].
    pub fn fresh_value_field(&mut self, name: &[u8], value: &[u8]) {
        self.encoder.fresh_value_field(name, value, self.block);
    }
}

impl Connection {
    /// Sends a head on `stream`: a response (`status`) or trailers (`None`), its fields as
    /// given (names lowercased here where they are not; the caller leaves out the fields HTTP/2
    /// forbids). `end_stream`: nothing follows. False when the stream is gone (reset or ended).
    pub fn send_headers<'f>(
        &mut self,
        stream: u32,
        status: Option<u16>,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> bool {
        self.send_head_with(stream, status, end_stream, |head| {
            for (name, value) in fields {
                head.field(name, value);
            }
        })
    }

    /// [`Self::send_headers`] with the fields given by `fill`, one [`HeadWriter::field`] call
    /// each, encoded as they come.
    pub fn send_head_with(
        &mut self,
        stream: u32,
        status: Option<u16>,
        end_stream: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> bool {
        if !self.can_send(stream) {
            return false;
        }
        self.write_head(stream, status, end_stream, fill);
        if end_stream {
            self.streams.send_end(stream);
        }
        true
    }

    /// Opens a stream with a request head (client side): `fill` gives its fields, the
    /// pseudo-header fields (`:method`, `:scheme`, `:authority`, `:path`) first. `end_stream`:
    /// no body follows; `head_request`: a HEAD, whose response has no DATA whatever its
    /// `content-length` says. Returns the stream's identifier.
    pub fn open_stream(
        &mut self,
        end_stream: bool,
        head_request: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) -> Result<u32, OpenError> {
        self.check_open()?;
        let id = self.streams.open_local(end_stream).ok_or(OpenError::Exhausted)?;
        if let Some(live) = self.streams.get_mut(id) {
            live.head_request = head_request;
        }
        self.write_head(id, None, end_stream, fill);
        Ok(id)
    }

    /// Whether a stream may be opened now (client side).
    pub fn can_open(&self) -> bool {
        self.check_open().is_ok()
    }

    fn check_open(&self) -> Result<(), OpenError> {
        if self.phase == Phase::Failed {
            return Err(OpenError::Failed);
        }
        if self.peer_goaway.is_some() || self.goaway.is_some() {
            return Err(OpenError::GoingAway);
        }
        if self.streams.last_peer() >= 0x7fff_fffd {
            return Err(OpenError::Exhausted);
        }
        if self
            .peer
            .max_concurrent_streams
            .is_some_and(|max| self.streams.open_count() >= max as usize)
        {
            return Err(OpenError::Full);
        }
        Ok(())
    }

    /// Encodes a head (`:status` first when given) and writes it as HEADERS and CONTINUATION.
    fn write_head(
        &mut self,
        stream: u32,
        status: Option<u16>,
        end_stream: bool,
        fill: impl FnOnce(&mut HeadWriter<'_>),
    ) {
        let mut block = std::mem::take(&mut self.encoded);
        block.clear();
        self.encoder.begin(&mut block);
        if let Some(status) = status {
            let digits = [
                b'0' + (status / 100 % 10) as u8,
                b'0' + (status / 10 % 10) as u8,
                b'0' + (status % 10) as u8,
            ];
            self.encoder.field(b":status", &digits, &mut block);
        }
        fill(&mut HeadWriter {
            encoder: &mut self.encoder,
            block: &mut block,
        });
        write_headers(
            &mut self.out,
            stream,
            &block,
            end_stream,
            self.peer.max_frame_size as usize,
        );
        self.encoded = block;
    }

    /// How many octets of DATA `stream` may take now (its window and the connection's, and the
    /// client's frame size).
    pub fn send_room(&self, stream: u32) -> usize {
        match self.streams.get(stream) {
            Some(live) if live.state != StreamState::HalfClosedLocal => {
                live.send
                    .available()
                    .min(self.send_window.available())
                    .min(self.peer.max_frame_size) as usize
            }
            _ => 0,
        }
    }

    /// Writes the header of one DATA frame on `stream` for up to `want` octets, as many as
    /// [`Self::send_room`] allows, and returns how many: the caller appends that many octets of
    /// data right after it (into [`Self::output`], or beside it in a vectored write). `end`:
    /// these are the body's last octets, so the frame that takes them all ends the stream; an
    /// empty body end is one empty DATA frame. `None` when the stream is gone.
    pub fn send_data_header(&mut self, stream: u32, want: usize, end: bool) -> Option<usize> {
        if !self.can_send(stream) {
            return None;
        }
        let n = want.min(self.send_room(stream));
        if n == 0 && want > 0 {
            return Some(0);
        }
        let end_stream = end && n == want;
        write_data_header(&mut self.out, stream, n, end_stream);
        self.send_window.consume(n as u32);
        if let Some(live) = self.streams.get_mut(stream) {
            live.send.consume(n as u32);
        }
        if end_stream {
            self.streams.send_end(stream);
        }
        Some(n)
    }

    /// [`Self::send_data_header`] with the data copied into the output after it.
    pub fn send_data(&mut self, stream: u32, data: &[u8], end: bool) -> Option<usize> {
        let n = self.send_data_header(stream, data.len(), end)?;
        self.out.extend_from_slice(&data[..n]);
        Some(n)
    }

    /// Resets `stream` (RST_STREAM with `code`); frames the client sent before it sees the
    /// reset are dropped.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        write_rst_stream(&mut self.out, stream, code);
        self.streams.send_reset(stream);
        if self.reset_here.len() >= RESETS_REMEMBERED {
            self.reset_here.remove(0);
        }
        self.reset_here.push(stream);
    }

    /// `n` octets of `stream`'s DATA were passed on (or dropped): their credit goes back to the
    /// connection's window and, while the client still sends on it, to the stream's, in batches
    /// (see [`crate::h2state::RecvWindow::release`]).
    pub fn release(&mut self, stream: u32, n: u32) {
        if n == 0 {
            return;
        }
        if let Some(increment) = self.recv_window.release(n) {
            write_window_update(&mut self.out, 0, increment);
        }
        if let Some(live) = self.streams.get_mut(stream) {
            if matches!(live.state, StreamState::Open | StreamState::HalfClosedLocal) {
                if let Some(increment) = live.recv.release(n) {
                    write_window_update(&mut self.out, stream, increment);
                }
            }
        }
    }

    /// Ends the connection gracefully: GOAWAY naming the last stream seen; those go on, later
    /// ones are not served (the client may send them again elsewhere).
    pub fn go_away(&mut self, code: ErrorCode) {
        if self.goaway.is_some() {
            return;
        }
        let last = self.last_peer_stream();
        write_goaway(&mut self.out, last, code, &[]);
        self.goaway = Some(last);
    }

    /// Whether `stream` is open for this side's frames.
    pub fn can_send(&self, stream: u32) -> bool {
        self.streams
            .state(stream)
            .is_some_and(|state| state != StreamState::HalfClosedLocal)
    }

    /// Whether the client still sends on `stream`.
    pub fn receiving(&self, stream: u32) -> bool {
        self.streams
            .state(stream)
            .is_some_and(|state| state != StreamState::HalfClosedRemote)
    }
}
