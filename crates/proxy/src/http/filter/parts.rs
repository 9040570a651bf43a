//! The messages as filters see them, protocol-neutral: a request head's edit view ([`RequestParts`]), a
//! response head ([`ResponseParts`]) and a response's trailers ([`TrailerParts`]). Reads see the
//! message as it arrived; edits are recorded and applied when the head is written, so a filter's reads never
//! depend on which filter edited before it. Header names are matched case-insensitively.

use std::borrow::Cow;

use rampart_model::route::HeaderOps;
use rampart_proto::message::{BodyLength, FieldsRef};

pub use crate::http::head_out::{AttemptTo, RequestParts};

/// Where a response head's fields are.
enum Fields<'a> {
    /// An upstream's head, as the neutral message holds it (HTTP/1 byte ranges, HTTP/2 fields).
    Upstream(FieldsRef<'a>),
    /// An answer of Rampart's own.
    Local(&'a [(&'a str, &'a str)]),
}

/// A response head on its way to the client.
pub struct ResponseParts<'a> {
    pub status: u16,
    /// What is known of its body's length as it arrives.
    pub length: BodyLength,
    /// An answer of Rampart's own (an error, a `respond` route, a filter's answer).
    pub local: bool,
    fields: Fields<'a>,
    /// Header edits of the response sent to the client.
    pub edits: Cow<'a, HeaderOps>,
    pub(super) transform: bool,
    /// Whether the body can be transformed (see [`ResponseParts::transform_body`]).
    can_transform: bool,
}

impl<'a> ResponseParts<'a> {
    pub(crate) fn upstream(
        status: u16,
        length: BodyLength,
        fields: FieldsRef<'a>,
        edits: Cow<'a, HeaderOps>,
        can_transform: bool,
    ) -> Self {
        ResponseParts {
            status,
            length,
            local: false,
            fields: Fields::Upstream(fields),
            edits,
            transform: false,
            can_transform,
        }
    }

    pub(crate) fn local(
        status: u16,
        body_len: usize,
        headers: &'a [(&'a str, &'a str)],
        edits: Cow<'a, HeaderOps>,
    ) -> Self {
        ResponseParts {
            status,
            length: BodyLength::Exact(body_len as u64),
            local: true,
            fields: Fields::Local(headers),
            edits,
            transform: false,
            can_transform: false,
        }
    }

    /// The first value of header `name` as the response has it (before edits).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Upstream(fields) => fields.get(name.as_bytes()),
            Fields::Local(headers) => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes()),
        }
    }

    /// Every header field as the response has it (before edits): `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let (parsed, local) = match self.fields {
            Fields::Upstream(fields) => (Some(fields), None),
            Fields::Local(headers) => (None, Some(headers)),
        };
        let parsed = parsed.into_iter().flat_map(|fields| fields.iter());
        let local = local
            .into_iter()
            .flat_map(|headers| headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        parsed.chain(local)
    }

    /// Replaces every field `name` of the response with one `value`.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().set(name, value);
    }

    /// Adds a field to the response.
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.edits.to_mut().add(name, value);
    }

    /// Removes every field `name` from the response.
    pub fn remove_header(&mut self, name: &str) {
        self.edits.to_mut().remove(name);
    }

    /// Asks for the response body phase, in which filters may replace the body's bytes. Returns
    /// false (and changes nothing) when this response's body cannot be transformed: it has none
    /// (HEAD, 1xx, 204, 304), its length is set by the upstream's close, the client speaks
    /// HTTP/1.0 (which cannot take the chunked framing a transformed body needs), or it is an
    /// answer of Rampart's own. When it returns true, the response goes out chunked (or as
    /// HTTP/2 DATA) and its `Content-Length` is dropped.
    pub fn transform_body(&mut self) -> bool {
        if self.can_transform {
            self.transform = true;
        }
        self.can_transform
    }

    /// Whether [`ResponseParts::transform_body`] would succeed.
    pub fn body_transformable(&self) -> bool {
        self.can_transform
    }
}

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
