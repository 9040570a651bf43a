//! A route's `mirror`: a copy of a share of its requests sent to a shadow upstream, on a task of
//! its own, so that it never delays or fails the request itself. The copy is the request as it
//! went to the route's upstream (its method, target and fields as written for that upstream,
//! laid out as an owned head of its own), with its body: a request
//! without one is copied at once; one with a body once the exchange has sent it (kept, as for a
//! retry, up to the upstream's `retry_max_body_size`; a body not kept whole makes the copy fail).
//!
//! The copy goes through the internal client ([`crate::http::client`]): to the shadow as its
//! upstream settings say (TLS, HTTP/2, pooled connections, DNS targets, its timeouts), never
//! retried. That the shadow answered with a response head is all that is counted; its body is
//! read (and dropped) up to [`MAX_READ`], past which its connection is closed.

use bytes::Bytes;
use rampart_model::split::Mirror;
use rampart_model::Snapshot;

use super::client::{self, Collected, InternalError, InternalOptions};
use super::head_out::{lay_out_sent, RequestParts};
use crate::worker::WorkerContext;

/// The most of a shadow's response body read (and dropped) so that its connection can carry the
/// next copy; a longer one closes it.
const MAX_READ: usize = 64 * 1024;

/// Whether this request is one the mirror copies (a draw against its share).
pub fn drawn(ctx: &WorkerContext, mirror: &Mirror) -> bool {
    ctx.http.filters.random() % 100 < u64::from(mirror.percent)
}

/// The body of a copy: none, or the request's as it was kept (`None` when it was not kept whole:
/// the copy fails).
pub enum CopyBody<'a> {
    None,
    Kept(Option<&'a [u8]>),
}

/// Sends a copy of the request whose head's edit view toward the route's upstream is `parts` and
/// whose body is `body` to the mirror's upstream, on a task of its own. Counted in the shadow's
/// `mirrored`, and in its `mirror_failed` when no response head comes back.
pub fn copy(ctx: &WorkerContext, snapshot: &Snapshot, mirror: &Mirror, parts: &RequestParts<'_>, body: CopyBody<'_>) {
    let Some(up) = snapshot.upstreams.get(mirror.upstream) else {
        return;
    };
    let cells = up.metrics.clone();
    let worker = ctx.id;
    cells.worker(worker).mirrored.add(1);
    let failed = move || cells.worker(worker).mirror_failed.add(1);
    let body = match body {
        CopyBody::None => None,
        CopyBody::Kept(Some(data)) => Some(Bytes::copy_from_slice(data)),
        CopyBody::Kept(None) => return failed(),
    };
    let head = lay_out_sent(parts, (Vec::with_capacity(512), Vec::new()));
    // The copy runs on the worker's current snapshot (the request's, unless a reload came in
    // between: then the shadow of the same name there).
    let current = ctx.snapshot();
    let upstream = if std::ptr::eq::<Snapshot>(&**current, snapshot) {
        Some(mirror.upstream)
    } else {
        current.upstreams.iter().position(|u| u.name == up.name)
    };
    let Some(upstream) = upstream else {
        return failed();
    };
    let options = InternalOptions {
        keep_body: false,
        ..InternalOptions::new("mirror", MAX_READ)
    };
    let failed_copy = failed.clone();
    let sent = client::spawn(ctx, current, upstream, head, body, options, move |result| {
        if !answered(&result) {
            failed_copy();
        }
    });
    if sent.is_err() {
        failed();
    }
}

/// Whether the shadow answered with a response head (a body cut off or too long still counts).
fn answered(result: &Result<Collected, InternalError>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => e.status().is_some(),
    }
}
