//! Reading: frames in, events out, answers to the control frames into the output.

use super::{Connection, ConnectionError, Continued, Event, Phase, Received, Role, EMPTY_FRAMES};
use crate::h2frame::{
    connection, decode, write_ping, write_settings, ErrorCode, Frame, FrameError, HEADER_LEN, PREFACE,
};
use crate::h2state::{Headers, StreamState};
use crate::hpack::HpackError;

/// The largest frame this side reads (its SETTINGS_MAX_FRAME_SIZE, the RFC's initial one).
const MAX_FRAME_SIZE: u32 = 16_384;

impl Connection {
    /// Reads whole frames from the start of `input` until one means something the caller must
    /// act on, or the frames run out. The caller drops the octets [`Received::used`] says were
    /// read (after taking an [`Event::Data`]'s octets out of them) and calls again with the rest
    /// and whatever arrived since. A connection error ends the connection (see
    /// [`ConnectionError`]).
    pub fn receive(&mut self, input: &[u8]) -> Result<Received, ConnectionError> {
        let mut used = 0;
        if self.phase == Phase::Failed {
            return Ok(Received {
                used: input.len(),
                event: None,
            });
        }
        if self.phase == Phase::Preface && self.role == Role::Server {
            let n = input.len().min(PREFACE.len());
            if input[..n] != PREFACE[..n] {
                return Err(self.fail(connection(ErrorCode::Protocol, "not the HTTP/2 connection preface")));
            }
            if n < PREFACE.len() {
                return Ok(Received { used: 0, event: None });
            }
            used = PREFACE.len();
            self.phase = Phase::FirstSettings;
        }
        while self.wants_input() {
            let rest = &input[used..];
            let (frame, n) = match decode(rest, MAX_FRAME_SIZE) {
                Ok(None) => break,
                Ok(Some(read)) => read,
                Err(e) => {
                    let Some(stream) = e.stream.filter(|_| self.continued.is_none()) else {
                        return Err(self.fail(e));
                    };
                    // A stream error in a frame whose length is sound: that frame is skipped and
                    // its stream reset, once the frame is all there.
                    let len = HEADER_LEN + ((rest[0] as usize) << 16 | (rest[1] as usize) << 8 | rest[2] as usize);
                    if rest.len() < len {
                        break;
                    }
                    used += len;
                    self.reset(stream, e.code);
                    let event = Event::Reset {
                        stream,
                        code: e.code as u32,
                        by_peer: false,
                    };
                    return Ok(Received {
                        used,
                        event: Some(event),
                    });
                }
            };
            let offset = used;
            used += n;
            let event = match self.on_frame(frame, input, offset) {
                Ok(event) => event,
                Err(e) => return Err(self.fail(e)),
            };
            if event.is_some() {
                return Ok(Received { used, event });
            }
        }
        Ok(Received { used, event: None })
    }

