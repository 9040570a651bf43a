//! The neutral message at the seam between the request path and a protocol's side of it, beside
//! the heads' edit views (`head_out::RequestParts`, `head_out::ResponseParts`): a request body's
//! frames.

use bytes::Bytes;
use rampart_proto::message::FieldsRef;

use super::error::HttpError;

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
