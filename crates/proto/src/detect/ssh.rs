//! SSH: the protocol version exchange (RFC 4253 section 4.2). A client opens with
//! `SSH-protoversion-softwareversion`; protocol version 2.0, or 1.99 from a client that also
//! speaks SSH 1 (section 5.1). The match comes as soon as the prefix is there, without waiting for
//! the rest of the line.

use super::{literal, Verdict};

/// The identification prefixes of an SSH 2 client.
pub const PREFIXES: [&[u8]; 2] = [b"SSH-2.0-", b"SSH-1.99-"];

/// Says whether `buf` starts with an SSH 2 identification: the prefix's length once it is there.
pub fn peek(buf: &[u8]) -> Verdict<usize> {
    let mut verdict = Verdict::NotThis;
    for prefix in PREFIXES {
        match literal(buf, prefix) {
            Verdict::Match(n) => return Verdict::Match(n),
            Verdict::NeedMore => verdict = Verdict::NeedMore,
            Verdict::NotThis => {}
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::{peek, Verdict::*};

    #[test]
    fn ssh_2_and_1_99_banners_match_at_the_prefix() {
        assert_eq!(peek(b"SSH-2.0-"), Match(8));
        assert_eq!(peek(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n"), Match(8));
        assert_eq!(peek(b"SSH-1.99-Cisco-1.25\r\n"), Match(9));
        for cut in 1..8 {
            assert_eq!(peek(&b"SSH-2.0-"[..cut]), NeedMore, "cut at {cut}");
        }
        assert_eq!(peek(b"SSH-1.9"), NeedMore);
    }

    #[test]
    fn other_versions_and_text_are_not_ssh() {
        assert_eq!(peek(b"SSH-1.5-"), NotThis);
        assert_eq!(peek(b"SSH-2.1-"), NotThis);
        assert_eq!(peek(b"ssh-2.0-"), NotThis);
        assert_eq!(peek(b"SEARCH / HTTP/1.1"), NotThis);
    }
}
