//! `request_headers` and `response_headers`: header edits that run per request (those the chain
//! could not fold into its starting edits because a filter before them edits per request).

use rampart_model::filter::{is_success_status, RequestHeaders, ResponseHeaders};
use rampart_model::route::HeaderOps;

use crate::http::filter::{FilterCx, HttpFilter, RequestParts, ResponseParts, Verdict};

impl HttpFilter for RequestHeaders {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        apply(&self.ops, req.edits.to_mut());
        Verdict::Continue
    }
}

impl HttpFilter for ResponseHeaders {
    type State = ();
    type WorkerState = ();

    fn response_head(&self, _: &mut FilterCx<'_>, _: &mut (), resp: &mut ResponseParts<'_>) {
        if self.always || is_success_status(resp.status) {
            apply(&self.ops, resp.edits.to_mut());
        }
    }
}

/// Applies `ops` after the edits already in `edits`.
fn apply(ops: &HeaderOps, edits: &mut HeaderOps) {
    for name in &ops.remove {
        edits.remove(name);
    }
    for (name, value) in &ops.set {
        edits.set(name, value);
    }
    for (name, value) in &ops.add {
        edits.add(name, value);
    }
}
