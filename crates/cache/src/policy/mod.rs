//! RFC 9111's rules for a shared cache, as functions of heads and clocks (no I/O, no store):
//! - [`control`]: `Cache-Control` and the targeted fields of RFC 9213;
//! - [`freshness`]: a stored response's freshness lifetime and its age (sections 4.2.1 to 4.2.3);
//! - [`storable`]: whether a response may be stored, and which of its fields (sections 3, 3.1,
//!   3.5);
//! - [`reuse`]: whether a stored response answers a request (its `Vary`, freshness, the
//!   request's directives, RFC 5861's stale answers), the conditional request that validates
//!   it, the head a 304 updates, and what an unsafe request invalidates (sections 4 to 4.4).

pub mod control;
pub mod freshness;
pub mod reuse;
pub mod storable;

#[cfg(test)]
mod tests;

use rampart_proto::message::{FieldsRef, RequestHead, ResponseHead};

/// A message's header fields as the rules read them.
pub trait FieldSource {
    /// Every value of field `name` (given lowercase; matched without regard to case), one per
    /// field line, in order.
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a;

    /// The first value of field `name`.
    fn value_of<'a>(&'a self, name: &'a [u8]) -> Option<&'a [u8]> {
        self.each(name).next()
    }
}

impl FieldSource for [(&[u8], &[u8])] {
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

impl FieldSource for FieldsRef<'_> {
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

impl FieldSource for RequestHead {
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.pairs()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

impl FieldSource for ResponseHead {
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields_ref()
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// The elements of a comma-separated list field (every line of it), trimmed, empty ones left out.
pub fn list_items<'a>(fields: &'a (impl FieldSource + ?Sized), name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields
        .each(name)
        .flat_map(|line| line.split(|&b| b == b','))
        .map(trim)
        .filter(|item| !item.is_empty())
}

/// `b` without the spaces and tabs around it.
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t')).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// The tags a response names for bans: each comma-separated item of `Cache-Tag` and each
/// space-separated one of `Surrogate-Key` (the CDNs' two spellings), trimmed, empty ones left
/// out.
pub fn tags<'a>(response: &'a (impl FieldSource + ?Sized)) -> impl Iterator<Item = &'a [u8]> + 'a {
    let comma = response.each(b"cache-tag").flat_map(|v| v.split(|&b| b == b','));
    let space = response.each(b"surrogate-key").flat_map(|v| v.split(|&b| b == b' '));
    comma.chain(space).map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}
