//! What the first bytes of a connection on a TLS port are: the start of a TLS handshake, a plain
//! HTTP request sent to the wrong port, or something else. The connection stage looks before it
//! hands bytes to the TLS library, so a plain HTTP client gets an HTTP answer that says what
//! went wrong (as nginx does) instead of a TLS alert it cannot read.

/// The verdict on a connection's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstBytes {
    /// Too few bytes to tell yet.
    NeedMore,
    /// A TLS record carrying a handshake message (a ClientHello, if the client is sane).
    TlsHandshake,
    /// An HTTP/1 request line: a method token followed by a space.
    PlainHttp,
    /// Anything else.
    Other,
}

/// The longest method token recognised (longer ones are called [`FirstBytes::Other`]).
const MAX_METHOD: usize = 16;

/// TLS record content type "handshake".
const HANDSHAKE: u8 = 0x16;

/// Classifies the first bytes received on a TLS port.
pub fn classify(first: &[u8]) -> FirstBytes {
    let Some(&b0) = first.first() else {
        return FirstBytes::NeedMore;
    };
    if b0 == HANDSHAKE {
        // Record version: major 3, minor 0 (SSL 3.0 in some ClientHellos) to 4.
        return match first.get(1..3) {
            None if first.len() == 1 || first[1] == 3 => FirstBytes::NeedMore,
            Some(&[3, minor]) if minor <= 4 => FirstBytes::TlsHandshake,
            _ => FirstBytes::Other,
        };
    }
    for (i, &b) in first.iter().take(MAX_METHOD + 1).enumerate() {
        match b {
            b'A'..=b'Z' | b'-' | b'_' => {}
            b' ' if i > 0 => return FirstBytes::PlainHttp,
            _ => return FirstBytes::Other,
        }
    }
    if first.len() > MAX_METHOD {
        FirstBytes::Other
    } else {
        FirstBytes::NeedMore
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, FirstBytes::*};

    #[test]
    fn a_client_hello_record_is_a_handshake() {
        assert_eq!(classify(&[0x16, 3, 1, 0, 200, 1]), TlsHandshake);
        assert_eq!(classify(&[0x16, 3, 3]), TlsHandshake);
        assert_eq!(classify(&[0x16]), NeedMore);
        assert_eq!(classify(&[0x16, 3]), NeedMore);
        assert_eq!(classify(&[0x16, 2, 0]), Other);
        assert_eq!(classify(&[0x16, 3, 9]), Other);
    }

    #[test]
    fn a_request_line_is_plain_http() {
        assert_eq!(classify(b"GET / HTTP/1.1\r\n"), PlainHttp);
        assert_eq!(classify(b"PROPFIND /x"), PlainHttp);
        assert_eq!(classify(b"GE"), NeedMore);
        assert_eq!(classify(b""), NeedMore);
    }

    #[test]
    fn everything_else_is_other() {
        assert_eq!(classify(b" GET /"), Other);
        assert_eq!(classify(b"get / HTTP/1.1"), Other);
        assert_eq!(classify(&[0x80, 0x2e, 0x01]), Other); // an SSLv2-style hello
        assert_eq!(classify(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), Other);
        assert_eq!(classify(&[0, 0, 0]), Other);
    }
}
