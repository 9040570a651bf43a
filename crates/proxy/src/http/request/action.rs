//! The pieces of a request's answer that its handling and its proxy action share: how the answer
//! is to be delivered ([`Delivery`]) and how its body is framed ([`request_framing`]).

use rampart_model::error_pages::{ErrorPages, MediaWeights};
use rampart_model::filter::FilterChain;
use rampart_proto::h1::Framing;
use rampart_proto::message::BodyLength;

use crate::http::filter::Where;

/// How a request's answer is to be delivered: the route's filters, and what the client allows.
#[derive(Clone, Copy)]
pub(super) struct Delivery<'d> {
    /// The route's chain and where the request runs; `None` for a request no route took.
    pub(super) filters: Option<(&'d FilterChain, Where<'d>)>,
    pub(super) keep: bool,
    pub(super) http10: bool,
    pub(super) head_only: bool,
    pub(super) framing: Framing,
    /// The error pages for this request's answers of Rampart's own.
    pub(super) error_pages: Option<(&'d ErrorPages, Option<MediaWeights>)>,
}

/// How an HTTP/1 side frames a request body of length `body` (unknown: chunked).
pub(super) fn request_framing(body: BodyLength) -> Framing {
    match body {
        BodyLength::None => Framing::None,
        BodyLength::Exact(n) => Framing::Length(n),
        BodyLength::Unknown => Framing::Chunked,
    }
}
