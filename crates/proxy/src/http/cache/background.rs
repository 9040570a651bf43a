//! `stale-while-revalidate` (RFC 5861): the stale response has answered; a request with no client
//! (the internal client, on a task of its own) validates it with the upstream, and a 304 refreshes
//! it or a new response replaces it, for the requests that follow. One such request per key at a
//! time: while one runs, a client request for the key that misses waits for it (the store's
//! coalescing), and another stale answer starts none.

use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use rampart_cache::coalesce::Joined;
use rampart_cache::entry::Entry;
use rampart_cache::policy::control::Directives;
use rampart_cache::policy::reuse::{freshens, validators};
use rampart_cache::policy::storable::may_store;
use rampart_model::cache::RouteCache;
use rampart_proto::message::RequestHead;

use crate::http::client::{self, InternalOptions};
use crate::worker::{SharedSnapshot, WorkerContext};

/// Request fields the revalidation does not copy from the client's: its own validators replace
/// the client's conditions; the client writes `Host` and the framing itself.
const LEFT_OUT: [&str; 6] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "host",
];

/// Validates `entry` (stored under `key` for requests like `head`) with `upstream` in the
/// background, unless a request for the key is on its way already.
pub(super) fn revalidate(
    ctx: &WorkerContext,
    snapshot: &Rc<SharedSnapshot>,
    upstream: usize,
    cache: &RouteCache,
    key: &[u8],
    head: &RequestHead,
    entry: Arc<Entry>,
) {
    let key: Arc<[u8]> = Arc::from(key);
    let Joined::Leader(leader) = cache.in_flight.join(&key) else {
        return;
    };
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = head
        .pairs()
        .filter(|(n, _)| !LEFT_OUT.iter().any(|l| n.eq_ignore_ascii_case(l.as_bytes())))
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    fields.extend(validators(&entry.head).into_iter().map(|(n, v)| (n.to_vec(), v)));
    let host = head.host().unwrap_or_default();
    let Ok(request) = client::request_head(b"GET", host, head.target(), fields) else {
        return;
    };
    let (memory, disk) = (cache.store.clone(), cache.disk.clone());
    let (max, heuristic_max, targets) = (cache.max_object_size, cache.heuristic_max, cache.targets.clone());
    let per_credential = cache.authorized == rampart_model::cache::Authorized::PerCredential;
    let like = request.clone();
    let request_time = SystemTime::now();
    let spawned = client::spawn(
        ctx,
        snapshot.clone(),
        upstream,
        request,
        None,
        InternalOptions::new("revalidation", max),
        move |result| {
            // Released once the store holds the outcome.
            let _leader = leader;
            let Ok(got) = result else { return };
            let times = (request_time, SystemTime::now());
            let fields: Vec<(&[u8], &[u8])> = got.head.fields_ref().iter().collect();
            let refreshed = match got.status() {
                304 if freshens(&entry.head, fields.as_slice()) => {
                    super::refresh(&entry, fields.as_slice(), &like, times, (&targets, heuristic_max))
                }
                status => {
                    let cc = Directives::for_targets(fields.as_slice(), &targets);
                    let request = super::key::Stored {
                        head: &like,
                        hide_authorization: per_credential,
                    };
                    let allowed = may_store(b"GET", &request, &Directives::default(), status, fields.as_slice(), &cc);
                    let body = Bytes::from(got.body);
                    allowed.ok().and_then(|()| {
                        Entry::new(&like, status, fields.iter().copied(), cc, body, times, heuristic_max)
                    })
                }
            };
            if let Some(entry) = refreshed {
                let tiers = super::tiers::Tiers {
                    memory: &memory,
                    disk: disk.as_ref(),
                };
                super::variants::store(tiers, key, Arc::new(entry));
            }
        },
    );
    if let Err(e) = spawned {
        tracing::debug!("cache revalidation not started: {e}");
    }
}
