//! `ip_filter`: refuse clients by network. The address is the one filters see (after a PROXY
//! header; from `X-Forwarded-For` when the peer is a trusted proxy).

use rampart_model::filter::IpFilter;

use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};

impl HttpFilter for IpFilter {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), _: &mut RequestParts<'_>) -> Verdict {
        if self.admits(cx.facts.client_ip) {
            Verdict::Continue
        } else {
            Verdict::Respond(Answer::plain(self.status, "ip_denied", ""))
        }
    }
}
