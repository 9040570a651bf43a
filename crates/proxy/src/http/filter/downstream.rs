//! The filters' place on the seam: [`FilteredDownstream`] wraps a request's downstream side, so
//! that everything the exchange (or a local answer) says to the client passes the response
//! phases, and request body bytes pass the request body phase before they go upstream. One
//! wrapper serves HTTP/1 and HTTP/2 on both sides. With no filters it only forwards.
//!
//! Response bodies arrive as data frames (the neutral message): a transformed body's data passes
//! the filters and goes on as data of unknown length, which each protocol frames its own way.

use std::borrow::Cow;
use std::fs::File;
use std::time::Duration;

use bytes::Bytes;
use rampart_model::error_pages::{ErrorPages, MediaWeights};
use rampart_model::filter::FilterChain;
use rampart_model::route::HeaderOps;
use rampart_model::Upstream;
use rampart_proto::h1::{Field, Framing};
use rampart_proto::message::{BodyLength, FieldsRef};

use super::run::Where;
use super::{AttemptTo, FilterRun, Rejection, RequestParts, ResponseParts, TrailerParts, UpstreamAttempt};
use crate::http::attempts::Attempt;
use crate::http::downstream::{copy_file, BodyFrame, BodyWatcher, Downstream, LocalAnswer};
use crate::http::error::HttpError;

/// A downstream side with a route's filters on it.
pub struct FilteredDownstream<'d, D> {
    inner: D,
    filtering: Option<Filtering<'d>>,
    /// Pages that replace the bodies of error answers of Rampart's own, and how the request's
    /// `Accept` weighs their media types.
    error_pages: Option<(&'d ErrorPages, Option<MediaWeights>)>,
}

struct Filtering<'d> {
    chain: &'d FilterChain,
    run: &'d mut FilterRun,
    at: Where<'d>,
    /// The client can take a body of another length (HTTP/1.1 chunked, or HTTP/2), and asked for
    /// one (not HEAD).
    transformable: bool,
    request: RequestBody,
    response: Option<Box<Transform>>,
    /// Attempts the per-attempt phases have seen.
    attempts: u8,
}

/// Where the request body's inspection stands.
struct RequestBody {
    /// Payload bytes the body phase saw before their frames went upstream (they came with the
    /// head): not shown again.
    ahead: u64,
    /// The body phase has seen the body's end.
    ended: bool,
    /// The request trailers phase ran: `Some(true)` when it edited the trailers, which are then
    /// in `trailers`.
    trailers_edited: Option<bool>,
    /// The trailers as the request trailers phase edited them: their bytes and ranges.
    trailers: (Vec<u8>, Vec<Field>),
}

/// A response body being transformed.
#[derive(Default)]
struct Transform {
    /// The data that passed the filters, to send.
    payload: Vec<u8>,
    ended: bool,
}

fn rejected(r: Rejection) -> HttpError {
    HttpError::Filtered {
        status: r.status,
        reason: r.reason,
    }
}

impl<'d, D: Downstream> FilteredDownstream<'d, D> {
    /// `inner` as is: no filters.
    pub fn plain(inner: D) -> Self {
        FilteredDownstream {
            inner,
            filtering: None,
            error_pages: None,
        }
    }

