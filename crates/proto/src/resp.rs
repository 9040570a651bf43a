//! RESP2, the Redis serialization protocol (<https://redis.io/docs/latest/develop/reference/protocol-spec/>),
//! as far as a client needs it: commands out, replies in.
//!
//! [`encode_command`] (or [`encode_array_header`] followed by [`encode_bulk`] /
//! [`encode_bulk_int`] per argument) appends a command, an array of bulk strings, to a buffer and
//! allocates nothing beyond it, so many commands can be pipelined in one write.
//!
//! [`parse_reply`] reads one reply from the start of a buffer: `Ok(None)` while more bytes are
//! needed, the reply and the bytes it took, or an error on malformed input. A [`Reply`] borrows
//! its strings from the buffer. Hostile input is bounded by [`RespLimits`] (line, bulk and array
//! lengths) and by [`MAX_DEPTH`] (array nesting, so recursion is bounded): an array is never
//! allocated for more elements than the bytes present could hold (each takes at least three), so
//! memory stays proportional to the input. The parser never panics, and its decision is stable:
//! once a prefix of a stream yields a reply or an error, every longer buffer yields exactly the
//! same (fuzzed, `fuzz/fuzz_targets/resp.rs`).
//!
//! Each call parses from the start, so a caller feeding a large reply a few bytes at a time pays
//! for the prefix again on every call; replies Rampart reads (script results, `PONG`) are small.

/// How deeply arrays may nest: an array inside an array is depth 2. Redis replies to the commands
/// Rampart sends nest at most 2 deep.
pub const MAX_DEPTH: usize = 8;

/// The longest bulk string Redis accepts (`proto-max-bulk-len`, 512 MiB).
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// Bounds on a reply, checked as soon as the length that breaks them is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RespLimits {
    /// Longest simple string or error line, CRLF excluded.
    pub max_line_len: usize,
    /// Longest bulk string.
    pub max_bulk_len: usize,
    /// Most elements in one array.
    pub max_array_len: usize,
}

impl Default for RespLimits {
    /// 64 KiB lines, 512 MiB bulk strings (as Redis), arrays of up to 1 Mi elements.
    fn default() -> Self {
        RespLimits {
            max_line_len: 64 * 1024,
            max_bulk_len: MAX_BULK_LEN,
            max_array_len: 1024 * 1024,
        }
    }
}

