//! The bytes an owned head keeps ([`HeadBytes`]): a buffer, and where in it the head's bytes are,
//! which its ranges count from. One piece of storage for both heads, so that a head read in place
//! (the HTTP/1 codec's, in the buffer it was read into) and one laid out field by field are read
//! the same way.

use super::Span;
use crate::h1::Field;

/// A head's bytes: `buf[at..end]`, with `at <= end <= buf.len()` kept by every constructor and
/// change (so reading them needs one check).
#[derive(Debug, Default)]
pub(crate) struct HeadBytes {
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

impl Clone for HeadBytes {
    /// A copy of the head's own bytes only (not the rest of a read buffer it sits in).
    fn clone(&self) -> Self {
        HeadBytes::whole(self.as_slice().to_vec())
    }
}

impl HeadBytes {
    /// None yet, laid out into `buf` (cleared) as they come.
    #[inline]
    pub(crate) fn empty(mut buf: Vec<u8>) -> Self {
        buf.clear();
        HeadBytes { buf, at: 0, end: 0 }
    }

    /// All of `buf`.
    #[inline]
    pub(crate) fn whole(buf: Vec<u8>) -> Self {
        HeadBytes {
            end: buf.len(),
            buf,
            at: 0,
        }
    }

    /// The `len` bytes from `at` of `buf` (a buffer a head was read in place into).
    #[inline]
    pub(crate) fn within(buf: Vec<u8>, at: usize, len: usize) -> Self {
        let end = (at + len).min(buf.len());
        HeadBytes {
            buf,
            at: at.min(end),
            end,
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[self.at..self.end]
    }

    /// The bytes of `span` (empty for a range outside the head).
    #[inline]
    pub(crate) fn get(&self, span: Span) -> &[u8] {
        let (start, end) = (self.at + span.0 as usize, self.at + span.1 as usize);
        match start <= end && end <= self.end {
            true => &self.buf[start..end],
            false => &[],
        }
    }

    /// The buffer's bytes behind the head, up to `upto`.
    #[inline]
    pub(crate) fn behind(&self, upto: usize) -> &[u8] {
        self.buf.get(self.end..upto).unwrap_or_default()
    }

    /// Appends `bytes` to the head's own; returns their range.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Span {
        self.buf.truncate(self.end);
        self.buf.extend_from_slice(bytes);
        let start = (self.end - self.at) as u32;
        self.end = self.buf.len();
        (start, (self.end - self.at) as u32)
    }

    /// Appends a field: its name, then its value.
    pub(crate) fn append_field(&mut self, name: &[u8], value: &[u8]) -> Field {
        Field {
            name: self.append(name),
            value: self.append(value),
        }
    }

    /// The buffer (for a pool).
    #[inline]
    pub(crate) fn into_vec(self) -> Vec<u8> {
        self.buf
    }
}
