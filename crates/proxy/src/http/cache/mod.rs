//! A route's `cache` on the request path (issue 39, docs/cache.md): a request that a stored
//! response answers is answered from the store without touching an upstream; any other goes
//! through the exchange as usual, its response kept on the way ([`recorder`]) and stored when
//! RFC 9111 allows. Unsafe requests invalidate what they change. The rules are
//! `rampart_cache::policy`'s; this module only applies them.
//!
//! A stored response that must be validated is: the request goes upstream with its validators
//! (`If-None-Match`, `If-Modified-Since`), and a 304 refreshes the stored head and answers from
//! the store. A client's own conditional request that a stored response answers gets a 304 from
//! the store.
//!
//! Misses for the same key are coalesced: one goes upstream, the others wait for it (at most the
//! store's `coalesce_timeout`) and answer from what it stored, or go upstream themselves when it
//! stored nothing they may use.
//!
//! A response stale within its `stale-while-revalidate` answers at once, and is validated in the
//! background ([`background`]).
//!
//! Responses that vary are kept side by side, one per variant ([`variants`]).

mod recorder;

mod background;
mod key;
mod ranges;
mod shared;
mod tiers;
mod variants;

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use rampart_cache::coalesce::Joined;
use rampart_cache::entry::Entry;
use rampart_cache::policy::control::{Directives, Targets};
use rampart_cache::policy::freshness::http_date;
use rampart_cache::policy::reuse::{freshens, invalidated_paths, invalidates, updates_field, validators, Reuse};
use rampart_cache::policy::storable::may_store;
use rampart_cache::policy::{list_items, FieldSource};
use rampart_model::cache::{Authorized, CacheOutcome, RouteCache};
use rampart_proto::message::{BodyLength, RequestHead};

use self::key::{invalidate, primary_key, Stored};
use self::recorder::{Commit, Recorder, Recording};
use self::tiers::Tiers;
use super::context::RequestContext;
use super::downstream::{Downstream, LocalAnswer};
use super::exchange::{self, ProxyRequest};
use super::head_out::{RequestParts, ResponseParts};
use super::static_files::range::RangeRequest;
use crate::stream::Stream;
use crate::worker::{SharedSnapshot, WorkerContext};