/// One RESP2 reply; strings borrow from the parsed buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+OK`: a status line.
    Simple(&'a [u8]),
    /// `-ERR message`: an error line, its first word being the error kind.
    Error(&'a [u8]),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nfoo`; `None` for the null bulk string `$-1`.
    Bulk(Option<&'a [u8]>),
    /// `*2\r\n...`; `None` for the null array `*-1`.
    Array(Option<Vec<Reply<'a>>>),
}

impl<'a> Reply<'a> {
    /// The integer, for [`Reply::Integer`].
    pub fn as_integer(&self) -> Option<i64> {
        match *self {
            Reply::Integer(n) => Some(n),
            _ => None,
        }
    }

    /// The bytes of a simple string or a non-null bulk string.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Reply::Simple(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The elements of a non-null array.
    pub fn as_array(&self) -> Option<&[Reply<'a>]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// The message of an error reply.
    pub fn as_error(&self) -> Option<&'a [u8]> {
        match *self {
            Reply::Error(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a reply was rejected. Once returned for a prefix of a stream, the same error is returned
/// for any longer buffer: the connection is beyond repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    #[error("unknown RESP type byte {0:#04x}")]
    UnknownType(u8),
    #[error("CR or LF inside a RESP line, or CR not followed by LF")]
    BadLineEnd,
    #[error("RESP line longer than its limit")]
    LineTooLong,
    #[error("malformed RESP integer or length")]
    BadInteger,
    #[error("RESP bulk string length out of range")]
    BadBulkLen,
    #[error("RESP bulk string not followed by CRLF")]
    BadBulkEnd,
    #[error("RESP array length out of range")]
    BadArrayLen,
    #[error("RESP arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Appends a command, `args` as an array of bulk strings: `encode_command(&mut out,
/// &[b"GET", b"key"])`.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    encode_array_header(out, args.len());
    for arg in args {
        encode_bulk(out, arg);
    }
}

/// Appends `*LEN\r\n`, the start of an array of `len` elements (a command of `len` arguments);
/// append exactly `len` elements after it.
pub fn encode_array_header(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    push_decimal(out, len as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends `bytes` as a bulk string.
pub fn encode_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    push_decimal(out, bytes.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal form of `n` as a bulk string (the way Redis takes numeric arguments),
/// without formatting through a `String`.
pub fn encode_bulk_int(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let len = decimal(&mut digits, n.unsigned_abs());
    let negative = n < 0;
    out.push(b'$');
    push_decimal(out, (len + negative as usize) as u64);
    out.extend_from_slice(b"\r\n");
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[20 - len..]);
    out.extend_from_slice(b"\r\n");
}

fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let len = decimal(&mut digits, n);
    out.extend_from_slice(&digits[20 - len..]);
}

/// Writes `n` in decimal at the end of `digits`; returns how many digits.
fn decimal(digits: &mut [u8; 20], mut n: u64) -> usize {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return digits.len() - at;
        }
    }
}

/// Parses one reply from the start of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a reply, `Ok(Some((reply, used)))` when it
/// holds a whole one (`used` bytes; what follows is the next reply), or an error on malformed
/// input or input beyond `limits`.
pub fn parse_reply<'a>(buf: &'a [u8], limits: &RespLimits) -> Result<Option<(Reply<'a>, usize)>, RespError> {
    Parser { buf, limits }.reply(0, 1)
}

/// The longest integer line: `-9223372036854775808` is 20 bytes.
const MAX_INTEGER_LINE: usize = 20;

struct Parser<'a, 'l> {
    buf: &'a [u8],
    limits: &'l RespLimits,
}

/// A parse step's result: `None` for "need more bytes", else the value and where it ends.
type Step<T> = Result<Option<(T, usize)>, RespError>;

impl<'a> Parser<'a, '_> {
    /// The reply starting at `at`, nested `depth` arrays deep (1 at the top).
    fn reply(&self, at: usize, depth: usize) -> Step<Reply<'a>> {
        let Some(&kind) = self.buf.get(at) else {
            return Ok(None);
        };
        let at = at + 1;
        match kind {
            b'+' => Ok(self
                .line(at, self.limits.max_line_len)?
                .map(|(s, end)| (Reply::Simple(s), end))),
            b'-' => Ok(self
                .line(at, self.limits.max_line_len)?
                .map(|(s, end)| (Reply::Error(s), end))),
            b':' => Ok(self.integer(at)?.map(|(n, end)| (Reply::Integer(n), end))),
            b'$' => self.bulk(at),
            // Checked on the type byte, so the verdict does not depend on what follows it.
            b'*' if depth > MAX_DEPTH => Err(RespError::TooDeep),
            b'*' => self.array(at, depth),
            other => Err(RespError::UnknownType(other)),
        }
    }

    /// The line starting at `at` (at most `max` bytes before its CRLF) and where its CRLF ends.
    /// The verdict depends only on the bytes up to the first CR or LF (or the first `max + 1`
    /// bytes), so it never changes as more bytes arrive.
    fn line(&self, at: usize, max: usize) -> Step<&'a [u8]> {
        let rest = &self.buf[at..];
        let window = &rest[..rest.len().min(max.saturating_add(1))];
        match window.iter().position(|&b| b == b'\r' || b == b'\n') {
            Some(i) if rest[i] == b'\n' => Err(RespError::BadLineEnd),
            Some(i) => match rest.get(i + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some((&rest[..i], at + i + 2))),
                Some(_) => Err(RespError::BadLineEnd),
            },
            None if window.len() > max => Err(RespError::LineTooLong),
            None => Ok(None),
        }
    }

    /// A signed decimal line: an optional `-`, then one or more digits.
    fn integer(&self, at: usize) -> Step<i64> {
        let Some((text, end)) = self.line(at, MAX_INTEGER_LINE)? else {
            return Ok(None);
        };
        let (negative, digits) = match text {
            [b'-', rest @ ..] => (true, rest),
            _ => (false, text),
        };
        if digits.is_empty() {
            return Err(RespError::BadInteger);
        }
        // Accumulate negatively so that i64::MIN fits.
        let mut n: i64 = 0;
        for &d in digits {
            if !d.is_ascii_digit() {
                return Err(RespError::BadInteger);
            }
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_sub(i64::from(d - b'0')))
                .ok_or(RespError::BadInteger)?;
        }
        let n = if negative {
            n
        } else {
            n.checked_neg().ok_or(RespError::BadInteger)?
        };
        Ok(Some((n, end)))
    }

    fn bulk(&self, at: usize) -> Step<Reply<'a>> {
        let Some((len, at)) = self.integer(at)? else {
            return Ok(None);
        };
        if len == -1 {
            return Ok(Some((Reply::Bulk(None), at)));
        }
        let len = usize::try_from(len).map_err(|_| RespError::BadBulkLen)?;
        if len > self.limits.max_bulk_len {
            return Err(RespError::BadBulkLen);
        }
        let data_end = at.checked_add(len).ok_or(RespError::BadBulkLen)?;
        match self.buf.get(data_end..data_end.saturating_add(2)) {
            Some(b"\r\n") => Ok(Some((Reply::Bulk(Some(&self.buf[at..data_end])), data_end + 2))),
            Some(_) => Err(RespError::BadBulkEnd),
            None => Ok(None),
        }
    }

    fn array(&self, at: usize, depth: usize) -> Step<Reply<'a>> {
        let Some((len, mut at)) = self.integer(at)? else {
            return Ok(None);
        };
        if len == -1 {
            return Ok(Some((Reply::Array(None), at)));
        }
        let len = usize::try_from(len).map_err(|_| RespError::BadArrayLen)?;
        if len > self.limits.max_array_len {
            return Err(RespError::BadArrayLen);
        }
        // Every element takes at least 3 bytes (`+\r\n`): never reserve more than the input holds.
        let mut items = Vec::with_capacity(len.min((self.buf.len() - at) / 3));
        for _ in 0..len {
            let Some((item, end)) = self.reply(at, depth + 1)? else {
                return Ok(None);
            };
            items.push(item);
            at = end;
        }
        Ok(Some((Reply::Array(Some(items)), at)))
    }
}

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

#[cfg(test)]
mod tests;
