//! The client side of a request that may fill the cache: everything goes on to the client's own
//! side as it comes (the first client is served while the response is kept), and the response is
//! kept beside it: its status and fields (for invalidation too), and, while it may still be
//! stored, its body up to the route's largest object. With `stale-if-error` in force, an error
//! (a 5xx from the upstream, or one of Rampart's own) is held back instead, so a stale response
//! can answer in its place.

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use rampart_proto::h1::Field;
use rampart_proto::message::{BodyLength, FieldsRef};

use rampart_cache::coalesce::Leader;
use rampart_cache::growing::Growing;
use rampart_cache::policy::control::Directives;
use rampart_model::cache::RouteCache;
use rampart_proto::message::RequestHead;

use crate::http::attempts::Attempt;
use crate::http::downstream::{BodyFrame, BodyWatcher, Downstream, LocalAnswer};
use crate::http::error::HttpError;
use crate::http::head_out::{RequestParts, ResponseParts};

/// Bodies of this many octets or more are shared with coalesced requests from their first piece.
const SHARED_AT_ONCE: u64 = 64 << 10;

/// What the recorder kept of the response.
#[derive(Default)]
pub(super) struct Recording {
    /// The body is still kept: the response may be stored once it has all come.
    pub keeping: bool,
    /// The most body octets kept.
    pub max: usize,
    pub status: u16,
    /// The response's fields, as ranges into `field_bytes` (one buffer, not one per field).
    field_bytes: Vec<u8>,
    field_list: Vec<Field>,
    pub length: BodyLength,
    pub body: BytesMut,
    /// The body ended (its end or its trailers came).
    pub ended: bool,
    /// When the response head came.
    pub response_time: Option<SystemTime>,
    /// Errors are held back (`stale-if-error`): the status of the one held, if any.
    pub hold_errors: bool,
    pub held: Option<u16>,
    /// The `Cache-Status` the response goes out with (RFC 9211; empty: none).
    pub note: &'static str,
    /// The request is the cache's conditional one: a 304 is the cache's, held back.
    pub validating: bool,
    pub not_modified: bool,
    /// The response as it arrives, shared with the coalesced requests that wait for it.
    pub shared: Option<Arc<Growing>>,
}

impl Recording {
    pub fn new(keeping: bool, max: usize, hold_errors: bool) -> Self {
        Recording {
            keeping,
            max,
            hold_errors,
            ..Default::default()
        }
    }

    /// The whole body was kept: it may be stored.
    pub fn complete(&self) -> bool {
        self.keeping
            && !self.holding()
            && (self.ended
                || match self.length {
                    BodyLength::None => true,
                    BodyLength::Exact(n) => self.body.len() as u64 == n,
                    BodyLength::Unknown => false,
                })
    }

    /// The response's fields, in order, as packed.
    pub fn fields_ref(&self) -> FieldsRef<'_> {
        FieldsRef::Packed {
            buf: &self.field_bytes,
            list: &self.field_list,
        }
    }

    /// The response's fields, packed, taken out (the recording is done with them).
    pub fn take_fields(&mut self) -> (Vec<u8>, Vec<Field>) {
        (
            std::mem::take(&mut self.field_bytes),
            std::mem::take(&mut self.field_list),
        )
    }

    /// The response's fields, in order.
    pub fn fields(&self) -> Vec<(&[u8], &[u8])> {
        let bytes = &self.field_bytes;
        self.field_list
            .iter()
            .map(|f| (f.name(bytes), f.value(bytes)))
            .collect()
    }

    /// Nothing more goes to the client: an error or a 304 was held back.
    fn holding(&self) -> bool {
        self.held.is_some() || self.not_modified
    }

    fn keep(&mut self, data: &[u8]) {
        if !self.keeping {
            return;
        }
        if self.body.len() + data.len() > self.max {
            self.keeping = false;
            self.body = BytesMut::new();
            return;
        }
        self.body.extend_from_slice(data);
    }
}

/// Where a response kept whole is stored, and what the rules judge it by.
pub(super) struct Commit<'c> {
    pub cache: &'c RouteCache,
    pub key: Arc<[u8]>,
    pub head: &'c RequestHead,
    pub request_cc: &'c Directives,
    pub request_time: SystemTime,
    /// This request leads the misses for its key: its response is shared with those that wait
    /// as it arrives, once some do.
    pub leader: Option<&'c Leader<Arc<[u8]>>>,
}

/// `inner` with the response kept in `rec` on its way, and stored by `commit` the moment it is
/// whole, before its last octets go to the client (so a request that follows finds it).
pub(super) struct Recorder<'a, 'c, D> {
    pub inner: &'a mut D,
    pub rec: Recording,
    pub commit: Option<Commit<'c>>,
}

impl<D> Recorder<'_, '_, D> {
    fn commit_if_whole(&mut self) {
        if self.rec.complete() {
            if let Some(commit) = self.commit.take() {
                super::store(commit, &mut self.rec);
            }
            if let Some(shared) = self.rec.shared.take() {
                shared.finish(true);
            }
        }
    }

