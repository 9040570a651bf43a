//! The owned response head: the one type an upstream's response (and any response Rampart keeps)
//! becomes. Its fields live where they can be owned without another copy: the bytes of an HTTP/1
//! head (copied out of the connection's read buffer, which the body goes on through, or handed
//! over whole when nothing follows the head) with ranges into them, or the field section
//! Rampart's HPACK decoder wrote an HTTP/2 head into, moved in as it is
//! ([`ResponseHead::laid_out`]). A reason phrase, the version and the framing are the HTTP/1
//! codec's ([`crate::h1::Parsed`]).

use super::head_bytes::HeadBytes;
use super::{BodyLength, FieldsRef, Span};
use crate::h1::Field;

/// A response head that owns its fields (see the module's introduction).
#[derive(Debug, Default, Clone)]
pub struct ResponseHead {
    pub status: u16,
    /// What is known of the body's length; [`BodyLength::None`] when the response has none.
    pub length: BodyLength,
    /// A 101 that turns the connection into a tunnel.
    pub upgrade: bool,
    /// Its bytes (an HTTP/1 head's sit in the read buffer it came in).
    bytes: HeadBytes,
    /// The fields as ranges into the bytes.
    pub fields: Vec<Field>,
    /// The fields are names and values only, no HTTP/1 lines ([`ResponseHead::laid_out`]).
    packed: bool,
}

impl ResponseHead {
    /// An empty head that lays its fields out in `bytes` and `fields` (storage from a pool; both
    /// are cleared).
    pub fn with_storage(bytes: Vec<u8>, mut fields: Vec<Field>) -> Self {
        fields.clear();
        ResponseHead {
            bytes: HeadBytes::empty(bytes),
            fields,
            ..ResponseHead::default()
        }
    }

    /// A head laid out already: `fields` are ranges into the whole of `bytes` (an HTTP/2 peer's
    /// field section as the HPACK decoder wrote it).
    pub fn laid_out(status: u16, bytes: Vec<u8>, fields: Vec<Field>, length: BodyLength) -> Self {
        ResponseHead {
            status,
            length,
            bytes: HeadBytes::whole(bytes),
            fields,
            packed: true,
            ..ResponseHead::default()
        }
    }

    /// Takes `bytes` as the head's own: the buffer the HTTP/1 codec parsed it from, in which the
    /// head is `len` bytes long from `at` (the ranges the codec set count from there).
    #[inline]
    pub fn attach(&mut self, bytes: Vec<u8>, at: usize, len: usize) {
        self.bytes = HeadBytes::within(bytes, at, len);
    }

    /// The bytes behind the head in the buffer it was given ([`ResponseHead::attach`]), up to
    /// `upto` (where that buffer's bytes end): a body's first bytes, read with the head.
    #[inline]
    pub fn behind(&self, upto: usize) -> &[u8] {
        self.bytes.behind(upto)
    }

    /// Takes the head's bytes away (it reads as having none until it is given others).
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes).into_vec()
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

    /// The fields, as the neutral message reads them.
    #[inline]
    pub fn fields_ref(&self) -> FieldsRef<'_> {
        match self.packed {
            true => FieldsRef::Packed {
                buf: self.bytes(),
                list: &self.fields,
            },
            false => FieldsRef::Ranges {
                buf: self.bytes(),
                list: &self.fields,
            },
        }
    }

    /// The first value of field `name` (matched case-insensitively).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields_ref().get(name)
    }

    /// Appends a field (its name, then its value) and lists it (a head being laid out).
    pub fn push_field(&mut self, name: &[u8], value: &[u8]) {
        let field = self.bytes.append_field(name, value);
        self.fields.push(field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_its_fields_from_its_bytes_laid_out_or_decoded() {
        let mut laid = ResponseHead::with_storage(vec![9; 4], Vec::new());
        laid.status = 200;
        laid.push_field(b"Content-Type", b"text/plain");
        laid.push_field(b"x-a", b"1");
        assert_eq!(laid.field(b"content-type"), Some(&b"text/plain"[..]));
        let pairs: Vec<_> = laid.fields_ref().iter().collect();
        assert_eq!(pairs, [(&b"Content-Type"[..], &b"text/plain"[..]), (b"x-a", b"1")]);
        let copy = laid.clone();
        assert_eq!(copy.fields_ref().iter().count(), 2);

        // An HTTP/2 field section as the HPACK decoder wrote it: names and values only.
        let decoded = ResponseHead::laid_out(
            204,
            b"x-a1".to_vec(),
            vec![Field {
                name: (0, 3),
                value: (3, 4),
            }],
            BodyLength::None,
        );
        assert_eq!(decoded.field(b"X-A"), Some(&b"1"[..]));
        assert!(matches!(decoded.fields_ref(), FieldsRef::Packed { .. }));
    }
}