    /// With `pages` for its error answers.
    pub fn with_error_pages(mut self, pages: Option<(&'d ErrorPages, Option<MediaWeights>)>) -> Self {
        self.error_pages = pages;
        self
    }

    /// `inner` with `chain`'s filters on it (`run` has been through the request head phase).
    /// `framing` is the request body's; `transformable` whether the client can take a response
    /// body of another length.
    pub(crate) fn new(
        inner: D,
        chain: &'d FilterChain,
        run: &'d mut FilterRun,
        at: Where<'d>,
        framing: Framing,
        transformable: bool,
    ) -> Self {
        if !run.is_active() && chain.response_edits.is_empty() {
            return FilteredDownstream::plain(inner);
        }
        FilteredDownstream {
            inner,
            error_pages: None,
            filtering: Some(Filtering {
                chain,
                run,
                at,
                transformable,
                request: RequestBody {
                    ahead: 0,
                    ended: matches!(framing, Framing::None | Framing::Length(0)),
                    trailers_edited: None,
                    trailers: Default::default(),
                },
                response: None,
                attempts: 0,
            }),
        }
    }

    /// The downstream side inside.
    pub fn inner(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Walks the body data already received (what came with the head) before any upstream is
    /// involved, so that a body malformed or refused in one piece never reaches a backend: the
    /// inner side checks its framing, and the request body phase (when a filter asked for it)
    /// sees the data. One walk for both.
    pub fn check_received_body(&mut self) -> Result<(), HttpError> {
        let FilteredDownstream { inner, filtering, .. } = self;
        let Some(f) = filtering.as_mut().filter(|f| f.run.inspect_body) else {
            return inner.received_body(&mut |_, _| Ok(()));
        };
        if f.request.ended || f.request.ahead > 0 {
            return Ok(());
        }
        let (chain, at, run) = (f.chain, f.at, &mut *f.run);
        let (mut seen, mut ended) = (0, false);
        inner.received_body(&mut |data, end| {
            seen += data.len() as u64;
            ended |= end;
            run.request_body(chain, at, data, end).map_err(rejected)
        })?;
        f.request.ahead = seen;
        f.request.ended = ended;
        Ok(())
    }
}

impl Filtering<'_> {
    /// Runs the request body phase over a body frame on its way upstream (data the phase saw
    /// ahead is not shown again).
    fn inspect(&mut self, frame: &BodyFrame<'_>) -> Result<(), HttpError> {
        let (chain, at, run) = (self.chain, self.at, &mut *self.run);
        if let Some(data) = frame.data() {
            let skip = self.request.ahead.min(data.len() as u64) as usize;
            self.request.ahead -= skip as u64;
            if self.request.ended || skip == data.len() {
                return Ok(());
            }
            return run.request_body(chain, at, &data[skip..], false).map_err(rejected);
        }
        if self.request.ended {
            return Ok(());
        }
        self.request.ended = true;
        run.request_body(chain, at, &[], true).map_err(rejected)
    }

    /// Runs the response body phase over `data` (`end`: the body ends after it) and leaves what
    /// the filters made of it in the transform's `payload`; `false` when no transform is running
    /// (or its body ended already).
    fn transform(&mut self, data: &[u8], end: bool) -> Result<bool, HttpError> {
        let Some(t) = self.response.as_mut() else {
            return Ok(false);
        };
        t.payload.clear();
        if t.ended {
            return Ok(false);
        }
        t.payload.extend_from_slice(data);
        t.ended = end;
        self.run
            .response_body(self.chain, self.at, &mut t.payload, end)
            .map_err(rejected)?;
        Ok(true)
    }

    /// What the last [`Filtering::transform`] left to send.
    fn payload(&self) -> &[u8] {
        self.response.as_ref().map_or(&[][..], |t| &t.payload[..])
    }
}

/// Keeps the trailers `parts` says (edited) in `into`: their bytes and ranges.
fn keep_trailers(parts: &TrailerParts<'_>, into: &mut (Vec<u8>, Vec<Field>)) {
    let (buf, list) = into;
    buf.clear();
    list.clear();
    for (name, value) in parts.edited() {
        list.push(Field::append(buf, name, value));
    }
}

/// Whether a response with this status carries a body at all.
fn has_body(status: u16) -> bool {
    !((100..200).contains(&status) || status == 204 || status == 304)
}

impl<D: Downstream> Downstream for FilteredDownstream<'_, D> {
    type BodySource = D::BodySource;

