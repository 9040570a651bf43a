//! The pieces of a request's answer that its handling and its proxy action share: how the answer
//! is to be delivered ([`Delivery`]) and the request head laid out for an HTTP/2 upstream
//! ([`LaidOut`]).

use rampart_model::error_pages::{ErrorPages, MediaWeights};
use rampart_model::filter::FilterChain;
use rampart_proto::h1::{Field, Framing};

use crate::http::filter::Where;
use crate::http::head_out::FieldsHead;
use crate::worker::WorkerContext;

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

/// A request head laid out as fields (for an HTTP/2 upstream): a buffer and a field list from
/// the worker's pools, and the ranges of the method and target.
pub(super) struct LaidOut {
    pub(super) buf: Vec<u8>,
    pub(super) fields: Vec<Field>,
    pub(super) method: (u32, u32),
    pub(super) target: (u32, u32),
}

impl LaidOut {
    pub(super) fn head(&self) -> FieldsHead<'_> {
        FieldsHead {
            buf: &self.buf,
            method: self.method,
            target: self.target,
            fields: &self.fields,
        }
    }

    /// Gives the buffers back.
    pub(super) fn release(self, ctx: &WorkerContext) {
        ctx.http.give_write_buffer(self.buf);
        ctx.http.give_field_list(self.fields);
    }
}