/// The request `head` (sent as `parts`, over `scheme`) on a route with `cache`: answered from the
/// store, or exchanged with the upstream and its response stored. Returns the tunnel a 101
/// opened, as the exchange does.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn through<D: Downstream>(
    ctx: &WorkerContext,
    snapshot: &Rc<SharedSnapshot>,
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
    let key: Arc<[u8]> = Arc::from(primary_key(scheme, host, head.target(), cache, head));
    let bypass = cache.authorized == Authorized::Bypass && head.value_of(b"authorization").is_some();
    if bypass || method != b"GET" && method != b"HEAD" {
        let mut recorder = Recorder {
            inner: &mut *down,
            rec: Recording::new(false, 0, false),
            commit: None,
        };
        if bypass {
            // RFC 9211's word for a request the cache was told not to handle.
            recorder.rec.note = "Rampart; fwd=bypass";
            rctx.cache = Some(CacheOutcome::Miss);
        }
        let tunnel = exchange::proxy(ctx, req, &mut recorder, parts, rctx).await;
        if invalidates(method, rctx.status) {
            let fields: Vec<(&[u8], &[u8])> = recorder.rec.fields();
            invalidate(cache, &key);
            for path in invalidated_paths(fields.as_slice(), host) {
                invalidate(cache, &primary_key(scheme, host, &path, cache, head));
            }
        }
        return tunnel;
    }
    let request_cc = Directives::of(head);
    let (found, stored) = variants::lookup(Tiers::of(cache), &key, head).await;
    let stored = stored.as_ref();
    let mut note = match (found, stored) {
        (false, _) => "Rampart; fwd=uri-miss",
        (true, None) => "Rampart; fwd=vary-miss",
        _ => "Rampart; fwd=stale",
    };
    let mut stale = None;
    let mut validating = None;
    if let Some(entry) = stored {
        let (reuse, age) = entry.reuse(&request_cc, SystemTime::now());
        match reuse {
            Reuse::Fresh | Reuse::StaleAccepted => {
                rctx.cache = Some(match reuse {
                    Reuse::Fresh => CacheOutcome::Hit,
                    _ => CacheOutcome::Stale,
                });
                serve(down, req, head, entry, age, "hit", rctx).await;
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
                validating = Some(entry.clone());
            }
            Reuse::StaleWhileRevalidate => {
                // RFC 5861: answered stale now, validated in the background.
                background::revalidate(ctx, snapshot, req.upstream, cache, &key, head, entry.clone());
                rctx.cache = Some(CacheOutcome::Stale);
                serve(
                    down,
                    req,
                    head,
                    entry,
                    age,
                    "hit; fwd=stale; detail=stale-while-revalidate",
                    rctx,
                )
                .await;
                return None;
            }
        }
    }
    rctx.cache = Some(CacheOutcome::Miss);
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
    // A miss for a key another request is fetching waits for it (request coalescing), then
    // answers from what it stored; the first leads, and releases the others when it is done.
    let mut leader = None;
    if method == b"GET" && validating.is_none() && !cache.coalesce_timeout.is_zero() {
        match cache.in_flight.join(&key) {
            Joined::Leader(guard) => leader = Some(guard),
            Joined::Waiter(waiter) => {
                // Answered from the leader's response as it arrives when the leader shares it;
                // a range or a conditional request waits for it to be stored.
                let whole = head.value_of(b"range").is_none() && !is_conditional(head);
                let shared = match whole {
                    true => tokio::time::timeout(cache.coalesce_timeout, waiter.wait_shared())
                        .await
                        .ok()
                        .flatten(),
                    false => {
                        let _ = tokio::time::timeout(cache.coalesce_timeout, waiter.wait()).await;
                        None
                    }
                };
                if let Some(shared) = shared.filter(|s| s.head().variant.matches(head)) {
                    let (reuse, age) = shared.head().reuse(&request_cc, SystemTime::now());
                    if matches!(reuse, Reuse::Fresh | Reuse::StaleAccepted) {
                        rctx.cache = Some(CacheOutcome::Collapsed);
                        shared::answer(down, req, &shared, age, rctx).await;
                        return None;
                    }
                }
                if let (_, Some(entry)) = variants::lookup(Tiers::of(cache), &key, head).await {
                    let (reuse, age) = entry.reuse(&request_cc, SystemTime::now());
                    if matches!(reuse, Reuse::Fresh | Reuse::StaleAccepted) {
                        rctx.cache = Some(CacheOutcome::Collapsed);
                        serve(down, req, head, &entry, age, "hit; collapsed", rctx).await;
                        return None;
                    }
                }
                // Nothing it may answer with was stored (the response was not cacheable, or
                // the wait ran out): it goes upstream itself.
            }
        }
    }
    // The stored response's validators go with the request, unless the client made its own
    // request conditional (its conditions are then the upstream's to judge).
    // A range is asked of the whole response, which is stored ([`ranges`]).
    let whole = ranges::whole(head, parts);
    let unranged = whole.as_ref().unwrap_or(parts);
    let conditional = validating
        .as_ref()
        .filter(|_| !is_conditional(head))
        .and_then(|entry| conditional_parts(unranged, &entry.head));
    let request_time = SystemTime::now();
    let commit = Commit {
        cache,
        key: key.clone(),
        head,
        request_cc: &request_cc,
        request_time,
        leader: leader.as_ref(),
    };
    let mut recorder = Recorder {
        inner: &mut *down,
        rec: Recording::new(method == b"GET", cache.max_object_size, stale.is_some()),
        commit: Some(commit),
    };
    recorder.rec.note = note;
    recorder.rec.validating = conditional.is_some();
    let sent = conditional.as_ref().unwrap_or(unranged);
    let tunnel = exchange::proxy(ctx, req, &mut recorder, sent, rctx).await;
    let Recorder { mut rec, commit, .. } = recorder;
    if rec.not_modified {
        let fields: Vec<(&[u8], &[u8])> = rec.fields();
        let times = (request_time, rec.response_time.unwrap_or(request_time));
        let refreshed = validating
            .as_ref()
            .filter(|entry| freshens(&entry.head, fields.as_slice()))
            .and_then(|entry| {
                refresh(
                    entry,
                    fields.as_slice(),
                    head,
                    times,
                    (&cache.targets, cache.heuristic_max),
                )
            });
        rctx.status = 0;
        match refreshed {
            Some(entry) => {
                let entry = Arc::new(entry);
                let age = entry.age(SystemTime::now());
                rctx.cache = Some(CacheOutcome::Revalidated);
                serve(down, req, head, &entry, age, "hit; fwd=stale; fwd-status=304", rctx).await;
                variants::store(Tiers::of(cache), key, entry);
            }
            // A 304 about no response stored here: the request goes again, unconditional.
            None => {
                variants::remove(Tiers::of(cache), &key);
                return exchange::proxy(ctx, req, down, parts, rctx).await;
            }
        }
        return tunnel;
    }
    if rec.held.is_some() {
        if let Some((entry, age)) = stale {
            // stale-if-error (RFC 5861): the stale response answers in the error's place.
            rctx.error = None;
            rctx.keep_client = true;
            rctx.cache = Some(CacheOutcome::Stale);
            serve(
                down,
                req,
                head,
                &entry,
                age,
                "hit; fwd=stale; detail=stale-if-error",
                rctx,
            )
            .await;
        }
        return tunnel;
    }
    // A response whose end was known only when the exchange ended (read until the upstream
    // closed).
    if let Some(commit) = commit.filter(|_| rec.complete() && rctx.error.is_none()) {
        store(commit, &mut rec);
    }
    // Stored (or not): the requests waiting for this one look now.
    drop(leader);
    tunnel
}

