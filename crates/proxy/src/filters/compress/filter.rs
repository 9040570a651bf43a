//! The `compress` filter's phases on [`CompressSettings`]:
//!
//! - **request head**: [`offer`] from the method, the HTTP version and `Accept-Encoding`, kept in
//!   the request's [`CompressRequest`] (a few bytes; nothing is allocated).
//! - **response head**: [`ResponseFacts`] from the response's fields as the client will get them
//!   (the upstream's fields after the header edits of the filters the response met before this
//!   one), then [`decide`]. A compressed response gets its [`HeaderEdits`], asks for the body
//!   phase and gets its [`Encoder`]; one left alone gets `Vary: Accept-Encoding` when another
//!   request could have got it compressed.
//! - **response body**: each run of payload bytes through [`Encoder::compress`], flushed, so a
//!   stream keeps flowing; [`Encoder::finish`] at the end, which frees the encoder.
//!
//! Rampart's own answers (errors, `respond`, `redirect`, filters' answers) are never compressed:
//! their bodies are short and the filter model does not transform them. Nor is a body delimited by
//! the upstream's close (it cannot be re-framed), and then no `Vary` is added either, as no request
//! would get that response compressed.

use rampart_model::filter::compress::{Algorithm, CompressSettings};
use rampart_model::route::HeaderOps;
use rampart_proto::message::Protocol;

use super::decision::{decide, offer, weakened_etag, Decision, EtagEdit, HeaderEdits, ResponseFacts, Skip, VaryEdit};
use super::encoder::Encoder;
use super::negotiate::AcceptEncoding;
use crate::http::filter::{FilterCx, HttpFilter, Rejection, RequestParts, ResponseParts, Verdict};

/// The access log's `error` when an encoder fails mid-body (the connection then closes, as the
/// head has gone out).
pub const COMPRESS_FAILED: &str = "compress_failed";

/// What the filter keeps about one request.
#[derive(Debug)]
pub struct CompressRequest {
    /// The coding this request would get, or why none (decided at its head).
    offer: Result<Algorithm, Skip>,
    /// The response body's encoder, from its head to its end.
    compressing: Option<Box<Compressing>>,
}

impl Default for CompressRequest {
    fn default() -> Self {
        CompressRequest {
            offer: Err(Skip::NotAccepted),
            compressing: None,
        }
    }
}

/// A response body being compressed.
#[derive(Debug)]
struct Compressing {
    encoder: Encoder,
    /// Where the compressed bytes of the next run are written; it and the body phase's buffer
    /// trade places on every call, so neither is allocated again.
    out: Vec<u8>,
}

impl HttpFilter for CompressSettings {
    type State = CompressRequest;
    type WorkerState = ();

    async fn request_head(
        &self,
        _: &mut FilterCx<'_>,
        state: &mut CompressRequest,
        req: &mut RequestParts<'_>,
    ) -> Verdict {
        let accept = AcceptEncoding::parse(req.header_values("accept-encoding"));
        let version = match req.protocol {
            Protocol::Http10 => http::Version::HTTP_10,
            Protocol::Http11 => http::Version::HTTP_11,
            Protocol::Http2 => http::Version::HTTP_2,
            Protocol::Http3 => http::Version::HTTP_3,
        };
        state.offer = offer(self, req.method, version, &accept);
        Verdict::Continue
    }

    fn response_head(&self, _: &mut FilterCx<'_>, state: &mut CompressRequest, resp: &mut ResponseParts<'_>) {
        if resp.local {
            return;
        }
        let decision = {
            let mut facts = ResponseFacts::new(resp.status);
            for (name, value) in fields_after_edits(resp) {
                facts.observe(name, value);
            }
            decide(self, state.offer, &facts)
        };
        let plan = match decision {
            Decision::Skip { vary, .. } => return add_vary(resp, vary),
            Decision::Compress(plan) => plan,
        };
        // The request would take it, but the body cannot be re-framed (it ends with the
        // upstream's close): no request gets this response compressed.
        if !resp.body_transformable() {
            return;
        }
        let Ok(encoder) = Encoder::new(plan.algorithm, self.tuning(plan.algorithm), plan.size_hint) else {
            // No memory for an encoder: this one goes out as it is.
            return add_vary(resp, plan.edits.vary);
        };
        resp.transform_body();
        apply(resp, &plan.edits);
        state.compressing = Some(Box::new(Compressing {
            encoder,
            out: Vec::new(),
        }));
    }

    fn response_body(
        &self,
        _: &mut FilterCx<'_>,
        state: &mut CompressRequest,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection> {
        let Some(compressing) = state.compressing.as_mut() else {
            return Ok(());
        };
        let Compressing { encoder, out } = &mut **compressing;
        out.clear();
        let mut result = encoder.compress(body, out);
        if end && result.is_ok() {
            result = encoder.finish(out);
        }
        // After a failure the encoder refuses every later call, so no byte of the rest of the
        // body goes out uncompressed under `Content-Encoding`.
        result.map_err(|_| Rejection {
            status: 500,
            reason: COMPRESS_FAILED,
        })?;
        std::mem::swap(body, out);
        if end {
            // The encoder's memory goes now, not when the request's log line is written.
            state.compressing = None;
        }
        Ok(())
    }
}

/// The response's header fields as the client will get them so far: the upstream's, less those
/// `edits` drop, then those `edits` set and add.
fn fields_after_edits<'r>(resp: &'r ResponseParts<'r>) -> impl Iterator<Item = (&'r [u8], &'r [u8])> {
    let edits: &'r HeaderOps = &resp.edits;
    let received = resp.headers().filter(move |(name, _)| !edits.drops(name));
    let edited = edits
        .set
        .iter()
        .chain(&edits.add)
        .map(|(name, value)| (name.as_bytes(), value.as_bytes()));
    received.chain(edited)
}

/// `Vary: Accept-Encoding` as a field of its own, which RFC 9110 5.3 makes the same as a list.
fn add_vary(resp: &mut ResponseParts<'_>, vary: VaryEdit) {
    match vary {
        VaryEdit::Keep => {}
        VaryEdit::AddAcceptEncoding => resp.add_header("vary", "Accept-Encoding"),
    }
}

/// The header edits of a compressed response.
fn apply(resp: &mut ResponseParts<'_>, edits: &HeaderEdits) {
    if edits.etag == EtagEdit::Weaken {
        let weak = fields_after_edits(resp)
            .find(|(name, _)| name.eq_ignore_ascii_case(b"etag"))
            .map(|(_, etag)| String::from_utf8(weakened_etag(etag)));
        match weak {
            Some(Ok(weak)) => resp.set_header("etag", &weak),
            // Bytes outside UTF-8 (obs-text) cannot be carried by an edit: dropped, as
            // a malformed one is.
            Some(Err(_)) => resp.remove_header("etag"),
            None => {}
        }
    } else if edits.etag == EtagEdit::Remove {
        resp.remove_header("etag");
    }
    for name in HeaderEdits::REMOVE {
        resp.remove_header(name);
    }
    resp.set_header("content-encoding", edits.content_encoding);
    add_vary(resp, edits.vary);
}

#[cfg(test)]
mod tests;
