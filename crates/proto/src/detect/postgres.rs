//! PostgreSQL: a frontend's first message (protocol documentation, "Message Formats"), the only
//! ones without a type byte: an Int32 length (itself included) and an Int32 code, big-endian.
//!
//! - SSLRequest: length 8, code 80877103.
//! - GSSENCRequest: length 8, code 80877104.
//! - CancelRequest: length 16, code 80877102.
//! - StartupMessage: length 9 to 10,000 (PostgreSQL's own limit), protocol version 3.x (major 3 in
//!   the high 16 bits, any minor).
//!
//! The match comes with those 8 bytes; the rest of the message need not have arrived.

use super::Verdict;

/// The bytes looked at: the length and the code.
pub const HEADER_LEN: usize = 8;
/// The longest StartupMessage a PostgreSQL server accepts.
pub const MAX_STARTUP: u32 = 10_000;

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;
/// Protocol version 3.x: the major version in the high 16 bits.
const MAJOR_3: [u8; 2] = [0, 3];

/// Which first message it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstMessage {
    /// A request to switch to TLS.
    SslRequest,
    /// A request to switch to GSSAPI encryption.
    GssEncRequest,
    /// A query cancellation, on a connection of its own.
    CancelRequest,
    /// A session start, protocol version 3.`minor`.
    Startup { minor: u16 },
}

/// Says whether `buf` starts with a PostgreSQL frontend's first message.
pub fn peek(buf: &[u8]) -> Verdict<FirstMessage> {
    let Some(&[l0, l1, l2, l3]) = buf.get(..4) else {
        // The length so far must be able to end up within 8..=10000 (0x2710).
        return match buf {
            [] | [0] | [0, 0] => Verdict::NeedMore,
            [0, 0, l2, ..] if *l2 <= 0x27 => Verdict::NeedMore,
            _ => Verdict::NotThis,
        };
    };
    let len = u32::from_be_bytes([l0, l1, l2, l3]);
    let code = buf
        .get(4..HEADER_LEN)
        .unwrap_or_else(|| buf.get(4..).unwrap_or_default());
    let is = |want: u32| want.to_be_bytes().starts_with(code);
    let startup = code.iter().zip(MAJOR_3).all(|(&a, b)| a == b);
    let possible = match len {
        8 => is(SSL_REQUEST) || is(GSSENC_REQUEST),
        16 => is(CANCEL_REQUEST) || startup,
        9..=MAX_STARTUP => startup,
        _ => false,
    };
    let &[c0, c1, c2, c3] = code else {
        return if possible { Verdict::NeedMore } else { Verdict::NotThis };
    };
    let message = match (len, u32::from_be_bytes([c0, c1, c2, c3])) {
        (8, SSL_REQUEST) => FirstMessage::SslRequest,
        (8, GSSENC_REQUEST) => FirstMessage::GssEncRequest,
        (16, CANCEL_REQUEST) => FirstMessage::CancelRequest,
        (9..=MAX_STARTUP, _) if startup => FirstMessage::Startup {
            minor: u16::from_be_bytes([c2, c3]),
        },
        _ => return Verdict::NotThis,
    };
    Verdict::Match(message)
}

#[cfg(test)]
mod tests {
    use super::{peek, FirstMessage::*, Verdict::*};

    /// A StartupMessage for user `app`, database `db`, protocol 3.`minor`.
    fn startup(minor: u8) -> Vec<u8> {
        let params = b"user\0app\0database\0db\0\0";
        let mut m = ((8 + params.len()) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 3, 0, minor]);
        m.extend_from_slice(params);
        m
    }

    #[test]
    fn ssl_and_gssenc_requests() {
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(peek(&ssl), Match(SslRequest));
        for cut in 0..8 {
            assert_eq!(peek(&ssl[..cut]), NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]), Match(GssEncRequest));
        assert_eq!(peek(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x31]), NotThis);
        assert_eq!(peek(&[0, 0, 0, 8, 0x04, 0xd3]), NotThis);
    }

    #[test]
    fn cancel_request() {
        let mut cancel = vec![0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e];
        cancel.extend_from_slice(&[0, 0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(peek(&cancel), Match(CancelRequest));
        assert_eq!(peek(&cancel[..8]), Match(CancelRequest));
        assert_eq!(peek(&[0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2f]), NotThis);
    }

    #[test]
    fn startup_v3_matches_with_its_header() {
        let m = startup(0);
        assert_eq!(peek(&m), Match(Startup { minor: 0 }));
        assert_eq!(peek(&m[..8]), Match(Startup { minor: 0 }));
        for cut in 0..8 {
            assert_eq!(peek(&m[..cut]), NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(&startup(2)), Match(Startup { minor: 2 }));
        // A 16-byte StartupMessage is not a CancelRequest.
        assert_eq!(peek(&[0, 0, 0, 16, 0, 3, 0, 0]), Match(Startup { minor: 0 }));
    }

    #[test]
    fn other_versions_and_lengths_are_not_postgres() {
        assert_eq!(peek(&[0, 0, 0, 30, 0, 2, 0, 0]), NotThis); // protocol 2.0
        assert_eq!(peek(&[0, 0, 0, 30, 0, 4]), NotThis);
        assert_eq!(peek(&[0, 0, 0, 30, 1]), NotThis);
        assert_eq!(peek(&[0, 0, 0, 7, 0, 3, 0, 0]), NotThis); // shorter than its header
        assert_eq!(peek(&[0, 0, 0x27, 0x11, 0, 3, 0, 0]), NotThis); // 10,001 bytes
        assert_eq!(peek(&[0, 0, 0x27, 0x10, 0, 3, 0, 0]), Match(Startup { minor: 0 }));
        assert_eq!(peek(&[0, 0, 0x28]), NotThis);
        assert_eq!(peek(&[0, 1]), NotThis);
        assert_eq!(peek(&[1]), NotThis);
        assert_eq!(peek(&[0, 0, 0, 8, 0, 3, 0, 0]), NotThis); // 8 bytes: no room for a parameter
    }
}
