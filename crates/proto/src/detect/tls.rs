//! A TLS ClientHello: the record layer walked and the handshake message reassembled here (across
//! any number of records, and whatever the TCP segment boundaries), the ClientHello body read by
//! `tls-parser` for the server name (SNI) and the ALPN list.
//!
//! Strict where a real TLS server is: every record before the end of the ClientHello must be a
//! non-empty handshake record of version 3.0 to 3.4 and at most 2^14 + 2048 bytes, the first
//! handshake message must be a ClientHello of at most 64 KiB that parses completely (no trailing
//! bytes, every extension well-formed), and a host_name must be 1 to 255 bytes of hostname
//! characters. Anything else is [`Verdict::NotThis`].
//!
//! Allocation: none while the ClientHello is incomplete, and none for one carried by a single
//! record (almost every client) beyond `tls-parser`'s own vectors and the returned name and ALPN
//! list. A ClientHello split across several records is copied once, when complete, into one
//! buffer for `tls-parser`.

use tls_parser::{parse_tls_client_hello_extensions, parse_tls_handshake_client_hello, SNIType, TlsExtension};

use super::Verdict;

/// TLS record content type "handshake", the first byte of every ClientHello record.
pub const CONTENT_TYPE_HANDSHAKE: u8 = 0x16;
/// Handshake message type "client_hello".
const CLIENT_HELLO: u8 = 1;
/// A record header: content type, version (2 bytes), length (2 bytes).
const RECORD_HEADER: usize = 5;
/// A handshake message header: type, length (3 bytes).
const MESSAGE_HEADER: usize = 4;
/// The longest record accepted: 2^14 bytes of plaintext plus the 2048 a TLSCiphertext may add.
const MAX_RECORD: usize = 16384 + 2048;
/// The longest ClientHello body accepted.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;
/// The most bytes of records that may carry one ClientHello (a bound on the work per call when a
/// client splits it into tiny records: ~22,000 record headers at most).
const MAX_SPAN: usize = 128 * 1024;
/// The longest host_name accepted (a DNS name is at most 253 characters, 255 octets on the wire).
const MAX_SNI: usize = 255;

/// What a ClientHello offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The server_name of type host_name, lowercased; `None` when the extension or the entry is
    /// missing.
    pub sni: Option<String>,
    /// The ALPN protocol names, in the client's order (empty without the extension).
    pub alpn: Vec<Vec<u8>>,
    /// Bytes of the buffer taken by the records that carry the ClientHello.
    pub message_len: usize,
}

/// Says whether `buf` (a connection's first bytes) starts with a TLS ClientHello.
pub fn peek(buf: &[u8]) -> Verdict<ClientHello> {
    let (body_len, message_len, one_record) = match locate(buf) {
        Located::NeedMore => return Verdict::NeedMore,
        Located::NotThis => return Verdict::NotThis,
        Located::Whole {
            body_len,
            records_end,
            one_record,
        } => (body_len, records_end, one_record),
    };
    let gathered;
    let body = if one_record {
        let start = RECORD_HEADER + MESSAGE_HEADER;
        buf.get(start..start + body_len)
    } else {
        gathered = gather(buf, body_len);
        gathered.as_deref()
    };
    match body.and_then(read_client_hello) {
        Some((sni, alpn)) => Verdict::Match(ClientHello { sni, alpn, message_len }),
        None => Verdict::NotThis,
    }
}

/// Where the record walk stands.
#[derive(Debug, PartialEq, Eq)]
enum Located {
    NeedMore,
    NotThis,
    /// The ClientHello (its body `body_len` bytes) ends in the record that ends at `records_end`,
    /// and that record is complete; `one_record`: it is all in the first record.
    Whole {
        body_len: usize,
        records_end: usize,
        one_record: bool,
    },
}

