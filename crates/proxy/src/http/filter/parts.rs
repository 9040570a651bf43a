//! The messages as filters see them, protocol-neutral: a request head's edit view ([`RequestParts`]), a
//! response head ([`ResponseParts`]) and a response's trailers ([`TrailerParts`]). Reads see the
//! message as it arrived; edits are recorded and applied when the head is written, so a filter's reads never
//! depend on which filter edited before it. Header names are matched case-insensitively.

use rampart_model::route::HeaderOps;
use rampart_proto::message::FieldsRef;

pub use crate::http::head_out::{AttemptTo, RequestParts, ResponseParts};

/// A message's trailer fields on their way on (an HTTP/2 or gRPC message's, a chunked HTTP/1
/// body's; none at all for most messages), as the request and response trailers phases see
/// them. Reads see them as they arrived; edits apply when they are sent. A peer that cannot take
/// trailers (a body of known length on HTTP/1, an HTTP/1.0 client) gets the body's end without
/// them.
pub struct TrailerParts<'a> {
    fields: FieldsRef<'a>,
    /// Edits of the trailers sent to the client.
    pub edits: HeaderOps,
}

impl<'a> TrailerParts<'a> {
    pub(crate) fn new(fields: FieldsRef<'a>) -> Self {
        TrailerParts {
            fields,
            edits: HeaderOps::default(),
        }
    }

    /// The first value of trailer `name` as it arrived (`grpc-status`, say).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.fields.get(name.as_bytes())
    }

    /// Every trailer field as it arrived: `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.fields.iter()
    }

    /// Replaces every trailer `name` with one `value` (adds it when there was none).
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.edits.set(name, value);
    }

    /// Adds a trailer field.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.edits.add(name, value);
    }

    /// Removes every trailer `name`.
    pub fn remove_header(&mut self, name: &str) {
        self.edits.remove(name);
    }

    /// The trailers after the edits: those that arrived and were not removed or replaced, then
    /// the edits' own.
    pub(crate) fn edited(&self) -> Vec<(&[u8], &[u8])> {
        let kept = self.fields.iter().filter(|(name, _)| !self.edits.drops(name));
        let added = self.edits.set.iter().chain(&self.edits.add);
        kept.chain(added.map(|(n, v)| (n.as_bytes(), v.as_bytes()))).collect()
    }
}
