//! HTTP/2 frames (RFC 9113 section 6), sans-IO: [`decode`] reads one frame from the start of a
//! buffer and checks what the frame alone decides (its length, its stream, its padding, its
//! fields), answering a bad one with the error the RFC names, a connection's or a stream's;
//! the writers append frames to a buffer. Payloads are borrowed from the buffer: a DATA frame's
//! data is handed on as it lies there. What needs a connection's state (stream states, flow
//! control, the order of HEADERS and CONTINUATION) is the mux's.
//!
//! The second part of issue 38's own HTTP/2, beside [`crate::hpack`]; not used by the proxy yet.

mod settings;

pub use settings::{Setting, Settings};

/// The length of a frame header.
pub const HEADER_LEN: usize = 9;
/// The connection preface a client sends first (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    Connect = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}

/// Why a frame was refused: an error of the whole connection (answered with GOAWAY) or of one
/// stream (RST_STREAM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{what} ({code:?}, {})", if self.stream.is_some() { "stream error" } else { "connection error" })]
pub struct FrameError {
    pub code: ErrorCode,
    /// The stream, for a stream error; `None` for a connection error.
    pub stream: Option<u32>,
    pub what: &'static str,
}

pub(crate) fn connection(code: ErrorCode, what: &'static str) -> FrameError {
    FrameError {
        code,
        stream: None,
        what,
    }
}

pub(crate) fn stream_error(stream: u32, code: ErrorCode, what: &'static str) -> FrameError {
    FrameError {
        code,
        stream: Some(stream),
        what,
    }
}

/// A stream's priority as a HEADERS or PRIORITY frame gives it (read, and otherwise ignored, as
/// RFC 9113 section 5.3.2 allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub exclusive: bool,
    pub depends_on: u32,
    pub weight: u8,
}

