//! The upstream-request phase's part of the request head's edit view: the attempt it is for
//! ([`AttemptTo`]), the fields it may not edit, and the view it edits
//! ([`RequestParts::for_attempt`], its edits kept apart and applied to the head as written).

use std::borrow::Cow;
use std::net::SocketAddr;

use super::request::{sent_fields, RequestParts};

/// The upstream and target an attempt goes to, as the upstream-request phase sees them.
#[derive(Debug, Clone, Copy)]
pub struct AttemptTo<'a> {
    /// The upstream's name.
    pub upstream: &'a str,
    /// The chosen target's name (as configured) and address.
    pub target: &'a str,
    pub address: SocketAddr,
}

/// Fields a filter cannot edit in the upstream-request phase: they frame the message or belong
/// to the connection.
const PROTECTED: &[&str] = &[
    "connection",
    "content-length",
    "expect",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` is a field name (a token).
pub(crate) fn is_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` may be a field's value: no control byte but tab.
pub(crate) fn is_field_value(value: &[u8]) -> bool {
    value.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

pub(crate) fn editable(name: &str) -> bool {
    is_token(name.as_bytes()) && !PROTECTED.iter().any(|p| p.eq_ignore_ascii_case(name))
}

pub(crate) fn valid_value(value: &str) -> bool {
    is_field_value(value.as_bytes())
}

impl<'a> RequestParts<'a> {
    /// The view the upstream-request phase of one attempt edits: this one, to `to`, with no
    /// attempt edits yet (a retry starts again from the head as it was).
    pub(crate) fn for_attempt<'v>(&'v self, to: AttemptTo<'v>) -> RequestParts<'v> {
        RequestParts {
            target: Cow::Borrowed(&self.target),
            edits: Cow::Borrowed(&self.edits),
            attempt: Some(to),
            attempt_edits: None,
            ..*self
        }
    }

    /// Every header field of the head as written for the upstream (the client's fields that
    /// cross, the forwarded headers, the request-head phase's edits, and in the upstream-request
    /// phase the edits made so far), in order.
    pub fn sent_headers(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        sent_fields(self, |name, value| all.push((name.to_vec(), value.to_vec())));
        all
    }

    /// The first value of header `name` in the head as written for the upstream (see
    /// [`RequestParts::sent_headers`]).
    pub fn sent_header(&self, name: &str) -> Option<Vec<u8>> {
        self.sent_headers()
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }
}
