//! The chunked transfer coding, walked without copying: the decoder says how many input bytes
//! belong to the body so far, and when the body (trailers included) has ended. And the other
//! way: a chunk's size line, a chunk.

use super::H1Error;

/// Longest chunk-size line accepted (size, extensions, CRLF).
const MAX_SIZE_LINE: usize = 1024;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size {
        digits: u8,
        value: u64,
    },
    /// After the size: extensions until CR.
    Extension {
        value: u64,
        quoted: bool,
        escaped: bool,
    },
    /// Saw CR ending the size line.
    SizeLf {
        value: u64,
    },
    /// Inside chunk data.
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine {
        at_start: bool,
        saw_colon: bool,
    },
    TrailerLf {
        empty: bool,
    },
    Done,
}

/// Progress through a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedProgress {
    /// The body goes on; feed more bytes.
    NeedMore,
    /// The body (and its trailers) ended within the bytes consumed.
    Done,
}

/// What [`ChunkedDecoder::decode`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedPart<'a> {
    /// Body data.
    Data(&'a [u8]),
    /// Bytes of the trailer section.
    Trailer(&'a [u8]),
}

/// A chunked-body walker. Feed it the body bytes as they arrive.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    line_len: usize,
    trailer_len: usize,
    declared: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0, value: 0 },
            line_len: 0,
            trailer_len: 0,
            declared: 0,
        }
    }

    /// The sum of the chunk sizes seen so far (the body's data bytes, framing excluded), counted
    /// as soon as a size line ends, before its data arrives.
    pub fn declared_size(&self) -> u64 {
        self.declared
    }

    /// Whether the whole body has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Walks `input`; returns how many of its bytes belong to the body (all of them unless the
    /// body ends inside `input`) and whether it ended.
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, ChunkedProgress), H1Error> {
        self.walk(input, |_| {})
    }

    /// [`ChunkedDecoder::advance`], also handing out the body's content: its data bytes, and
    /// the bytes of its trailer section (field lines with their line ends), as they pass.
    pub fn decode(
        &mut self,
        input: &[u8],
        mut on: impl FnMut(ChunkedPart<'_>),
    ) -> Result<(usize, ChunkedProgress), H1Error> {
        self.walk(input, &mut on)
    }

    fn walk(&mut self, input: &[u8], mut on: impl FnMut(ChunkedPart<'_>)) -> Result<(usize, ChunkedProgress), H1Error> {
        let mut i = 0;
        while i < input.len() {
            if let State::Data { left } = self.state {
                let take = left.min((input.len() - i) as u64) as usize;
                on(ChunkedPart::Data(&input[i..i + take]));
                i += take;
                self.state = if left == take as u64 {
                    State::DataCr
                } else {
                    State::Data {
                        left: left - take as u64,
                    }
                };
                continue;
            }
            let b = input[i];
            let in_trailers = matches!(
                self.state,
                State::TrailerStart | State::TrailerLine { .. } | State::TrailerLf { empty: false }
            );
            i += 1;
            self.state = self.step(b)?;
            if in_trailers && !matches!(self.state, State::TrailerLf { empty: true } | State::Done) {
                on(ChunkedPart::Trailer(&input[i - 1..i]));
            }
            if self.state == State::Done {
                return Ok((i, ChunkedProgress::Done));
            }
        }
        Ok((
            i,
            if self.state == State::Done {
                ChunkedProgress::Done
            } else {
                ChunkedProgress::NeedMore
            },
        ))
    }

    fn step(&mut self, b: u8) -> Result<State, H1Error> {
        Ok(match self.state {
            State::Size { digits, value } => {
                self.line_len += 1;
                if self.line_len > MAX_SIZE_LINE {
                    return Err(H1Error::BadChunkSize);
                }
                match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 16 {
                            return Err(H1Error::BadChunkSize);
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        State::Size {
                            digits: digits + 1,
                            value: value << 4 | d,
                        }
                    }
                    _ if digits == 0 => return Err(H1Error::BadChunkSize),
                    b';' => State::Extension {
                        value,
                        quoted: false,
                        escaped: false,
                    },
                    b'\r' => State::SizeLf { value },
                    _ => return Err(H1Error::BadChunkSize),
                }
            }
            State::Extension { value, quoted, escaped } => {
                self.line_len += 1;
                if self.line_len > MAX_SIZE_LINE {
                    return Err(H1Error::BadChunkExtension);
                }
                match b {
                    _ if escaped => State::Extension {
                        value,
                        quoted,
                        escaped: false,
                    },
                    b'\\' if quoted => State::Extension {
                        value,
                        quoted,
                        escaped: true,
                    },
                    b'"' => State::Extension {
                        value,
                        quoted: !quoted,
                        escaped: false,
                    },
                    b'\r' if !quoted => State::SizeLf { value },
                    b'\t' => State::Extension { value, quoted, escaped },
                    0..=0x1f | 0x7f => return Err(H1Error::BadChunkExtension),
                    _ => State::Extension { value, quoted, escaped },
                }
            }
            State::SizeLf { value } => {
                if b != b'\n' {
                    return Err(H1Error::BadChunkSize);
                }
                self.line_len = 0;
                self.declared = self.declared.saturating_add(value);
                if value == 0 {
                    State::TrailerStart
                } else {
                    State::Data { left: value }
                }
            }
            State::Data { .. } => unreachable!("data is consumed in bulk"),
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(H1Error::BadChunkEnd),
            },
            State::DataLf => match b {
                b'\n' => State::Size { digits: 0, value: 0 },
                _ => return Err(H1Error::BadChunkEnd),
            },
            State::TrailerStart => {
                self.count_trailer()?;
                match b {
                    b'\r' => State::TrailerLf { empty: true },
                    b' ' | b'\t' | b':' => return Err(H1Error::BadTrailer),
                    _ => self.trailer_byte(b, true, false)?,
                }
            }
            State::TrailerLine { at_start, saw_colon } => {
                self.count_trailer()?;
                match b {
                    b'\r' if saw_colon => State::TrailerLf { empty: false },
                    _ => self.trailer_byte(b, at_start, saw_colon)?,
                }
            }
            State::TrailerLf { empty } => match (b, empty) {
                (b'\n', true) => State::Done,
                (b'\n', false) => State::TrailerStart,
                _ => return Err(H1Error::BadTrailer),
            },
            State::Done => State::Done,
        })
    }

    fn count_trailer(&mut self) -> Result<(), H1Error> {
        self.trailer_len += 1;
        if self.trailer_len > MAX_TRAILERS {
            return Err(H1Error::BadTrailer);
        }
        Ok(())
    }

    fn trailer_byte(&self, b: u8, _at_start: bool, saw_colon: bool) -> Result<State, H1Error> {
        if !saw_colon {
            // Field name: token characters, then the colon right after (no whitespace before it).
            return match b {
                b':' => Ok(State::TrailerLine {
                    at_start: false,
                    saw_colon: true,
                }),
                b'!' | b'#'..=b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~' => {
                    Ok(State::TrailerLine {
                        at_start: false,
                        saw_colon: false,
                    })
                }
                _ if b.is_ascii_alphanumeric() => Ok(State::TrailerLine {
                    at_start: false,
                    saw_colon: false,
                }),
                _ => Err(H1Error::BadTrailer),
            };
        }
        match b {
            b'\t' => Ok(State::TrailerLine {
                at_start: false,
                saw_colon,
            }),
            0..=0x1f | 0x7f => Err(H1Error::BadTrailer),
            _ => Ok(State::TrailerLine {
                at_start: false,
                saw_colon,
            }),
        }
    }
}

/// Appends a chunk's size line (`1a2b\r\n`) for `len` bytes of data.
pub fn chunk_size_line(len: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut n = len;
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk of a chunked body (nothing for an empty slice, which would end the body).
pub fn write_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    chunk_size_line(data.len(), out);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}
