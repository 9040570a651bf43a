//! A route's `cache` on the request path (issue 39, docs/cache.md): a request that a stored
//! response answers is answered from the store without touching an upstream; any other goes
//! through the exchange as usual, its response kept on the way ([`recorder`]) and stored when
//! RFC 9111 allows. Unsafe requests invalidate what they change. The rules are
//! `rampart_cache::policy`'s; this module only applies them.
//!
//! Not yet here (see docs/cache.md): validation with a conditional request (a stale response is
//! fetched again in full), a 304 from the store for a client's conditional request,
//! `stale-while-revalidate` in the background (such a response is fetched again), request
//! coalescing, more than one `Vary` variant per key.

mod recorder;

use std::borrow::Cow;
use std::time::SystemTime;

use rampart_cache::entry::Entry;
use rampart_cache::policy::control::Directives;
use rampart_cache::policy::reuse::{invalidated_paths, invalidates, Reuse};
use rampart_cache::policy::storable::may_store;
use rampart_model::cache::RouteCache;
use rampart_proto::message::RequestHead;

use self::recorder::{Recorder, Recording};
use super::context::RequestContext;
use super::downstream::{Downstream, LocalAnswer};
use super::exchange::{self, ProxyRequest};
use super::head_out::{RequestParts, ResponseParts};
use crate::stream::Stream;
use crate::worker::WorkerContext;

/// The request `head` (sent as `parts`, over `scheme`) on a route with `cache`: answered from the
/// store, or exchanged with the upstream and its response stored. Returns the tunnel a 101
/// opened, as the exchange does.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn through<D: Downstream>(
    ctx: &WorkerContext,
    cache: &RouteCache,
    head: &RequestHead,
    scheme: &str,
    req: &ProxyRequest<'_>,
    down: &mut D,
    parts: &RequestParts<'_>,
    rctx: &mut RequestContext,
) -> Option<Stream> {
    let method = head.method();
    let host = head.host().unwrap_or_default();
    let key = primary_key(scheme, host, head.target(), cache, head);
    if method != b"GET" && method != b"HEAD" {
        let mut recorder = Recorder {
            inner: &mut *down,
            rec: Recording::new(false, 0, false),
        };
        let tunnel = exchange::proxy(ctx, req, &mut recorder, parts, rctx).await;
        if invalidates(method, rctx.status) {
            let fields: Vec<(&[u8], &[u8])> = recorder.rec.fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            invalidate(cache, &key);
            for path in invalidated_paths(fields.as_slice(), host) {
                invalidate(cache, &primary_key(scheme, host, &path, cache, head));
            }
        }
        return tunnel;
    }
    let request_cc = Directives::of(head);
    let now = SystemTime::now();
    let found = cache.store.get(&key);
    let stored = found.as_ref().filter(|e| e.variant.matches(head));
    let mut note = match (&found, stored) {
        (None, _) => "Rampart; fwd=uri-miss",
        (Some(_), None) => "Rampart; fwd=vary-miss",
        _ => "Rampart; fwd=stale",
    };
    let mut stale = None;
    if let Some(entry) = stored {
        let (reuse, age) = entry.reuse(&request_cc, now);
        match reuse {
            Reuse::Fresh | Reuse::StaleAccepted => {
                serve(down, req, entry, age, "hit", rctx).await;
                return None;
            }
            Reuse::Validate { stale_if_error } => {
                // The request's own directives sent it on, or the stored response is stale (or
                // wants validation whatever its age).
                let asked = !request_cc.no_cache.is_absent() || request_cc.max_age.is_some_and(|max| age > max);
                if asked {
                    note = "Rampart; fwd=request";
                }
                if stale_if_error {
                    stale = Some((entry.clone(), age));
                }
            }
            Reuse::StaleWhileRevalidate => {}
        }
    }
    if request_cc.only_if_cached {
        rctx.status = 504;
        let answer = LocalAnswer {
            status: 504,
            headers: &[("cache-status", "Rampart; fwd=miss; detail=only-if-cached")],
            body: b"504 Gateway Timeout: not in the cache (only-if-cached)\n",
            close: false,
            error_page: true,
        };
        if let Err(e) = down.send_local(&answer).await {
            rctx.fail(e);
        }
        return None;
    }
    let mut recorder = Recorder {
        inner: &mut *down,
        rec: Recording::new(method == b"GET", cache.max_object_size, stale.is_some()),
    };
    recorder.rec.note = note;
    let request_time = SystemTime::now();
    let tunnel = exchange::proxy(ctx, req, &mut recorder, parts, rctx).await;
    let rec = recorder.rec;
    if rec.held.is_some() {
        if let Some((entry, age)) = stale {
            // stale-if-error (RFC 5861): the stale response answers in the error's place.
            rctx.error = None;
            rctx.keep_client = true;
            serve(down, req, &entry, age, "hit; fwd=stale; detail=stale-if-error", rctx).await;
        }
        return tunnel;
    }
    if rec.complete() && rctx.error.is_none() {
        store(cache, key, head, &request_cc, rec, request_time);
    }
    tunnel
}

