//! The response head at the seam between the request path and a protocol's side of it: the
//! protocol-neutral head ([`rampart_proto::message`]) with the header edits the route and its
//! filters want applied when it is written.

use std::borrow::Cow;

use rampart_model::route::HeaderOps;
use rampart_proto::message::{BodyLength, FieldsRef};

/// A response head on its way to the client, protocol-neutral: the upstream's status and fields
/// (borrowed where they are: HTTP/1 byte ranges, an HTTP/2 `HeaderMap`), what is known of the
/// body's length, and header edits (the route's, borrowed until a filter changes them).
pub struct ResponseHeader<'a> {
    pub status: u16,
    /// The reason phrase an HTTP/1 upstream sent (empty otherwise): an HTTP/1 detail, written
    /// back to an HTTP/1 client and nowhere else.
    pub reason: &'a [u8],
    pub fields: FieldsRef<'a>,
    /// The body's length; [`BodyLength::None`] when the response has no body at all.
    pub length: BodyLength,
    pub edits: Cow<'a, HeaderOps>,
    /// A 101 that turns the connection into a tunnel.
    pub upgrade: bool,
}

impl ResponseHeader<'_> {
    /// The header edits, to change: the route's are copied on the first change.
    pub fn edits_mut(&mut self) -> &mut HeaderOps {
        self.edits.to_mut()
    }
}
