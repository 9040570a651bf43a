//! The neutral message at the seam between the request path and a protocol's side of it: the
//! response head (the protocol-neutral head of [`rampart_proto::message`] with the header edits
//! the route and its filters want applied when it is written), and a request body's frames.

use std::borrow::Cow;

use bytes::Bytes;
use rampart_model::route::HeaderOps;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::error::HttpError;

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

/// A piece of a request body as it crosses the seam.
#[derive(Debug, Clone, Copy)]
pub enum BodyFrame<'a> {
    /// Payload bytes.
    Data(&'a [u8]),
    /// Payload bytes that are shared already (an HTTP/2 client's DATA): an HTTP/2 upstream sends
    /// them on without a copy.
    Shared(&'a Bytes),
    /// The body is over; its trailer fields (empty when none came).
    End(FieldsRef<'a>),
}

impl<'a> BodyFrame<'a> {
    /// The payload bytes of a data frame (`None` at the end).
    pub fn data(&self) -> Option<&'a [u8]> {
        match *self {
            BodyFrame::Data(data) => Some(data),
            BodyFrame::Shared(bytes) => Some(bytes),
            BodyFrame::End(_) => None,
        }
    }
}

/// What `Downstream::received_body` shows body data to (`end`: the body ends with it); an
/// error refuses the body.
pub type BodyWatcher<'a> = dyn FnMut(&[u8], bool) -> Result<(), HttpError> + 'a;
