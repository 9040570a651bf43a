//! What the request path decides about a request before it acts on it: how the answer is to be
//! delivered ([`Delivery`]), what to do ([`Action`]), and the view of the head both are made
//! from ([`HeadView`]).

use std::borrow::Cow;

use rampart_model::error_pages::{ErrorPages, MediaWeights};
use rampart_model::filter::FilterChain;
use rampart_model::route::HeaderOps;
use rampart_proto::h1::{Field, Framing, RequestHead};

use crate::http::exchange::ProxyRequest;
use crate::http::filter::{Answer, Where};
use crate::http::head_out::FieldsHead;
use crate::http::static_files;
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

/// A request head as the request path reads it: the head, and the bytes and field list its
/// ranges point into.
#[derive(Clone, Copy)]
pub(super) struct HeadView<'b> {
    pub(super) head: &'b RequestHead,
    pub(super) buf: &'b [u8],
    pub(super) fields: &'b [Field],
}

impl<'b> HeadView<'b> {
    pub(super) fn slice(&self, range: (u32, u32)) -> &'b [u8] {
        &self.buf[range.0 as usize..range.1 as usize]
    }
}

/// What a request comes to once routed and past its filters' head phase. Nothing in it borrows
/// the request's head: the head's bytes can be let go before it is carried out.
pub(super) enum Action<'s> {
    /// An answer of Rampart's own: 404, a filter's answer, `respond`, `redirect`.
    Local(OwnAnswer<'s>),
    /// The `static` action, its answer prepared in `out` (the head) and `fields`.
    Static {
        prepared: static_files::Prepared,
        out: Vec<u8>,
        fields: Vec<Field>,
        edits: &'s HeaderOps,
    },
    /// An exchange with an upstream, its head written (as text when `text`, laid out as fields
    /// in `laid`).
    Proxy {
        req: ProxyRequest<'s>,
        text: bool,
        laid: Option<LaidOut>,
    },
}

/// An answer of Rampart's own, before it is said.
pub(super) struct OwnAnswer<'s> {
    pub(super) status: u16,
    pub(super) headers: Vec<(Cow<'s, str>, Cow<'s, str>)>,
    pub(super) body: Cow<'s, [u8]>,
    /// An error whose body a configured error page replaces.
    pub(super) error_page: bool,
}

impl OwnAnswer<'_> {
    pub(super) fn not_found() -> Self {
        OwnAnswer {
            status: 404,
            headers: Vec::new(),
            body: Cow::Borrowed(b"404 Not Found\n"),
            error_page: true,
        }
    }

    /// A filter's answer (an error page may replace an error's body).
    pub(super) fn filters(answer: Answer) -> Self {
        OwnAnswer {
            status: answer.status,
            headers: answer.headers.into_iter().map(|(n, v)| (n, Cow::Owned(v))).collect(),
            body: answer.body,
            error_page: answer.status >= 400,
        }
    }
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