/// Stores the response `rec` kept (its body is taken), when RFC 9111 allows it.
fn store(commit: Commit<'_>, rec: &mut Recording) {
    let body = std::mem::take(&mut rec.body).freeze();
    if let Some(entry) = entry_for(&commit, rec, body, true) {
        variants::store(Tiers::of(commit.cache), commit.key, Arc::new(entry));
    }
}

/// The entry the response `rec` kept makes with `body`, when RFC 9111 lets it be stored; with
/// `take`, the recording's fields are moved into it (the recording is done).
fn entry_for(commit: &Commit<'_>, rec: &mut Recording, body: bytes::Bytes, take: bool) -> Option<Entry> {
    let Commit {
        cache,
        head,
        request_cc,
        request_time,
        ..
    } = *commit;
    let fields = rec.fields_ref();
    let response_cc = Directives::for_targets(&fields, &cache.targets);
    let request = Stored {
        head,
        hide_authorization: cache.authorized == Authorized::PerCredential,
    };
    may_store(head.method(), &request, request_cc, rec.status, &fields, &response_cc).ok()?;
    let times = (request_time, rec.response_time.unwrap_or(request_time));
    if take {
        let packed = rec.take_fields();
        return Entry::packed(head, rec.status, packed, response_cc, body, times, cache.heuristic_max);
    }
    let pairs = rec.fields();
    Entry::new(
        head,
        rec.status,
        pairs.iter().copied(),
        response_cc,
        body,
        times,
        cache.heuristic_max,
    )
}

/// The stored response `entry` with the fields of a 304 that validated it (each replacing the
/// stored ones of its name, `Content-Length` aside: RFC 9111 section 3.2), received at `times`.
pub(super) fn refresh(
    entry: &Entry,
    not_modified: &[(&[u8], &[u8])],
    head: &RequestHead,
    times: (SystemTime, SystemTime),
    (targets, heuristic_max): (&Targets, std::time::Duration),
) -> Option<Entry> {
    let replaced = |name: &[u8]| updates_field(name) && not_modified.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let stored = entry.head.fields_ref();
    let mut fields: Vec<(&[u8], &[u8])> = stored.iter().filter(|(n, _)| !replaced(n)).collect();
    fields.extend(not_modified.iter().filter(|(n, _)| updates_field(n)).copied());
    let cc = Directives::for_targets(fields.as_slice(), targets);
    let body = entry.body.clone();
    Entry::new(
        head,
        entry.head.status,
        fields.iter().copied(),
        cc,
        body,
        times,
        heuristic_max,
    )
}