    fn take_body_source(&mut self) -> Option<Self::BodySource> {
        if self.filtering.as_ref().is_some_and(|f| f.run.inspect_body) {
            // The body phase sees each frame on its way.
            return None;
        }
        self.inner.take_body_source()
    }

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        let FilteredDownstream { inner, filtering, .. } = self;
        let frame = inner.body_frame().await?;
        let Some(f) = filtering.as_mut().filter(|f| f.run.inspect_body) else {
            return Ok(frame);
        };
        f.inspect(&frame)?;
        let BodyFrame::End(trailers) = frame else {
            return Ok(frame);
        };
        // The request trailers phase, once; edited trailers are kept here.
        if f.request.trailers_edited.is_none() {
            let mut parts = TrailerParts::new(trailers);
            f.run.request_trailers(f.chain, f.at, &mut parts);
            f.request.trailers_edited = Some(!parts.edits.is_empty());
            if !parts.edits.is_empty() {
                keep_trailers(&parts, &mut f.request.trailers);
            }
        }
        match f.request.trailers_edited {
            Some(true) => {
                let (buf, list) = &f.request.trailers;
                Ok(BodyFrame::End(FieldsRef::Ranges { buf, list }))
            }
            _ => Ok(frame),
        }
    }

    fn received_body(&mut self, each: &mut BodyWatcher<'_>) -> Result<(), HttpError> {
        self.inner.received_body(each)
    }

    fn body_waiting(&self) -> bool {
        self.inner.body_waiting()
    }

    fn release_read_buffer(&mut self) {
        self.inner.release_read_buffer();
    }

    fn lend_buffer(&mut self) -> Option<Vec<u8>> {
        self.inner.lend_buffer()
    }

    fn return_buffer(&mut self, buf: Vec<u8>) -> Option<Vec<u8>> {
        self.inner.return_buffer(buf)
    }

    fn upstream_request<'v>(
        &mut self,
        upstream: &'v Upstream,
        target: usize,
        parts: &'v RequestParts<'_>,
    ) -> Option<RequestParts<'v>> {
        let (Some(f), Some(t)) = (
            self.filtering.as_mut().filter(|f| f.run.is_active()),
            upstream.targets.get(target),
        ) else {
            return None;
        };
        let to = AttemptTo {
            upstream: &upstream.name,
            target: &t.name,
            address: t.addr,
        };
        let mut attempt = parts.for_attempt(to);
        f.run.upstream_request(f.chain, f.at, &mut attempt);
        attempt.attempt_ops().is_some().then_some(attempt)
    }

    fn upstream_response(&mut self, upstream: &Upstream, attempt: &Attempt, fields: FieldsRef<'_>) {
        self.upstream_attempt(upstream, attempt, fields, false);
    }

    fn upstream_error(&mut self, upstream: &Upstream, attempt: &Attempt) {
        self.upstream_attempt(upstream, attempt, FieldsRef::EMPTY, true);
    }

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.inner.send_continue().await
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        self.inner.send_informational(head).await
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        limit: Duration,
    ) -> Result<(), HttpError> {
        let Some(f) = self.filtering.as_mut().filter(|f| f.run.is_active()) else {
            return self.inner.send_response_head(head, body, limit).await;
        };
        let transformable =
            f.transformable && !head.upgrade() && has_body(head.status) && head.length != BodyLength::None;
        let mut parts = head.for_filters(transformable);
        f.run.response_head(f.chain, f.at, &mut parts);
        if !parts.transform {
            return self.inner.send_response_head(&parts, body, limit).await;
        }
        // The body changes length: it goes on as data of unknown length, without the
        // upstream's `Content-Length`.
        parts.remove_header("content-length");
        parts.length = BodyLength::Unknown;
        parts.upgrade = false;
        f.response = Some(Box::default());
        f.transform(body, false)?;
        self.inner.send_response_head(&parts, f.payload(), limit).await
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        let Some(f) = self.filtering.as_mut().filter(|f| f.response.is_some()) else {
            return self.inner.send_data(data).await;
        };
        f.transform(data, false)?;
        self.inner.send_data(f.payload()).await
    }

    async fn send_bytes(&mut self, data: Bytes) -> Result<(), HttpError> {
        if self.filtering.as_ref().is_some_and(|f| f.response.is_some()) {
            return self.send_data(&data).await;
        }
        self.inner.send_bytes(data).await
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        self.finish_body(trailers).await
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        self.finish_body(FieldsRef::EMPTY).await
    }

    fn needs_end(&self) -> bool {
        self.filtering.as_ref().is_some_and(|f| f.run.is_active()) || self.inner.needs_end()
    }

    async fn send_file(&mut self, file: &File, offset: u64, len: u64, scratch: &mut [u8]) -> Result<(), HttpError> {
        if self.filtering.as_ref().is_some_and(|f| f.response.is_some()) {
            // A transformed body passes the filters as bytes.
            return copy_file(self, file, offset, len, scratch).await;
        }
        self.inner.send_file(file, offset, len, scratch).await
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        let page = self
            .error_pages
            .filter(|_| answer.error_page)
            .and_then(|(pages, weights)| pages.find(answer.status).map(|p| p.variant(weights)));
        let Some(page) = page else {
            return self.send_local_filtered(answer).await;
        };
        let mut headers: Vec<(&str, &str)> = answer
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("content-type"))
            .copied()
            .collect();
        headers.push(("content-type", &page.content_type));
        let replaced = LocalAnswer {
            headers: &headers,
            body: &page.body,
            ..*answer
        };
        self.send_local_filtered(&replaced).await
    }

    fn bytes_sent(&self) -> u64 {
        self.inner.bytes_sent()
    }

    fn body_bytes_sent(&self) -> u64 {
        self.inner.body_bytes_sent()
    }

    fn keeps_alive(&self) -> bool {
        self.inner.keeps_alive()
    }
}