    fn on_frame(&mut self, frame: Frame<'_>, input: &[u8], offset: usize) -> Result<Option<Event>, FrameError> {
        if self.phase == Phase::FirstSettings && !matches!(frame, Frame::Settings { ack: false, .. }) {
            return Err(connection(ErrorCode::Protocol, "the first frame is not SETTINGS"));
        }
        if let Some(c) = self.continued {
            if !matches!(frame, Frame::Continuation { stream, .. } if stream == c.stream) {
                return Err(connection(ErrorCode::Protocol, "a field block interrupted"));
            }
        }
        let empty = match frame {
            Frame::Data { data, end_stream, .. } => data.is_empty() && !end_stream,
            Frame::Headers { block, end_stream, .. } => block.is_empty() && !end_stream,
            Frame::Continuation { block, .. } => block.is_empty(),
            _ => false,
        };
        self.empty_frames = if empty { self.empty_frames + 1 } else { 0 };
        if self.empty_frames > EMPTY_FRAMES {
            return Err(connection(ErrorCode::EnhanceYourCalm, "a flood of empty frames"));
        }
        match frame {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => {
                let at = data.as_ptr() as usize - input.as_ptr() as usize;
                debug_assert!(at >= offset);
                self.on_data(stream, end_stream, at, data.len(), flow_len)
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                self.block.clear();
                self.block.extend_from_slice(block);
                if !end_headers {
                    self.continued = Some(Continued {
                        stream,
                        end_stream,
                        frames: 0,
                    });
                    return Ok(None);
                }
                self.on_block(stream, end_stream)
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(mut c) = self.continued else {
                    return Err(connection(ErrorCode::Protocol, "CONTINUATION without HEADERS"));
                };
                c.frames += 1;
                // A block this long cannot decode to a list within the limit: a CONTINUATION
                // flood (the CVE-2024-27316 class) ends here instead of being buffered.
                let most = self.max_list as usize + 16_384;
                if self.block.len() + block.len() > most {
                    return Err(connection(ErrorCode::EnhanceYourCalm, "a field block past the limit"));
                }
                self.block.extend_from_slice(block);
                if !end_headers {
                    self.continued = Some(c);
                    return Ok(None);
                }
                self.continued = None;
                self.on_block(stream, c.end_stream)
            }
            Frame::Priority { .. } | Frame::Unknown { .. } => Ok(None),
            Frame::RstStream { stream, code } if self.role == Role::Client => {
                if stream > self.streams.last_peer() || stream % 2 == 0 {
                    return Err(connection(ErrorCode::Protocol, "RST_STREAM on an idle stream"));
                }
                self.streams.forget(stream);
                Ok(Some(Event::Reset {
                    stream,
                    code,
                    by_peer: true,
                }))
            }
            Frame::RstStream { stream, code } => {
                self.streams.recv_reset(stream)?;
                Ok(Some(Event::Reset {
                    stream,
                    code,
                    by_peer: true,
                }))
            }
            Frame::Settings { ack: true, .. } => {
                if !self.acknowledged {
                    self.acknowledged = true;
                    let (send, recv) = (self.peer.initial_window_size, self.stream_window);
                    self.streams.set_initial_windows(send, recv, recv);
                }
                Ok(None)
            }
            Frame::Settings { ack: false, params } => self.on_settings(params),
            // A client never pushes, and this side's SETTINGS refused push from a server.
            Frame::PushPromise { .. } => Err(connection(ErrorCode::Protocol, "PUSH_PROMISE")),
            Frame::Ping { ack, data } => {
                if !ack {
                    write_ping(&mut self.out, true, data);
                }
                Ok(None)
            }
            Frame::GoAway { last_stream, code, .. } => {
                self.peer_goaway = Some(last_stream);
                Ok(Some(Event::GoAway { last_stream, code }))
            }
            Frame::WindowUpdate { stream: 0, increment } => {
                self.send_window
                    .increase(increment)
                    .map_err(|code| connection(code, "connection window past 2^31-1"))?;
                Ok(Some(Event::WindowOpened))
            }
            Frame::WindowUpdate { stream, increment } => {
                let Some(live) = self.streams.get_mut(stream) else {
                    if stream > self.streams.last_peer() {
                        return Err(connection(ErrorCode::Protocol, "WINDOW_UPDATE on an idle stream"));
                    }
                    return Ok(None);
                };
                if live.send.increase(increment).is_err() {
                    return Ok(Some(self.reset_event(stream, ErrorCode::FlowControl)));
                }
                Ok(Some(Event::WindowOpened))
            }
        }
    }