/// Whether the client's request carries conditions of its own.
fn is_conditional(head: &RequestHead) -> bool {
    [
        "if-none-match",
        "if-modified-since",
        "if-match",
        "if-unmodified-since",
        "if-range",
    ]
    .iter()
    .any(|n| head.value_of(n.as_bytes()).is_some())
}

/// The request as it goes upstream with the validators of `stored` (section 4.3.1); `None` when
/// it has none (or ones that cannot be sent).
fn conditional_parts<'a>(
    parts: &RequestParts<'a>,
    stored: &rampart_proto::message::ResponseHead,
) -> Option<RequestParts<'a>> {
    let validators = validators(stored);
    if validators.is_empty() {
        return None;
    }
    let mut edits = parts.edits.clone().into_owned();
    for (name, value) in &validators {
        edits.set(std::str::from_utf8(name).ok()?, std::str::from_utf8(value).ok()?);
    }
    Some(parts.with_edits(edits))
}

/// Whether the client's own conditions say its copy of `entry` is current (RFC 9110 section
/// 13.2.2: `If-None-Match` by weak comparison, else `If-Modified-Since` for `GET` and `HEAD`).
fn client_has_it(head: &RequestHead, entry: &Entry) -> bool {
    let etag = entry.head.value_of(b"etag");
    if head.value_of(b"if-none-match").is_some() {
        let weak = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        return list_items(head, b"if-none-match").any(|tag| tag == b"*" || etag.is_some_and(|e| weak(e) == weak(tag)));
    }
    let since = head.value_of(b"if-modified-since").and_then(http_date);
    let modified = entry.head.value_of(b"last-modified").and_then(http_date);
    matches!((since, modified), (Some(since), Some(modified)) if modified <= since)
}

/// Answers from `entry` (its age `age`) the request `head`, with `Age` and `Cache-Status` (`what`:
/// RFC 9211's parameters after the cache's name): a 304 when the client's own conditions say
/// it has the response already.
async fn serve<D: Downstream>(
    down: &mut D,
    req: &ProxyRequest<'_>,
    head: &RequestHead,
    entry: &Entry,
    age: u64,
    what: &str,
    rctx: &mut RequestContext,
) {
    let not_modified = (200..300).contains(&entry.head.status) && client_has_it(head, entry);
    let wanted = match not_modified || req.head_method {
        true => RangeRequest::Full,
        false => ranges::wanted(head, entry),
    };
    let size = entry.body.len();
    let (status, length, body) = match wanted {
        _ if not_modified => (304, BodyLength::None, &[][..]),
        RangeRequest::Full => (entry.head.status, entry.head.length, &entry.body[..]),
        RangeRequest::Part { start, end } => {
            let part = &entry.body[start as usize..=end as usize];
            (206, BodyLength::Exact(part.len() as u64), part)
        }
        RangeRequest::Unsatisfiable => {
            rctx.status = 416;
            let range = format!("bytes */{size}");
            let answer = LocalAnswer {
                status: 416,
                headers: &[("content-range", &range)],
                body: b"416 Range Not Satisfiable\n",
                close: false,
                error_page: true,
            };
            if let Err(e) = down.send_local(&answer).await {
                rctx.fail(e);
            }
            return;
        }
    };
    let edits = Cow::Borrowed(req.response_ops.for_status(status));
    let mut view = ResponseParts::written(status, length, entry.head.fields_ref(), edits);
    if status != entry.head.status {
        // 304 has no length; a 206 says its own (written from `length`).
        view.remove_header("content-length");
    }
    if let RangeRequest::Part { start, end } = wanted {
        view.set_header("content-range", &format!("bytes {start}-{end}/{size}"));
    }
    view.set_header("age", &age.to_string());
    let ttl = entry.lifetime.seconds as i64 - age as i64;
    view.add_header("cache-status", &format!("Rampart; {what}; ttl={ttl}"));
    rctx.status = status;
    let body: &[u8] = if req.head_method { &[] } else { body };
    let limit = req.up.http.read_timeout;
    let sent = match down.send_response_head(&view, body, limit).await {
        Ok(()) if down.needs_end() => down.end_body().await,
        other => other,
    };
    if let Err(e) = sent {
        rctx.fail(e);
    }
}
