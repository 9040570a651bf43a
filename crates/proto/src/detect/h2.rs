//! HTTP/2 with prior knowledge: the client connection preface (RFC 9113 section 3.4), which a
//! cleartext HTTP/2 client sends before anything else.

use super::{literal, Verdict};

/// The HTTP/2 client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Says whether `buf` starts with the HTTP/2 preface: its length (24) once all of it arrived.
pub fn peek(buf: &[u8]) -> Verdict<usize> {
    literal(buf, PREFACE)
}

#[cfg(test)]
mod tests {
    use super::{peek, Verdict::*, PREFACE};

    #[test]
    fn the_preface_matches_once_whole() {
        for cut in 1..PREFACE.len() {
            assert_eq!(peek(&PREFACE[..cut]), NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(PREFACE), Match(24));
        assert_eq!(peek(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04"), Match(24));
    }

    #[test]
    fn anything_else_is_not_h2() {
        assert_eq!(peek(b"PRI * HTTP/1.1\r\n"), NotThis);
        assert_eq!(peek(b"PRI * HTTP/2.0\r\n\r\nXX"), NotThis);
        assert_eq!(peek(b"POST / HTTP/1.1"), NotThis);
        assert_eq!(peek(b"\x16\x03\x01"), NotThis);
    }
}