    fn on_data(
        &mut self,
        stream: u32,
        end_stream: bool,
        at: usize,
        len: usize,
        flow_len: u32,
    ) -> Result<Option<Event>, FrameError> {
        self.recv_window
            .receive(flow_len)
            .map_err(|code| connection(code, "DATA past the connection window"))?;
        let ignored = self.reset_here.contains(&stream) || self.not_served(stream);
        if ignored && self.streams.get(stream).is_none() {
            self.give_back(flow_len);
            return Ok(None);
        }
        if let Some(live) = self.streams.get_mut(stream) {
            if live.recv.receive(flow_len).is_err() {
                self.give_back(flow_len);
                return Ok(Some(self.reset_event(stream, ErrorCode::FlowControl)));
            }
            if self.role == Role::Client && !live.answered {
                self.give_back(flow_len);
                return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
            }
            if let Some(left) = &mut live.body_left {
                let wrong = (len as u64) > *left || (end_stream && *left != len as u64);
                *left = left.saturating_sub(len as u64);
                if wrong {
                    self.give_back(flow_len);
                    return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
                }
            }
        }
        if let Err(e) = self.streams.recv_data(stream, end_stream) {
            let Some(stream) = e.stream else {
                return Err(e);
            };
            self.give_back(flow_len);
            return Ok(Some(self.reset_event(stream, e.code)));
        }
        // Padding is passed on to no one: its credit goes back at once.
        let padding = flow_len - len as u32;
        if padding > 0 {
            self.release(stream, padding);
        }
        if len == 0 && !end_stream {
            return Ok(None);
        }
        Ok(Some(Event::Data {
            stream,
            at,
            len,
            end_stream,
        }))
    }

    /// A whole field block on `stream`: decoded (always: the table must stay in step with the
    /// client's), then a request, trailers, or nothing for a stream not served.
    fn on_block(&mut self, stream: u32, end_stream: bool) -> Result<Option<Event>, FrameError> {
        self.decoded.clear();
        self.fields.clear();
        let fields = &mut self.fields;
        let decoded = self.decoder.decode(&self.block, &mut self.decoded, |f| fields.push(f));
        let too_large = match decoded {
            Ok(()) => false,
            Err(HpackError::ListTooLarge) => true,
            Err(_) => return Err(connection(ErrorCode::Compression, "a field block that does not decode")),
        };
        if self.reset_here.contains(&stream) || self.not_served(stream) {
            return Ok(None);
        }
        if self.role == Role::Client {
            return self.on_response_block(stream, end_stream, too_large);
        }
        match self.streams.recv_headers(stream, end_stream) {
            Ok(Headers::Opened) if too_large => {
                // Answered here, 431 as RFC 6585 says, and never seen by the caller.
                self.send_headers(stream, Some(431), std::iter::empty(), true);
                if !end_stream {
                    self.reset(stream, ErrorCode::NoError);
                }
                Ok(None)
            }
            Ok(Headers::Opened) => {
                // The body must be as long as `content-length` says (RFC 9113 8.1.1): kept to
                // check the DATA against. A value that is not a number is the request path's
                // to refuse.
                let length = self
                    .fields
                    .iter()
                    .find(|f| f.name(&self.decoded) == b"content-length")
                    .and_then(|f| std::str::from_utf8(f.value(&self.decoded)).ok()?.parse::<u64>().ok());
                if end_stream && length.is_some_and(|n| n > 0) {
                    return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
                }
                if let Some(live) = self.streams.get_mut(stream) {
                    live.body_left = length;
                }
                Ok(Some(Event::Request { stream, end_stream }))
            }
            Ok(Headers::Trailers) => {
                if too_large || !self.section_is_clean(0) {
                    return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
                }
                Ok(Some(Event::Trailers { stream }))
            }
            Err(FrameError {
                stream: Some(stream),
                code,
                ..
            }) => Ok(Some(self.reset_event(stream, code))),
            Err(e) => Err(e),
        }
    }

