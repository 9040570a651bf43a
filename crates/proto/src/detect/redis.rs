//! Redis: a RESP command, as redis-cli and every client library send it: an array of bulk strings,
//! `*<count>\r\n$<length>\r\n...` (RESP2 and RESP3 alike; RESP3's `HELLO` is such an array too).
//! The match comes with the array header and the first bulk string's header.
//!
//! Inline commands (`PING\r\n`, what a human types into telnet) are not recognised: they are bare
//! text, indistinguishable from the start of other line protocols (an HTTP method is such a
//! word), and no client library sends them.

use super::Verdict;

/// The most digits in the element count (RESP allows far fewer elements than 10^7 in practice).
const MAX_COUNT_DIGITS: usize = 7;
/// The most digits in the first bulk string's length (Redis caps a string at 512 MB: 9 digits).
const MAX_LENGTH_DIGITS: usize = 9;

/// Says whether `buf` starts with a RESP array of bulk strings: the length of
/// `*<count>\r\n$<length>\r\n` once all of it is there.
pub fn peek(buf: &[u8]) -> Verdict<usize> {
    let mut pos = 0usize;
    for (marker, max_digits) in [(b'*', MAX_COUNT_DIGITS), (b'$', MAX_LENGTH_DIGITS)] {
        match buf.get(pos) {
            None => return Verdict::NeedMore,
            Some(&b) if b == marker => pos += 1,
            Some(_) => return Verdict::NotThis,
        }
        let rest = buf.get(pos..).unwrap_or_default();
        let digits = rest
            .iter()
            .take(max_digits + 1)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > max_digits {
            return Verdict::NotThis;
        }
        pos += digits;
        for (i, want) in [b'\r', b'\n'].into_iter().enumerate() {
            match buf.get(pos + i) {
                None => return Verdict::NeedMore,
                Some(&b) if b == want && digits > 0 => {}
                Some(_) => return Verdict::NotThis,
            }
        }
        pos += 2;
    }
    Verdict::Match(pos)
}

#[cfg(test)]
mod tests {
    use super::{peek, Verdict::*};

    #[test]
    fn a_command_array_matches() {
        let ping = b"*1\r\n$4\r\nPING\r\n";
        assert_eq!(peek(ping), Match(8));
        for cut in 0..8 {
            assert_eq!(peek(&ping[..cut]), NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), Match(8));
        assert_eq!(peek(b"*1234567\r\n$123456789\r\n"), Match(22));
        assert_eq!(peek(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"), Match(8));
    }

    #[test]
    fn other_resp_and_inline_commands_are_not_redis() {
        assert_eq!(peek(b"PING\r\n"), NotThis);
        assert_eq!(peek(b"*\r\n"), NotThis);
        assert_eq!(peek(b"*12345678"), NotThis);
        assert_eq!(peek(b"*1\r\n$1234567890"), NotThis);
        assert_eq!(peek(b"*-1\r\n"), NotThis);
        assert_eq!(peek(b"*1\n"), NotThis);
        assert_eq!(peek(b"*1\r\r"), NotThis);
        assert_eq!(peek(b"*1\r\n+OK\r\n"), NotThis);
        assert_eq!(peek(b"*1\r\n$\r\n"), NotThis);
        assert_eq!(peek(b"*1\r\n$4\n"), NotThis);
    }
}
