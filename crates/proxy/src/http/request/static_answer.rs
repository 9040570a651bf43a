//! The `static` action's answer on a connection (HTTP/1 or one HTTP/2 stream): a prepared
//! response head and its body through the route's filters (the body of a larger file sent from
//! the file itself), or an error or redirect as an answer of Rampart's own.

use std::borrow::Cow;

use rampart_model::filter::ResponseEdits;
use rampart_proto::h1::Field;
use rampart_proto::message::{BodyLength, FieldsRef};

use super::action::Delivery;
use super::RequestPath;
use crate::http::client_side::ClientSide;
use crate::http::context::RequestContext;
use crate::http::downstream::{Downstream, LocalAnswer};
use crate::http::filter::{FilterRun, RequestParts};
use crate::http::head_out::ResponseParts;
use crate::http::local::error_body;
use crate::http::static_files::conditional::HeaderSource;
use crate::http::static_files::send::SEND_TIMEOUT;
use crate::http::static_files::{Body, Prepared};

impl HeaderSource for RequestParts<'_> {
    fn values<'s>(&'s self, name: &'static str) -> impl Iterator<Item = &'s [u8]> {
        self.header_values(name)
    }
}

impl<T: ClientSide> RequestPath<'_, T> {
    /// Sends what [`crate::http::static_files::prepare`] made of a request: `out` holds the
    /// prepared head (and a small body behind it), `fields` its fields; `edits` are the route's
    /// response header edits.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn answer_static(
        &mut self,
        rctx: &mut RequestContext,
        run: &mut FilterRun,
        delivery: Delivery<'_>,
        prepared: Prepared,
        out: &[u8],
        fields: &[Field],
        edits: &ResponseEdits,
    ) {
        let (status, head, body) = match prepared {
            Prepared::Local { status, field } => {
                let text = match (status, &field) {
                    (301, Some((_, to))) => format!("{status} redirect to {to}\n"),
                    _ => error_body(status),
                };
                let headers: Vec<(&str, &str)> = field.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let answer = LocalAnswer {
                    status,
                    headers: &headers,
                    body: text.as_bytes(),
                    close: !delivery.keep,
                    // A file not found (404), a path refused (400), ... get the error pages.
                    error_page: status >= 400,
                };
                return self.answer_local(rctx, run, delivery, &answer).await;
            }
            Prepared::Response { status, head, body } => (status, head, body),
        };
        let state = &self.ctx.http;
        let mut down = self.filtered(run, delivery);
        let buf = &out[..head.len];
        let header = ResponseParts::written(
            status,
            BodyLength::of_framing(head.framing),
            FieldsRef::Ranges { buf, list: fields },
            Cow::Borrowed(edits.for_status(status)),
        );
        let first = match body {
            Body::Buffered => &out[head.len..],
            _ => &[][..],
        };
        let mut sent = down.send_response_head(&header, first, SEND_TIMEOUT).await;
        if let (Ok(()), Body::File { file, offset, len }) = (&sent, &body) {
            let mut scratch = state.take_read_buffer();
            sent = down.send_file(file, *offset, *len, &mut scratch).await;
            state.give_read_buffer(scratch);
        }
        if sent.is_ok() && down.needs_end() {
            sent = down.end_body().await;
        }
        rctx.status = status;
        rctx.bytes_out = down.bytes_sent();
        rctx.keep_client = down.keeps_alive();
        if let Err(e) = sent {
            rctx.fail(e);
        }
    }
}