    /// A field block from the server on a stream this side opened: a response head (interim
    /// ones first, if any), or trailers.
    fn on_response_block(
        &mut self,
        stream: u32,
        end_stream: bool,
        too_large: bool,
    ) -> Result<Option<Event>, FrameError> {
        if stream % 2 == 0 {
            return Err(connection(ErrorCode::Protocol, "HEADERS on a stream the server opened"));
        }
        let Some(live) = self.streams.get(stream) else {
            if stream > self.streams.last_peer() {
                return Err(connection(ErrorCode::Protocol, "HEADERS on an idle stream"));
            }
            return Err(connection(ErrorCode::StreamClosed, "HEADERS on a closed stream"));
        };
        if live.state == StreamState::HalfClosedRemote {
            return Ok(Some(self.reset_event(stream, ErrorCode::StreamClosed)));
        }
        if too_large {
            return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
        }
        let (answered, head_request) = (live.answered, live.head_request);
        let decoded = &self.decoded;
        if answered {
            if !end_stream || !self.section_is_clean(0) {
                return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
            }
            self.streams.recv_end(stream);
            return Ok(Some(Event::Trailers { stream }));
        }
        let status = match self.fields.first() {
            Some(f) if f.name(decoded) == b":status" => f.value(decoded),
            _ => b"".as_slice(),
        };
        let status = match status {
            [a @ b'1'..=b'9', b, c] if b.is_ascii_digit() && c.is_ascii_digit() => {
                u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
            }
            _ => 0,
        };
        // One :status, first; a 101 has no place in HTTP/2 (RFC 9113 8.6).
        if status == 0 || status == 101 || !self.section_is_clean(1) || (status < 200 && end_stream) {
            return Ok(Some(self.reset_event(stream, ErrorCode::Protocol)));
        }
        if status >= 200 {
            let length = match (head_request, status) {
                (true, _) | (_, 204 | 304) => None,
                _ => self
                    .fields
                    .iter()
                    .find(|f| f.name(decoded) == b"content-length")
                    .and_then(|f| std::str::from_utf8(f.value(decoded)).ok()?.parse::<u64>().ok()),
            };
            if let Some(live) = self.streams.get_mut(stream) {
                live.answered = true;
                live.body_left = length;
            }
            if end_stream {
                self.streams.recv_end(stream);
            }
        }
        Ok(Some(Event::Response { stream, end_stream }))
    }

    /// Whether the decoded section's fields from `from` on are ones HTTP/2 allows (RFC 9113
    /// 8.2.1): no pseudo-header field, names lowercase tokens, values without CR, LF or NUL. A
    /// response head or trailers that break this is malformed: it would otherwise reach an
    /// HTTP/1.1 peer as split lines. (Request heads are checked where they are laid out.)
    fn section_is_clean(&self, from: usize) -> bool {
        let decoded = &self.decoded;
        self.fields.iter().skip(from).all(|f| {
            let (name, value) = (f.name(decoded), f.value(decoded));
            crate::h2map::is_token_lower(name) && crate::h2map::is_clean_value(value)
        })
    }

    /// A stream past the GOAWAY this server sent: never served.
    fn not_served(&self, stream: u32) -> bool {
        self.role == Role::Server && self.goaway.is_some_and(|last| stream > last)
    }

    fn on_settings(&mut self, params: &[u8]) -> Result<Option<Event>, FrameError> {
        let before = self.peer;
        self.peer.apply(params)?;
        self.phase = Phase::Open;
        if self.peer.header_table_size != before.header_table_size {
            // This side's table is kept to 4 KiB whatever the client allows.
            self.encoder
                .set_max_size(self.peer.header_table_size.min(4096) as usize);
        }
        write_settings(&mut self.out, true, &[]);
        if self.peer.initial_window_size != before.initial_window_size {
            self.streams
                .adjust_send_windows(self.peer.initial_window_size)
                .map_err(|code| connection(code, "a stream window past 2^31-1"))?;
            return Ok(Some(Event::WindowOpened));
        }
        Ok(None)
    }

    /// Resets `stream` for a stream error of this side's and says so.
    fn reset_event(&mut self, stream: u32, code: ErrorCode) -> Event {
        self.reset(stream, code);
        Event::Reset {
            stream,
            code: code as u32,
            by_peer: false,
        }
    }

    /// Connection credit back for octets no stream will pass on.
    fn give_back(&mut self, n: u32) {
        if let Some(increment) = self.recv_window.release(n) {
            crate::h2frame::write_window_update(&mut self.out, 0, increment);
        }
    }
}