impl<D: Downstream> FilteredDownstream<'_, D> {
    /// The filters' upstream-response (or, `failed`, upstream-error) phase for `attempt`.
    fn upstream_attempt(&mut self, upstream: &Upstream, attempt: &Attempt, fields: FieldsRef<'_>, failed: bool) {
        let (Some(f), Some(t)) = (
            self.filtering.as_mut().filter(|f| f.run.is_active()),
            upstream.targets.get(attempt.target),
        ) else {
            return;
        };
        let view = UpstreamAttempt {
            upstream: &upstream.name,
            target: &t.name,
            addr: t.addr,
            number: f.attempts.saturating_add(1),
            attempt,
            fields,
        };
        f.attempts = view.number;
        f.run.upstream_attempt(f.chain, f.at, &view, failed);
    }

    /// Ends the response body: the rest of a transformed body, then the trailers after the
    /// response trailers phase (`trailers` empty: none came).
    async fn finish_body(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        let Some(f) = self.filtering.as_mut().filter(|f| f.run.is_active()) else {
            return match trailers.is_empty() {
                true => self.inner.end_body().await,
                false => self.inner.send_trailers(trailers).await,
            };
        };
        if f.transform(&[], true)? {
            self.inner.send_data(f.payload()).await?;
        }
        let mut parts = TrailerParts::new(trailers);
        f.run.response_trailers(f.chain, f.at, &mut parts);
        let edited;
        let trailers = match parts.edits.is_empty() {
            true => trailers,
            false => {
                edited = parts.edited();
                FieldsRef::Pairs(&edited)
            }
        };
        match trailers.is_empty() {
            true => self.inner.end_body().await,
            false => self.inner.send_trailers(trailers).await,
        }
    }

    /// An answer of Rampart's own through the filters' response-head phase.
    async fn send_local_filtered(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        let Some(f) = self.filtering.as_mut() else {
            return self.inner.send_local(answer).await;
        };
        let mut parts = ResponseParts::local(
            answer.status,
            answer.body.len(),
            answer.headers,
            Cow::Borrowed(f.chain.response_edits.for_status(answer.status)),
        );
        if f.run.is_active() {
            f.run.response_head(f.chain, f.at, &mut parts);
        }
        let edits: Cow<'_, HeaderOps> = parts.edits;
        if edits.is_empty() {
            return self.inner.send_local(answer).await;
        }
        let headers = edited_headers(answer.headers, &edits);
        let edited = LocalAnswer {
            headers: &headers,
            ..*answer
        };
        self.inner.send_local(&edited).await
    }
}

/// An answer's header fields after `edits`.
fn edited_headers<'h>(headers: &[(&'h str, &'h str)], edits: &'h HeaderOps) -> Vec<(&'h str, &'h str)> {
    let mut out: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(name, _)| !edits.drops(name.as_bytes()))
        .copied()
        .collect();
    out.extend(
        edits
            .set
            .iter()
            .chain(&edits.add)
            .map(|(n, v)| (n.as_str(), v.as_str())),
    );
    out
}
