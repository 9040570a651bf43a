//! The server side's streams (RFC 9113 section 5.1): which exist and in what state, the order of
//! their identifiers, the limit on how many may be open, and a budget for the peer's resets
//! (the rapid reset attack, CVE-2023-44487: streams opened and reset at once, so the limit on open
//! streams never bites while each costs the server work).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::window::{RecvWindow, SendWindow};
use crate::h2frame::{connection, stream_error, ErrorCode, FrameError};

/// Where a stream stands (one not in the table is idle when its identifier is past the last
/// one seen, closed otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    Open,
    /// The peer ended its side (END_STREAM came); this side still sends.
    HalfClosedRemote,
    /// This side ended its side; the peer still sends.
    HalfClosedLocal,
}

/// What a HEADERS frame from the peer was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    /// A new stream: a request.
    Opened,
    /// A stream's trailers.
    Trailers,
}

/// The resets a peer may make in a row (halved every [`DECAY`] streams opened) before the
/// connection ends with ENHANCE_YOUR_CALM.
pub const RESET_BUDGET: u32 = 200;
const DECAY: u32 = 256;

/// Hashes a stream identifier (a small rising number: one multiplication spreads it; SipHash
/// would cost more than the lookup it serves, per frame).
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A stream that is not closed: its state and its two flow-control windows.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    pub id: u32,
    pub state: StreamState,
    pub send: SendWindow,
    pub recv: RecvWindow,
    /// The DATA octets the message's `content-length` still expects, when it has one.
    pub body_left: Option<u64>,
    /// A stream this side opened: its final response head has come (later HEADERS are
    /// trailers).
    pub answered: bool,
    /// A stream this side opened for a HEAD request: its response's `content-length` says
    /// nothing of DATA.
    pub head_request: bool,
}

/// The server side's streams of one connection.
#[derive(Debug)]
pub struct Streams {
    /// The streams that are not closed (few: at most the concurrent limit).
    live: HashMap<u32, Live, BuildHasherDefault<IdHasher>>,
    /// The windows a new stream starts with: the peer's SETTINGS_INITIAL_WINDOW_SIZE (send) and
    /// this side's (receive).
    send_initial: u32,
    recv_initial: u32,
    /// What the peer may send on a new stream before it has read this side's settings.
    recv_allowed: u32,
    /// The highest identifier used: the peer's streams on a server, this side's on a client.
    last_peer: u32,
    max_concurrent: u32,
    /// Streams opened, and the peer's resets counted against the budget.
    opened: u32,
    resets: u32,
}

impl Streams {
    /// A connection that lets the peer open `max_concurrent` streams at once (this side's
    /// SETTINGS_MAX_CONCURRENT_STREAMS).
    pub fn new(max_concurrent: u32) -> Self {
        Streams {
            live: HashMap::default(),
            send_initial: 65_535,
            recv_initial: 65_535,
            recv_allowed: 65_535,
            last_peer: 0,
            max_concurrent,
            opened: 0,
            resets: 0,
        }
    }

    /// The windows new streams start with: the peer's initial window for sending, this side's
    /// for receiving, and what the peer may send before it has read this side's settings.
    pub fn set_initial_windows(&mut self, send: u32, recv: u32, recv_allowed: u32) {
        self.send_initial = send;
        self.recv_initial = recv;
        self.recv_allowed = recv_allowed;
    }

    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE changed: every stream's send window moves by the
    /// difference (RFC 9113 6.9.2).
    pub fn adjust_send_windows(&mut self, new: u32) -> Result<(), ErrorCode> {
        let old = std::mem::replace(&mut self.send_initial, new);
        for s in self.live.values_mut() {
            s.send.adjust(old, new)?;
        }
        Ok(())
    }

    pub fn state(&self, id: u32) -> Option<StreamState> {
        self.get(id).map(|s| s.state)
    }