/// One frame, its payload borrowed from the buffer it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `flow_len`: the whole payload's length, padding included, which flow control counts.
    Data {
        stream: u32,
        end_stream: bool,
        data: &'a [u8],
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        block: &'a [u8],
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: u32,
    },
    /// `params`: six octets a setting (see [`Settings::apply`]); empty for an acknowledgement.
    Settings {
        ack: bool,
        params: &'a [u8],
    },
    PushPromise {
        stream: u32,
        promised: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: u32,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    /// A frame of a type this side does not know: ignored (RFC 9113 section 4.1).
    Unknown {
        kind: u8,
        stream: u32,
    },
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The payload less its padding (a PADDED frame's first octet says how long the padding is).
fn unpad(flags: u8, payload: &[u8], headers: bool) -> Result<&[u8], FrameError> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let Some((&pad, rest)) = payload.split_first() else {
        return Err(connection(ErrorCode::FrameSize, "PADDED frame without a pad length"));
    };
    let pad = usize::from(pad);
    if pad > rest.len() {
        let what = if headers { "HEADERS padding" } else { "DATA padding" };
        return Err(connection(ErrorCode::Protocol, what));
    }
    Ok(&rest[..rest.len() - pad])
}

fn priority_of(stream: u32, b: &[u8]) -> Result<Priority, FrameError> {
    let word = u32_at(b);
    let depends_on = word & 0x7fff_ffff;
    if depends_on == stream {
        return Err(stream_error(stream, ErrorCode::Protocol, "a stream depends on itself"));
    }
    Ok(Priority {
        exclusive: word & 0x8000_0000 != 0,
        depends_on,
        weight: b[4],
    })
}

/// Reads one frame from the start of `buf`: `Ok(None)` until the whole frame is there, else the
/// frame and the octets it took. A frame longer than `max_frame_size` (this side's
/// SETTINGS_MAX_FRAME_SIZE) is refused before its payload is waited for.
pub fn decode(buf: &[u8], max_frame_size: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(head) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = (u32::from(head[0]) << 16) | (u32::from(head[1]) << 8) | u32::from(head[2]);
    let (kind, flags) = (head[3], head[4]);
    let stream = u32_at(&head[5..9]) & 0x7fff_ffff;
    if len > max_frame_size {
        return Err(connection(
            ErrorCode::FrameSize,
            "frame longer than SETTINGS_MAX_FRAME_SIZE",
        ));
    }
    let total = HEADER_LEN + len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    let on_stream = |what| match stream {
        0 => Err(connection(ErrorCode::Protocol, what)),
        s => Ok(s),
    };
    let on_connection = |what| match stream {
        0 => Ok(()),
        _ => Err(connection(ErrorCode::Protocol, what)),
    };
    let frame = match kind {
        kind::DATA => Frame::Data {
            stream: on_stream("DATA on stream 0")?,
            end_stream: flags & flag::END_STREAM != 0,
            data: unpad(flags, payload, false)?,
            flow_len: len,
        },
        kind::HEADERS => {
            let stream = on_stream("HEADERS on stream 0")?;
            let mut block = unpad(flags, payload, true)?;
            let mut priority = None;
            if flags & flag::PRIORITY != 0 {
                if block.len() < 5 {
                    return Err(connection(ErrorCode::FrameSize, "HEADERS too short for its priority"));
                }
                priority = Some(priority_of(stream, block)?);
                block = &block[5..];
            }
            Frame::Headers {
                stream,
                end_stream: flags & flag::END_STREAM != 0,
                end_headers: flags & flag::END_HEADERS != 0,
                priority,
                block,
            }
        }
        kind::PRIORITY => {
            let stream = on_stream("PRIORITY on stream 0")?;
            if len != 5 {
                return Err(stream_error(stream, ErrorCode::FrameSize, "PRIORITY not 5 octets"));
            }
            Frame::Priority {
                stream,
                priority: priority_of(stream, payload)?,
            }
        }
        kind::RST_STREAM => {
            let stream = on_stream("RST_STREAM on stream 0")?;
            if len != 4 {
                return Err(connection(ErrorCode::FrameSize, "RST_STREAM not 4 octets"));
            }
            Frame::RstStream {
                stream,
                code: u32_at(payload),
            }
        }
        kind::SETTINGS => {
            on_connection("SETTINGS on a stream")?;
            let ack = flags & flag::ACK != 0;
            if (ack && len != 0) || len % 6 != 0 {
                return Err(connection(ErrorCode::FrameSize, "SETTINGS of a bad length"));
            }
            Frame::Settings { ack, params: payload }
        }
        kind::PUSH_PROMISE => {
            let stream = on_stream("PUSH_PROMISE on stream 0")?;
            let block = unpad(flags, payload, true)?;
            if block.len() < 4 {
                return Err(connection(ErrorCode::FrameSize, "PUSH_PROMISE too short"));
            }
            Frame::PushPromise {
                stream,
                promised: u32_at(block) & 0x7fff_ffff,
                end_headers: flags & flag::END_HEADERS != 0,
                block: &block[4..],
            }
        }
        kind::PING => {
            on_connection("PING on a stream")?;
            let data: [u8; 8] = payload
                .try_into()
                .map_err(|_| connection(ErrorCode::FrameSize, "PING not 8 octets"))?;
            Frame::Ping {
                ack: flags & flag::ACK != 0,
                data,
            }
        }
        kind::GOAWAY => {
            on_connection("GOAWAY on a stream")?;
            if len < 8 {
                return Err(connection(ErrorCode::FrameSize, "GOAWAY too short"));
            }
            Frame::GoAway {
                last_stream: u32_at(payload) & 0x7fff_ffff,
                code: u32_at(&payload[4..]),
                debug: &payload[8..],
            }
        }
        kind::WINDOW_UPDATE => {
            if len != 4 {
                return Err(connection(ErrorCode::FrameSize, "WINDOW_UPDATE not 4 octets"));
            }
            let increment = u32_at(payload) & 0x7fff_ffff;
            if increment == 0 {
                let what = "WINDOW_UPDATE of 0";
                return Err(match stream {
                    0 => connection(ErrorCode::Protocol, what),
                    s => stream_error(s, ErrorCode::Protocol, what),
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        kind::CONTINUATION => Frame::Continuation {
            stream: on_stream("CONTINUATION on stream 0")?,
            end_headers: flags & flag::END_HEADERS != 0,
            block: payload,
        },
        kind => Frame::Unknown { kind, stream },
    };
    Ok(Some((frame, total)))
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Appends a field block as HEADERS (with `end_stream`) and as many CONTINUATION frames as
/// `max_frame_size` (the peer's) makes it need.
pub fn write_headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame_size: usize) {
    let max = max_frame_size.max(1);
    let mut chunks = block.chunks(max);
    let first = chunks.next().unwrap_or_default();
    let rest = block.len().saturating_sub(first.len());
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest == 0 {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut left = rest;
    for chunk in chunks {
        left -= chunk.len();
        let flags = if left == 0 { flag::END_HEADERS } else { 0 };
        write_header(out, chunk.len(), kind::CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

/// Appends the header of a DATA frame of `len` octets (its data follows it, written by the
/// caller: with a vectored write, without a copy).
pub fn write_data_header(out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) {
    write_header(
        out,
        len,
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
    );
}

pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn write_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    write_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    write_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}

/// Appends SETTINGS with `params`, or its acknowledgement (`params` empty and `ack`).
pub fn write_settings(out: &mut Vec<u8>, ack: bool, params: &[(Setting, u32)]) {
    write_header(
        out,
        params.len() * 6,
        kind::SETTINGS,
        if ack { flag::ACK } else { 0 },
        0,
    );
    for &(id, value) in params {
        out.extend_from_slice(&(id as u16).to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

#[cfg(test)]
mod tests;