    /// Keeps `data`, and shares it with the requests waiting for this one: the response (if it
    /// may be stored, and its length is known) is published with what has come so far, then
    /// each piece as it comes, once some wait, or from its first piece when it is large (a
    /// leader idle on its upstream could not publish for a waiter that came meanwhile, and a
    /// large body is where a waiter gains most from not waiting for the end).
    fn keep(&mut self, data: &[u8]) {
        let shared_before = self.rec.shared.is_some();
        self.rec.keep(data);
        if shared_before {
            if let Some(shared) = &self.rec.shared {
                shared.push(data);
            }
            return;
        }
        let Some(commit) = &self.commit else { return };
        let Some(leader) = commit.leader else { return };
        let BodyLength::Exact(length) = self.rec.length else {
            return;
        };
        let large = length >= SHARED_AT_ONCE;
        if !self.rec.keeping || self.rec.holding() || !(large || leader.wanted()) {
            return;
        }
        if let Some(head) = super::entry_for(commit, &mut self.rec, Bytes::new(), false) {
            let shared = Arc::new(Growing::new(Arc::new(head), length as usize, &self.rec.body));
            leader.publish(shared.clone());
            self.rec.shared = Some(shared);
        }
    }
}

impl<D: Downstream> Downstream for Recorder<'_, '_, D> {
    type BodySource = D::BodySource;

    fn take_body_source(&mut self) -> Option<Self::BodySource> {
        self.inner.take_body_source()
    }

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        self.inner.body_frame().await
    }

    fn received_body(&mut self, each: &mut BodyWatcher<'_>) -> Result<(), HttpError> {
        self.inner.received_body(each)
    }

    fn body_waiting(&self) -> bool {
        self.inner.body_waiting()
    }

    fn release_read_buffer(&mut self) {
        self.inner.release_read_buffer()
    }

    fn lend_buffer(&mut self) -> Option<Vec<u8>> {
        self.inner.lend_buffer()
    }

    fn return_buffer(&mut self, buf: Vec<u8>) -> Option<Vec<u8>> {
        self.inner.return_buffer(buf)
    }

    fn upstream_request<'v>(
        &mut self,
        upstream: &'v rampart_model::Upstream,
        target: usize,
        parts: &'v RequestParts<'_>,
    ) -> Option<RequestParts<'v>> {
        self.inner.upstream_request(upstream, target, parts)
    }

    fn upstream_response(&mut self, upstream: &rampart_model::Upstream, attempt: &Attempt, fields: FieldsRef<'_>) {
        self.inner.upstream_response(upstream, attempt, fields)
    }

    fn upstream_error(&mut self, upstream: &rampart_model::Upstream, attempt: &Attempt) {
        self.inner.upstream_error(upstream, attempt)
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
        let rec = &mut self.rec;
        rec.status = head.status;
        rec.length = head.length;
        rec.response_time = Some(SystemTime::now());
        rec.field_bytes.clear();
        rec.field_list.clear();
        // Sized once: no buffer grows field by field.
        let (count, octets) = head
            .fields()
            .iter()
            .fold((0, 0), |(n, o), (name, value)| (n + 1, o + name.len() + value.len()));
        rec.field_bytes.reserve(octets);
        rec.field_list.reserve(count);
        for (name, value) in head.fields().iter() {
            rec.field_list.push(Field::append(&mut rec.field_bytes, name, value));
        }
        if rec.hold_errors && head.status >= 500 {
            rec.held = Some(head.status);
            rec.keeping = false;
            return Ok(());
        }
        if rec.validating && head.status == 304 {
            rec.not_modified = true;
            rec.keeping = false;
            return Ok(());
        }
        if let BodyLength::Exact(n) = head.length {
            rec.keeping &= n <= rec.max as u64;
            if rec.keeping {
                // Sized once for the common case; a large body still grows as it comes, so a
                // length the upstream only claims reserves no more than 1 MiB.
                rec.body.reserve((n as usize).min(1 << 20));
            }
        }
        rec.keeping &= !head.upgrade();
        self.keep(body);
        self.commit_if_whole();
        let rec = &self.rec;
        if rec.note.is_empty() {
            return self.inner.send_response_head(head, body, limit).await;
        }
        let mut view = head.for_filters(head.body_transformable());
        view.add_header("cache-status", rec.note);
        self.inner.send_response_head(&view, body, limit).await
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        if self.rec.holding() {
            return Ok(());
        }
        self.keep(data);
        self.commit_if_whole();
        self.inner.send_data(data).await
    }

    async fn send_bytes(&mut self, data: Bytes) -> Result<(), HttpError> {
        if self.rec.holding() {
            return Ok(());
        }
        self.keep(&data);
        self.commit_if_whole();
        self.inner.send_bytes(data).await
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        if self.rec.holding() {
            return Ok(());
        }
        // Trailers are not stored: a response that has them is not either.
        self.rec.keeping &= trailers.is_empty();
        self.rec.ended = true;
        self.commit_if_whole();
        self.inner.send_trailers(trailers).await
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        if self.rec.holding() {
            return Ok(());
        }
        self.rec.ended = true;
        self.commit_if_whole();
        self.inner.end_body().await
    }

    fn needs_end(&self) -> bool {
        // The end is how a body of unknown length is known to be whole.
        self.rec.keeping || self.inner.needs_end()
    }

    async fn send_file(&mut self, file: &File, offset: u64, len: u64, scratch: &mut [u8]) -> Result<(), HttpError> {
        self.rec.keeping = false;
        self.inner.send_file(file, offset, len, scratch).await
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        self.rec.keeping = false;
        if self.rec.hold_errors && answer.status >= 500 {
            self.rec.held = Some(answer.status);
            return Ok(());
        }
        self.inner.send_local(answer).await
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
