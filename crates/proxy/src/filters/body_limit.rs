//! `body_limit` (a route's `max_body_size`): a declared `Content-Length` over the limit is
//! answered 413 at once; a body of unknown length (chunked, or HTTP/2 without content-length) is
//! counted as it streams and refused with 413 before the bytes that cross the limit go upstream.

use rampart_model::filter::BodyLimit;
use rampart_proto::message::BodyLength;

use crate::http::filter::{Answer, FilterCx, HttpFilter, Rejection, RequestParts, Verdict};

/// Payload bytes seen so far.
#[derive(Default)]
pub struct Counted(u64);

const TOO_LARGE: Rejection = Rejection {
    status: 413,
    reason: "body_too_large",
};

impl HttpFilter for BodyLimit {
    type State = Counted;
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, _: &mut Counted, req: &mut RequestParts<'_>) -> Verdict {
        match req.body {
            BodyLength::Exact(n) if n > self.max => Verdict::Respond(Answer::plain(413, TOO_LARGE.reason, "")),
            BodyLength::Unknown => {
                req.inspect_body();
                Verdict::Continue
            }
            BodyLength::Exact(_) | BodyLength::None => Verdict::Continue,
        }
    }

    fn request_body(&self, _: &mut FilterCx<'_>, seen: &mut Counted, chunk: &[u8], _: bool) -> Result<(), Rejection> {
        seen.0 += chunk.len() as u64;
        if seen.0 > self.max {
            return Err(TOO_LARGE);
        }
        Ok(())
    }
}
