//! A coalesced miss answered from the leader's response as it arrives ([`Growing`]): the stored
//! head at once, then each piece of the body as the leader receives it. A leader whose body stops
//! short (its upstream failed) leaves the waiter's response short too, and its connection closed,
//! as the leader's own client's is.

use std::borrow::Cow;

use rampart_cache::growing::{Growing, Read};
use rampart_proto::message::BodyLength;

use super::super::context::RequestContext;
use super::super::downstream::Downstream;
use super::super::error::HttpError;
use super::super::exchange::ProxyRequest;
use super::super::head_out::ResponseParts;

/// Answers the request from `shared` (its age `age`).
pub(super) async fn answer<D: Downstream>(
    down: &mut D,
    req: &ProxyRequest<'_>,
    shared: &Growing,
    age: u64,
    rctx: &mut RequestContext,
) {
    let entry = shared.head();
    let status = entry.head.status;
    let edits = Cow::Borrowed(req.response_ops.for_status(status));
    let length = BodyLength::Exact(shared.length() as u64);
    let mut view = ResponseParts::written(status, length, entry.head.fields_ref(), edits);
    view.set_header("age", &age.to_string());
    let ttl = entry.lifetime.seconds as i64 - age as i64;
    view.add_header("cache-status", &format!("Rampart; hit; collapsed; ttl={ttl}"));
    rctx.status = status;
    let limit = req.up.http.read_timeout;
    if let Err(e) = down.send_response_head(&view, &[], limit).await {
        rctx.fail(e);
        return;
    }
    let mut sent = 0;
    let mut piece = Vec::new();
    loop {
        piece.clear();
        let result = match shared.read(sent, &mut piece).await {
            Read::Data => {
                sent += piece.len();
                down.send_data(&piece).await
            }
            Read::End => {
                if down.needs_end() {
                    if let Err(e) = down.end_body().await {
                        rctx.fail(e);
                    }
                }
                return;
            }
            Read::Failed => Err(HttpError::UpstreamClosedEarly),
        };
        if let Err(e) = result {
            rctx.fail(e);
            return;
        }
    }
}
