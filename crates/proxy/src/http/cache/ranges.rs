//! Range requests on a route that caches (RFC 9110 section 14, RFC 9111 section 3.4): a `GET`
//! with `Range` is answered from a stored complete `200` with 206 and `Content-Range` (or 416),
//! as static files are (one range; several, or one that does not parse, get the whole
//! response). On a miss the range is not sent upstream: the whole response is fetched, stored,
//! and sent to this client whole (which the RFC allows: a server may ignore `Range`), so that
//! later ranges of it are answered from the store, as nginx's `proxy_cache` does. Partial
//! responses (206) are not stored.

use rampart_cache::entry::Entry;
use rampart_cache::policy::freshness::http_date;
use rampart_cache::policy::FieldSource;
use rampart_proto::message::RequestHead;

use crate::http::head_out::RequestParts;
use crate::http::static_files::range::{self, RangeRequest};

/// What the request `head` asks of the stored `entry`: the whole of it unless it is a `GET` with
/// a `Range`, the stored response a complete 200, and its `If-Range` (if any) still holds.
pub(super) fn wanted(head: &RequestHead, entry: &Entry) -> RangeRequest {
    if head.method() != b"GET" || entry.head.status != 200 {
        return RangeRequest::Full;
    }
    let Some(value) = head.value_of(b"range") else {
        return RangeRequest::Full;
    };
    if head
        .value_of(b"if-range")
        .is_some_and(|v| !if_range_holds(v.trim_ascii(), entry))
    {
        return RangeRequest::Full;
    }
    range::parse(value, entry.body.len() as u64)
}

/// Whether an `If-Range` value names the stored response (RFC 9110 section 13.1.5): its entity
/// tag, compared strongly, or exactly its `Last-Modified` when that is a strong validator (at
/// least a second before its `Date`).
fn if_range_holds(value: &[u8], entry: &Entry) -> bool {
    let stored = &entry.head;
    if value.starts_with(b"\"") {
        return stored.value_of(b"etag").map(<[u8]>::trim_ascii) == Some(value);
    }
    if value.starts_with(b"W/") {
        return false;
    }
    let modified = stored.value_of(b"last-modified").and_then(http_date);
    let date = stored.value_of(b"date").and_then(http_date);
    match (http_date(value), modified, date) {
        (Some(asked), Some(modified), Some(date)) => {
            asked == modified && date.duration_since(modified).is_ok_and(|d| d.as_secs() >= 1)
        }
        _ => false,
    }
}

/// The request as it goes upstream on a miss: without `Range` and `If-Range`, so that the
/// whole response comes back to be stored; `None` when it has no `Range`.
pub(super) fn whole<'a>(head: &RequestHead, parts: &RequestParts<'a>) -> Option<RequestParts<'a>> {
    if head.method() != b"GET" || head.value_of(b"range").is_none() {
        return None;
    }
    let mut edits = parts.edits.clone().into_owned();
    for name in ["range", "if-range"] {
        if !edits.remove.iter().any(|n| n == name) {
            edits.remove.push(name.to_string());
        }
    }
    Some(parts.with_edits(edits))
}