    pub fn get(&self, id: u32) -> Option<&Live> {
        self.live.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Live> {
        self.live.get_mut(&id)
    }

    /// Every stream that is not closed.
    pub fn iter(&self) -> impl Iterator<Item = &Live> {
        self.live.values()
    }

    /// How many streams are open (or half closed).
    pub fn open_count(&self) -> usize {
        self.live.len()
    }

    /// The highest stream identifier the peer has used (what GOAWAY names).
    pub fn last_peer(&self) -> u32 {
        self.last_peer
    }

    /// A complete HEADERS block from the peer on stream `id`: a new stream (a request), or a
    /// stream's trailers. Identifiers must be odd and rising; a new stream past the limit is
    /// refused (REFUSED_STREAM: the client may send it again); trailers must end the stream.
    pub fn recv_headers(&mut self, id: u32, end_stream: bool) -> Result<Headers, FrameError> {
        if id % 2 == 0 {
            return Err(connection(
                ErrorCode::Protocol,
                "a client stream with an even identifier",
            ));
        }
        if id > self.last_peer {
            self.last_peer = id;
            if self.live.len() >= self.max_concurrent as usize {
                return Err(stream_error(
                    id,
                    ErrorCode::RefusedStream,
                    "past SETTINGS_MAX_CONCURRENT_STREAMS",
                ));
            }
            self.opened = self.opened.wrapping_add(1);
            if self.opened % DECAY == 0 {
                self.resets /= 2;
            }
            let state = if end_stream {
                StreamState::HalfClosedRemote
            } else {
                StreamState::Open
            };
            self.live.insert(
                id,
                Live {
                    id,
                    state,
                    send: SendWindow::new(self.send_initial),
                    recv: RecvWindow::with_allowance(self.recv_initial, self.recv_allowed),
                    body_left: None,
                    answered: false,
                    head_request: false,
                },
            );
            return Ok(Headers::Opened);
        }
        match self.state(id) {
            Some(StreamState::Open) if end_stream => {
                self.set(id, StreamState::HalfClosedRemote);
                Ok(Headers::Trailers)
            }
            Some(StreamState::HalfClosedLocal) if end_stream => {
                self.remove(id);
                Ok(Headers::Trailers)
            }
            Some(StreamState::Open | StreamState::HalfClosedLocal) => {
                Err(stream_error(id, ErrorCode::Protocol, "trailers without END_STREAM"))
            }
            Some(StreamState::HalfClosedRemote) => Err(stream_error(
                id,
                ErrorCode::StreamClosed,
                "HEADERS after the peer ended the stream",
            )),
            None => Err(connection(ErrorCode::StreamClosed, "HEADERS on a closed stream")),
        }
    }

    /// A DATA frame from the peer on stream `id`.
    pub fn recv_data(&mut self, id: u32, end_stream: bool) -> Result<(), FrameError> {
        match self.state(id) {
            Some(StreamState::Open) => {
                if end_stream {
                    self.set(id, StreamState::HalfClosedRemote);
                }
                Ok(())
            }
            Some(StreamState::HalfClosedLocal) => {
                if end_stream {
                    self.remove(id);
                }
                Ok(())
            }
            Some(StreamState::HalfClosedRemote) => Err(stream_error(
                id,
                ErrorCode::StreamClosed,
                "DATA after the peer ended the stream",
            )),
            None if id > self.last_peer => Err(connection(ErrorCode::Protocol, "DATA on an idle stream")),
            None => Err(stream_error(id, ErrorCode::StreamClosed, "DATA on a closed stream")),
        }
    }

    /// RST_STREAM from the peer on stream `id`: the stream closes. A reset of a stream this side
    /// was still answering counts against the budget; past it, ENHANCE_YOUR_CALM ends the
    /// connection.
    pub fn recv_reset(&mut self, id: u32) -> Result<(), FrameError> {
        if id > self.last_peer {
            return Err(connection(ErrorCode::Protocol, "RST_STREAM on an idle stream"));
        }
        if self
            .remove(id)
            .is_some_and(|state| state != StreamState::HalfClosedLocal)
        {
            self.resets += 1;
            if self.resets > RESET_BUDGET {
                return Err(connection(
                    ErrorCode::EnhanceYourCalm,
                    "too many streams reset by the peer",
                ));
            }
        }
        Ok(())
    }

    /// Opens a stream of this side's (a client's: odd identifiers from 1, rising), its HEADERS
    /// ending it already when `end_stream`; `None` once identifiers run out (2^31 - 1).
    pub fn open_local(&mut self, end_stream: bool) -> Option<u32> {
        let id = if self.last_peer == 0 {
            1
        } else {
            self.last_peer.checked_add(2)?
        };
        if id > 0x7fff_ffff {
            return None;
        }
        self.last_peer = id;
        self.live.insert(
            id,
            Live {
                id,
                state: if end_stream {
                    StreamState::HalfClosedLocal
                } else {
                    StreamState::Open
                },
                send: SendWindow::new(self.send_initial),
                recv: RecvWindow::with_allowance(self.recv_initial, self.recv_allowed),
                body_left: None,
                answered: false,
                head_request: false,
            },
        );
        Some(id)
    }

    /// The peer ended its half of stream `id` (END_STREAM on HEADERS).
    pub fn recv_end(&mut self, id: u32) {
        match self.state(id) {
            Some(StreamState::Open) => self.set(id, StreamState::HalfClosedRemote),
            Some(_) => {
                self.remove(id);
            }
            None => {}
        }
    }

    /// The peer reset stream `id` of this side's (no budget: a server resets as it pleases).
    pub fn forget(&mut self, id: u32) {
        self.remove(id);
    }

    /// This side ended its half of stream `id` (its last frame had END_STREAM).
    pub fn send_end(&mut self, id: u32) {
        match self.state(id) {
            Some(StreamState::Open) => self.set(id, StreamState::HalfClosedLocal),
            Some(_) => {
                self.remove(id);
            }
            None => {}
        }
    }

    /// This side reset stream `id`.
    pub fn send_reset(&mut self, id: u32) {
        self.remove(id);
    }

    fn set(&mut self, id: u32, state: StreamState) {
        if let Some(entry) = self.get_mut(id) {
            entry.state = state;
        }
    }

    fn remove(&mut self, id: u32) -> Option<StreamState> {
        self.live.remove(&id).map(|s| s.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<impl Sized, FrameError>) -> Option<(ErrorCode, Option<u32>)> {
        r.err().map(|e| (e.code, e.stream))
    }

    #[test]
    fn a_request_and_its_answer_walk_the_states() {
        let mut s = Streams::new(100);
        assert_eq!(s.recv_headers(1, false), Ok(Headers::Opened));
        assert_eq!(s.state(1), Some(StreamState::Open));
        s.recv_data(1, false).unwrap();
        s.recv_data(1, true).unwrap();
        assert_eq!(s.state(1), Some(StreamState::HalfClosedRemote));
        assert_eq!(code(s.recv_data(1, false)), Some((ErrorCode::StreamClosed, Some(1))));
        s.send_end(1);
        assert_eq!((s.state(1), s.open_count()), (None, 0));
        // Trailers: a second HEADERS that ends the stream.
        assert_eq!(s.recv_headers(3, false), Ok(Headers::Opened));
        assert_eq!(code(s.recv_headers(3, false)), Some((ErrorCode::Protocol, Some(3))));
        assert_eq!(s.recv_headers(3, true), Ok(Headers::Trailers));
        assert_eq!(s.last_peer(), 3);
    }

    #[test]
    fn identifiers_rise_and_the_limit_refuses_streams() {
        let mut s = Streams::new(2);
        assert_eq!(code(s.recv_headers(2, false)), Some((ErrorCode::Protocol, None)));
        s.recv_headers(5, false).unwrap();
        // A lower identifier than one used is a closed stream.
        assert_eq!(code(s.recv_headers(3, false)), Some((ErrorCode::StreamClosed, None)));
        assert_eq!(code(s.recv_data(7, false)), Some((ErrorCode::Protocol, None)));
        s.recv_headers(7, false).unwrap();
        assert_eq!(
            code(s.recv_headers(9, false)),
            Some((ErrorCode::RefusedStream, Some(9)))
        );
        s.send_reset(5);
        assert_eq!(s.recv_headers(11, false), Ok(Headers::Opened));
    }

    /// CVE-2023-44487: streams opened and reset at once never reach the concurrent limit, but
    /// the resets run out the budget and the connection ends.
    #[test]
    fn rapid_resets_end_the_connection() {
        let mut s = Streams::new(100);
        let mut id = 1;
        let outcome = loop {
            s.recv_headers(id, true).unwrap();
            if let Err(e) = s.recv_reset(id) {
                break e;
            }
            id += 2;
            assert!(id < 10_000, "never stopped");
        };
        assert_eq!((outcome.code, outcome.stream), (ErrorCode::EnhanceYourCalm, None));
        // The stream that went past the budget is the budget's plus one.
        assert_eq!(id.div_ceil(2), RESET_BUDGET + 1);
        // Resets now and then, among many answered streams, never use the budget up.
        let mut s = Streams::new(100);
        for n in 0..20_000u32 {
            let id = 2 * n + 1;
            s.recv_headers(id, true).unwrap();
            if n % 10 == 0 {
                s.recv_reset(id).unwrap();
            } else {
                s.send_end(id);
            }
        }
    }
}