/// Stores the response `rec` kept, when RFC 9111 allows it.
fn store(
    cache: &RouteCache,
    key: Vec<u8>,
    head: &RequestHead,
    request_cc: &Directives,
    rec: Recording,
    request_time: SystemTime,
) {
    let fields: Vec<(&[u8], &[u8])> = rec.fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let response_cc = Directives::of(fields.as_slice());
    if may_store(
        head.method(),
        head,
        request_cc,
        rec.status,
        fields.as_slice(),
        &response_cc,
    )
    .is_err()
    {
        return;
    }
    let times = (request_time, rec.response_time.unwrap_or(request_time));
    let body = rec.body.freeze();
    if let Some(entry) = Entry::new(
        head,
        rec.status,
        fields.iter().copied(),
        response_cc,
        body,
        times,
        cache.heuristic_max,
    ) {
        cache.store.insert(key, entry);
    }
}

/// Answers from `entry` (its age `age`), with `Age` and `Cache-Status` (`what`: RFC 9211's
/// parameters after the cache's name).
async fn serve<D: Downstream>(
    down: &mut D,
    req: &ProxyRequest<'_>,
    entry: &Entry,
    age: u64,
    what: &str,
    rctx: &mut RequestContext,
) {
    let status = entry.head.status;
    let edits = Cow::Borrowed(req.response_ops.for_status(status));
    let mut view = ResponseParts::written(status, entry.head.length, entry.head.fields_ref(), edits);
    view.set_header("age", &age.to_string());
    let ttl = entry.lifetime.seconds as i64 - age as i64;
    view.add_header("cache-status", &format!("Rampart; {what}; ttl={ttl}"));
    rctx.status = status;
    let body: &[u8] = if req.head_method { &[] } else { &entry.body };
    let limit = req.up.http.read_timeout;
    let sent = match down.send_response_head(&view, body, limit).await {
        Ok(()) if down.needs_end() => down.end_body().await,
        other => other,
    };
    if let Err(e) = sent {
        rctx.fail(e);
    }
}

/// The key of a request in the store: its scheme, host (lowercase) and target, and the values of
/// the route's `key_fields`. The method is not in it: only `GET` responses are stored, and a
/// `HEAD` is answered from them.
fn primary_key(scheme: &str, host: &[u8], target: &[u8], cache: &RouteCache, head: &RequestHead) -> Vec<u8> {
    let mut key = Vec::with_capacity(scheme.len() + host.len() + target.len() + 4);
    key.extend_from_slice(scheme.as_bytes());
    key.extend_from_slice(b"://");
    key.extend(host.iter().map(u8::to_ascii_lowercase));
    key.extend_from_slice(target);
    for name in &cache.key_fields {
        key.push(b'\n');
        key.extend_from_slice(name.as_bytes());
        key.push(b':');
        for (i, value) in head
            .pairs()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .enumerate()
        {
            if i > 0 {
                key.extend_from_slice(b", ");
            }
            key.extend_from_slice(value.1);
        }
    }
    key
}

/// Removes what is stored under the request key `key` (with `key_fields`, every key that begins
/// with its URL part).
fn invalidate(cache: &RouteCache, key: &[u8]) {
    if cache.key_fields.is_empty() {
        cache.store.remove(&key.to_vec());
        return;
    }
    let url = key.split(|&b| b == b'\n').next().unwrap_or(key);
    cache
        .store
        .remove_where(|k, _| k.starts_with(url) && k.get(url.len()).is_none_or(|&b| b == b'\n'));
}
