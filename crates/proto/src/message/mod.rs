//! The protocol-neutral HTTP message at the seam between a protocol's codec and the request path
//! (HAProxy's HTX plays this part): a response head is a status, its fields and what is known
//! of its body's length; a body is a sequence of frames (data, then trailers or an end). Chunked
//! encoding, reason phrases and `Connection` semantics are HTTP/1 details that stay inside the
//! HTTP/1 codec, on both roles.
//!
//! Fields are borrowed where they already are: byte ranges into the buffer HTTP/1 read a head
//! into (no copy on the HTTP/1 path), ranges into the field section Rampart's HPACK decoder wrote
//! (the HTTP/2 path), or name/value pairs (a chunked body's trailer section).
//!
//! A request head is owned ([`RequestHead`]): its bytes and field ranges, filled in place by the
//! HTTP/1 codec and laid out by the HTTP/2 side, the one request-head type every protocol's
//! request becomes. A response head is owned too ([`ResponseHead`]): an HTTP/1 head's bytes and
//! ranges, or an HTTP/2 head's decoded field section and ranges.

mod head_bytes;
mod request;
mod response;
pub use request::{RequestHead, Span};
pub use response::ResponseHead;

use crate::h1::{Field, Framing, Version};

/// The protocol a message came in, as the request path sees it (an HTTP/2 request is HTTP/2,
/// not the HTTP/1.1 head it once was written as).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    Http10,
    #[default]
    Http11,
    Http2,
    /// HTTP/3 over QUIC (no mux speaks it yet: the arm its mux will give).
    Http3,
}

impl Protocol {
    /// As the access log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http10 => "HTTP/1.0",
            Protocol::Http11 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2.0",
            Protocol::Http3 => "HTTP/3",
        }
    }
}

impl From<Version> for Protocol {
    /// The protocol of an HTTP/1 head.
    fn from(version: Version) -> Protocol {
        match version {
            Version::Http10 => Protocol::Http10,
            Version::Http11 => Protocol::Http11,
        }
    }
}

/// What is known of a body's length before it flows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BodyLength {
    /// No body at all (a response to HEAD, a 204 or 304, a bodiless request).
    #[default]
    None,
    /// Exactly this many data bytes.
    Exact(u64),
    /// Data until the sender ends the body (HTTP/1 chunks or close, HTTP/2 END_STREAM).
    Unknown,
}

impl BodyLength {
    /// The length an HTTP/1 head's framing announces.
    pub fn of_framing(framing: Framing) -> BodyLength {
        match framing {
            Framing::None => BodyLength::None,
            Framing::Length(n) => BodyLength::Exact(n),
            Framing::Chunked | Framing::UntilClose => BodyLength::Unknown,
        }
    }
}

/// A head's fields, wherever they are.
#[derive(Debug, Clone, Copy)]
pub enum FieldsRef<'a> {
    /// Byte ranges into the buffer an HTTP/1 head was read (or written) into: each field is a
    /// whole line there (name, colon, value, CRLF), which writers may copy as it is.
    Ranges { buf: &'a [u8], list: &'a [Field] },
    /// Byte ranges into a buffer of names and values only (an HTTP/2 field section as the HPACK
    /// decoder wrote it): no lines to copy.
    Packed { buf: &'a [u8], list: &'a [Field] },
    /// Name/value pairs (a chunked body's trailers).
    Pairs(&'a [(&'a [u8], &'a [u8])]),
}

impl<'a> FieldsRef<'a> {
    /// No fields.
    pub const EMPTY: FieldsRef<'static> = FieldsRef::Pairs(&[]);

    /// Every field in order: `(name, value)`. An HTTP/2 field's name is lowercase.
    #[inline]
    pub fn iter(&self) -> FieldsIter<'a> {
        match *self {
            FieldsRef::Ranges { buf, list } | FieldsRef::Packed { buf, list } => FieldsIter::Ranges(buf, list.iter()),
            FieldsRef::Pairs(pairs) => FieldsIter::Pairs(pairs.iter()),
        }
    }

    /// The first value of field `name` (matched case-insensitively).
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        match *self {
            FieldsRef::Ranges { list, .. } | FieldsRef::Packed { list, .. } => list.is_empty(),
            FieldsRef::Pairs(pairs) => pairs.is_empty(),
        }
    }
}

/// The iterator of [`FieldsRef::iter`].
pub enum FieldsIter<'a> {
    Ranges(&'a [u8], std::slice::Iter<'a, Field>),
    Pairs(std::slice::Iter<'a, (&'a [u8], &'a [u8])>),
}

impl<'a> Iterator for FieldsIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            FieldsIter::Ranges(buf, list) => list.next().map(|f| (f.name(buf), f.value(buf))),
            FieldsIter::Pairs(iter) => iter.next().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::{parse_response, Limits};

    #[test]
    fn fields_read_the_same_from_every_backing() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: 1\r\nx-a: 2\r\n\r\n";
        let mut head = ResponseHead::default();
        let parsed = parse_response(raw, &Limits::default(), false, &mut head)
            .unwrap()
            .unwrap();
        assert_eq!(BodyLength::of_framing(parsed.framing), BodyLength::Unknown);
        let ranges = FieldsRef::Ranges {
            buf: raw,
            list: &head.fields,
        };
        let packed_buf = b"content-typetext/plainx-a1x-a2";
        let packed_list = [
            Field {
                name: (0, 12),
                value: (12, 22),
            },
            Field {
                name: (22, 25),
                value: (25, 26),
            },
            Field {
                name: (26, 29),
                value: (29, 30),
            },
        ];
        let packed = FieldsRef::Packed {
            buf: packed_buf,
            list: &packed_list,
        };
        let pairs: [(&[u8], &[u8]); 3] = [(b"Content-Type", b"text/plain"), (b"X-A", b"1"), (b"x-a", b"2")];
        for fields in [ranges, packed, FieldsRef::Pairs(&pairs)] {
            let seen: Vec<(Vec<u8>, &[u8])> = fields.iter().map(|(n, v)| (n.to_ascii_lowercase(), v)).collect();
            assert_eq!(
                seen,
                vec![
                    (b"content-type".to_vec(), &b"text/plain"[..]),
                    (b"x-a".to_vec(), &b"1"[..]),
                    (b"x-a".to_vec(), &b"2"[..]),
                ]
            );
            assert_eq!(fields.get(b"X-a"), Some(&b"1"[..]));
            assert_eq!(fields.get(b"missing"), None);
            assert!(!fields.is_empty());
        }
        assert!(FieldsRef::EMPTY.is_empty());
        assert_eq!(BodyLength::of_framing(Framing::Length(3)), BodyLength::Exact(3));
        assert_eq!(BodyLength::of_framing(Framing::None), BodyLength::None);
    }
}