/// Walks the records from the start of `buf` until the one where the first handshake message ends
/// (and that record is complete), without copying anything.
fn locate(buf: &[u8]) -> Located {
    let mut pos = 0usize;
    let mut header = [0u8; MESSAGE_HEADER];
    let mut seen = 0usize; // handshake bytes seen, over all records so far
    loop {
        let rest = buf.get(pos..).unwrap_or_default();
        let Some(record) = rest.get(..RECORD_HEADER) else {
            return if record_header_prefix_ok(rest) {
                Located::NeedMore
            } else {
                Located::NotThis
            };
        };
        let len = match record {
            &[CONTENT_TYPE_HANDSHAKE, 3, minor, hi, lo] if minor <= 4 => usize::from(u16::from_be_bytes([hi, lo])),
            _ => return Located::NotThis,
        };
        if len == 0 || len > MAX_RECORD {
            return Located::NotThis;
        }
        let fragment = rest.get(RECORD_HEADER..).unwrap_or_default();
        let fragment = fragment.get(..len).unwrap_or(fragment);
        // The message header may itself be split across records.
        for (slot, &b) in header.iter_mut().skip(seen).zip(fragment) {
            *slot = b;
        }
        seen += fragment.len();
        if seen >= 1 && header[0] != CLIENT_HELLO {
            return Located::NotThis;
        }
        let record_complete = fragment.len() == len;
        if seen >= MESSAGE_HEADER {
            let body_len = usize::from(header[1]) << 16 | usize::from(header[2]) << 8 | usize::from(header[3]);
            if body_len > MAX_CLIENT_HELLO {
                return Located::NotThis;
            }
            if seen >= MESSAGE_HEADER + body_len {
                return if record_complete {
                    Located::Whole {
                        body_len,
                        records_end: pos + RECORD_HEADER + len,
                        one_record: pos == 0,
                    }
                } else {
                    Located::NeedMore
                };
            }
        }
        if !record_complete {
            return Located::NeedMore;
        }
        pos += RECORD_HEADER + len;
        if pos > MAX_SPAN {
            return Located::NotThis;
        }
    }
}

/// Whether an incomplete record header (fewer than 5 bytes) could still start a valid one.
fn record_header_prefix_ok(partial: &[u8]) -> bool {
    let checks: [fn(u8) -> bool; 4] = [
        |b| b == CONTENT_TYPE_HANDSHAKE,
        |b| b == 3,
        |b| b <= 4,
        |hi| usize::from(hi) << 8 <= MAX_RECORD,
    ];
    partial.iter().zip(checks).all(|(&b, ok)| ok(b))
}

/// Copies the ClientHello body out of the records it spans (`locate` said they are all there).
fn gather(buf: &[u8], body_len: usize) -> Option<Vec<u8>> {
    let total = MESSAGE_HEADER + body_len;
    let mut message = Vec::with_capacity(total);
    let mut pos = 0usize;
    while message.len() < total {
        let &[_, _, _, hi, lo] = buf.get(pos..pos + RECORD_HEADER)? else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        let fragment = buf.get(pos + RECORD_HEADER..pos + RECORD_HEADER + len)?;
        let take = fragment.len().min(total - message.len());
        message.extend_from_slice(fragment.get(..take)?);
        pos += RECORD_HEADER + len;
    }
    message.drain(..MESSAGE_HEADER);
    Some(message)
}

/// Reads a complete ClientHello body with `tls-parser`: its host_name and ALPN list, or `None`
/// when it does not parse exactly.
fn read_client_hello(body: &[u8]) -> Option<(Option<String>, Vec<Vec<u8>>)> {
    let (rest, hello) = parse_tls_handshake_client_hello(body).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let mut sni = None;
    let mut alpn = None;
    if let Some(extensions) = hello.ext {
        let (rest, extensions) = parse_tls_client_hello_extensions(extensions).ok()?;
        if !rest.is_empty() {
            return None;
        }
        for extension in extensions {
            match extension {
                // The first extension of each kind counts (a TLS server rejects repeats anyway).
                TlsExtension::SNI(names) if sni.is_none() => {
                    sni = Some(match names.into_iter().find(|(kind, _)| *kind == SNIType::HostName) {
                        Some((_, name)) => Some(host_name(name)?),
                        None => None,
                    });
                }
                TlsExtension::ALPN(names) if alpn.is_none() => {
                    alpn = Some(names.into_iter().map(<[u8]>::to_vec).collect());
                }
                _ => {}
            }
        }
    }
    Some((sni.flatten(), alpn.unwrap_or_default()))
}

/// A host_name as a lowercase string: 1 to 255 bytes of letters, digits, `-`, `.` and `_`.
fn host_name(name: &[u8]) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SNI
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    valid.then(|| name.iter().map(|&b| char::from(b.to_ascii_lowercase())).collect())
}

#[cfg(test)]
mod tests;
