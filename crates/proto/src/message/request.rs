//! The owned request head: the one type a request of any protocol becomes once its mux has read
//! it. It owns its bytes and keeps the method, target, host and fields as ranges into them, so
//! the HTTP/1 codec fills it in place (the bytes are the buffer the head was read into, handed
//! over whole when nothing follows the head) and HTTP/2 lays its fields out into it with one copy.
//! What it holds beyond the text is what the request path needs to know of the message: what is
//! known of the body's length, the protocol it came in, and the flags the client's fields set.
//! HTTP/1 details (the version's text, the chunked framing, a reason phrase) stay in the HTTP/1
//! codec.

use super::head_bytes::HeadBytes;
use super::{BodyLength, FieldsRef, Protocol};
use crate::h1::Field;

/// A byte range of a head's bytes: where it starts and ends.
pub type Span = (u32, u32);

/// A request head that owns its bytes (see the module's introduction).
#[derive(Debug, Default, Clone)]
pub struct RequestHead {
    /// Its bytes (a head read in place may sit in a larger buffer).
    bytes: HeadBytes,
    pub method: Span,
    /// The target as the request gave it (origin-form, absolute-form, `*`, or an authority).
    pub target: Span,
    /// The `Host` field's value, or HTTP/2's `:authority`.
    pub host: Option<Span>,
    pub fields: Vec<Field>,
    /// What is known of the request body's length.
    pub body: BodyLength,
    /// The protocol the request came in.
    pub protocol: Protocol,
    /// The client lets its connection carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// An upgrade to a tunnel (`Connection: upgrade` with `Upgrade`, or HTTP/2's extended
    /// CONNECT for a WebSocket).
    pub upgrade: bool,
    /// Each field is a whole line of HTTP/1 text (name, colon, value, CRLF) as the client sent
    /// it, which may be copied as it came; `false` for a head laid out from another protocol or
    /// built, whose bytes hold names and values only.
    pub lines: bool,
}

impl RequestHead {
    /// An empty head that lays its bytes and fields out in `bytes` and `fields` (storage from a
    /// pool; both are cleared).
    pub fn with_storage(bytes: Vec<u8>, mut fields: Vec<Field>) -> Self {
        fields.clear();
        RequestHead {
            bytes: HeadBytes::empty(bytes),
            fields,
            ..RequestHead::default()
        }
    }

    /// A head whose bytes and fields were laid out already (in `bytes`, all of it the head's):
    /// the caller sets its ranges and facts.
    pub fn laid_out(bytes: Vec<u8>, fields: Vec<Field>) -> Self {
        RequestHead {
            bytes: HeadBytes::whole(bytes),
            fields,
            ..RequestHead::default()
        }
    }

    /// Takes `bytes` as the head's own: the buffer the HTTP/1 codec parsed it from, in which the
    /// head is `len` bytes long from `at` (the ranges the codec set count from there).
    #[inline]
    pub fn attach(&mut self, bytes: Vec<u8>, at: usize, len: usize) {
        self.bytes = HeadBytes::within(bytes, at, len);
    }

    /// The storage back (bytes, field list), for a pool.
    pub fn into_storage(self) -> (Vec<u8>, Vec<Field>) {
        (self.bytes.into_vec(), self.fields)
    }

    /// The head's bytes, which its ranges point into.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// The bytes of `span` (empty for a range outside the head).
    #[inline]
    pub fn get(&self, span: Span) -> &[u8] {
        self.bytes.get(span)
    }

    #[inline]
    pub fn method(&self) -> &[u8] {
        self.get(self.method)
    }

    #[inline]
    pub fn target(&self) -> &[u8] {
        self.get(self.target)
    }

    #[inline]
    pub fn host(&self) -> Option<&[u8]> {
        self.host.map(|h| self.get(h))
    }

    /// The fields, as the neutral message reads them.
    #[inline]
    pub fn fields_ref(&self) -> FieldsRef<'_> {
        FieldsRef::Ranges {
            buf: self.bytes(),
            list: &self.fields,
        }
    }

    /// Every field in order: `(name, value)`.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let buf = self.bytes();
        self.fields.iter().map(move |f| (f.name(buf), f.value(buf)))
    }

    /// The first value of field `name` (matched case-insensitively).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        // By length first: a field of another length is passed without reading its name.
        let buf = self.bytes();
        self.fields
            .iter()
            .filter(|f| f.name.1.wrapping_sub(f.name.0) as usize == name.len())
            .find(|f| {
                let n = f.name(buf);
                n == name || n.eq_ignore_ascii_case(name)
            })
            .map(|f| f.value(buf))
    }

    /// Whether the request came as HTTP/1.0.
    #[inline]
    pub fn http10(&self) -> bool {
        self.protocol == Protocol::Http10
    }

    /// Appends `bytes` to the head's own; returns their range (for a head being laid out).
    pub fn append(&mut self, bytes: &[u8]) -> Span {
        self.bytes.append(bytes)
    }

    /// Appends a field (its name, then its value) and lists it.
    pub fn push_field(&mut self, name: &[u8], value: &[u8]) -> Field {
        let field = self.bytes.append_field(name, value);
        self.fields.push(field);
        field
    }

    /// Whether `other` is the same request: the same method, target, host and fields in order
    /// (names compared case-insensitively), body length and flags, wherever each keeps its bytes
    /// (what the fuzz targets compare the two codecs' heads by). Whether the fields are HTTP/1
    /// lines is not compared.
    pub fn same_request(&self, other: &RequestHead) -> bool {
        let same_fields = self.fields.len() == other.fields.len()
            && self
                .pairs()
                .zip(other.pairs())
                .all(|((n1, v1), (n2, v2))| n1.eq_ignore_ascii_case(n2) && v1 == v2);
        self.method() == other.method()
            && self.target() == other.target()
            && self.host() == other.host()
            && same_fields
            && self.body == other.body
            && self.protocol == other.protocol
            && self.keep_alive == other.keep_alive
            && self.expect_continue == other.expect_continue
            && self.upgrade == other.upgrade
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_read_in_place_reads_from_its_own_bytes_and_a_laid_out_one_the_same() {
        let text = b"xxGET /a HTTP/1.1\r\nHost: h\r\n\r\nrest of the buffer";
        let mut read = RequestHead {
            method: (0, 3),
            target: (4, 6),
            host: Some((23, 24)),
            ..RequestHead::default()
        };
        read.fields.push(Field {
            name: (17, 21),
            value: (23, 24),
        });
        read.attach(text.to_vec(), 2, 28);
        assert_eq!(read.bytes(), b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(
            (read.method(), read.target(), read.host()),
            (&b"GET"[..], &b"/a"[..], Some(&b"h"[..]))
        );
        assert_eq!(read.field(b"HOST"), Some(&b"h"[..]));

        let mut laid = RequestHead::with_storage(vec![1, 2, 3], Vec::new());
        laid.method = laid.append(b"GET");
        laid.target = laid.append(b"/a");
        laid.host = Some(laid.push_field(b"host", b"h").value);
        assert!(laid.same_request(&read));
        let copy = read.clone();
        assert_eq!(copy.bytes(), read.bytes());
        assert!(copy.same_request(&read));
        laid.push_field(b"x", b"1");
        assert!(!laid.same_request(&read));
        // A range outside the head reads as nothing.
        assert_eq!(laid.get((40, 50)), b"");
    }
}
