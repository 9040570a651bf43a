//! The HTTP caches on the admin API: `GET /api/caches` lists the stores (bytes, objects,
//! evictions); `POST /api/caches/{name}/purge?url=URL` removes what a URL's requests stored (every
//! `key_fields` variant of it); `POST /api/caches/{name}/ban?prefix=URL` removes everything stored
//! under URLs that begin so, and `?tag=TAG` everything whose response named the tag in
//! `Cache-Tag` (comma-separated) or `Surrogate-Key` (space-separated). URLs are as the cache keys
//! them: `scheme://host/path?query`, the host lowercase.

use std::sync::Arc;

use rampart_cache::entry::Entry;
use rampart_cache::policy::FieldSource;
use rampart_model::cache::CacheStore;
use rampart_model::Snapshot;
use serde_json::{json, Value};

use super::api::{percent_decode, Answer};
use super::state::AdminShared;

/// Every store the routes of `snapshot` use, by name (each once).
fn stores(snapshot: &Snapshot) -> Vec<(String, Arc<CacheStore>)> {
    let mut found: Vec<(String, Arc<CacheStore>)> = Vec::new();
    let caches = snapshot
        .listeners
        .iter()
        .filter_map(|l| l.http())
        .flat_map(|h| &h.routes)
        .filter_map(|r| r.cache.as_ref());
    for cache in caches {
        if !found.iter().any(|(name, _)| *name == cache.store_name) {
            found.push((cache.store_name.clone(), cache.store.clone()));
        }
    }
    found
}

/// Each store's counts, by name (for the metrics).
pub fn store_stats(snapshot: &Snapshot) -> Vec<(String, rampart_cache::store::StoreStats)> {
    stores(snapshot)
        .into_iter()
        .map(|(name, store)| (name, store.stats()))
        .collect()
}

/// `GET /api/caches`.
pub fn list(shared: &AdminShared) -> Answer {
    let snapshot = shared.snapshot.load();
    let caches: Vec<Value> = stores(&snapshot)
        .iter()
        .map(|(name, store)| {
            let stats = store.stats();
            json!({
                "name": name,
                "size": store.capacity(),
                "bytes": stats.bytes,
                "objects": stats.objects,
                "evictions": stats.evictions,
            })
        })
        .collect();
    Answer::json(200, &json!({ "caches": caches }))
}

/// `POST /api/caches/{name}/purge` or `/ban` (`rest`: what follows `/api/caches/`), with its
/// query.
pub fn act(shared: &AdminShared, rest: &str, query: &str) -> Answer {
    let Some((name, action)) = rest.split_once('/') else {
        return Answer::error(404, "expected /api/caches/{name}/purge or /ban");
    };
    let name = percent_decode(name);
    let snapshot = shared.snapshot.load();
    let Some((_, store)) = stores(&snapshot).into_iter().find(|(n, _)| *n == name) else {
        return Answer::error(404, &format!("no cache `{name}` used by a route"));
    };
    let param = |key: &str| {
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| percent_decode(&v.replace('+', " ")))
        })
    };
    let removed = match (action, param("url"), param("prefix"), param("tag")) {
        ("purge", Some(url), None, None) => {
            let url = normalized(&url);
            store.remove_where(|key, _| key_url(key) == url.as_bytes())
        }
        ("ban", None, Some(prefix), None) => {
            let prefix = normalized(&prefix);
            store.remove_where(|key, _| key_url(key).starts_with(prefix.as_bytes()))
        }
        ("ban", None, None, Some(tag)) => store.remove_where(|_, entry| tagged(entry, &tag)),
        ("purge", ..) => return Answer::error(400, "purge takes ?url=URL"),
        ("ban", ..) => return Answer::error(400, "ban takes ?prefix=URL or ?tag=TAG"),
        (other, ..) => return Answer::error(404, &format!("no action `{other}` (purge or ban)")),
    };
    tracing::info!(cache = %name, action, removed, "admin: cache entries removed");
    Answer::json(200, &json!({ "cache": name, "removed": removed }))
}

/// The URL part of a cache key (what precedes the `key_fields` values and a variant's part).
fn key_url(key: &[u8]) -> &[u8] {
    key.split(|&b| b == b'\n' || b == 0).next().unwrap_or(key)
}

/// A URL as the cache keys it: the host lowercase.
fn normalized(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    format!("{scheme}://{}{path}", host.to_ascii_lowercase())
}

/// Whether the stored response named `tag` in `Cache-Tag` or `Surrogate-Key`.
fn tagged(entry: &Entry, tag: &str) -> bool {
    let tag = tag.as_bytes();
    let comma = entry.head.each(b"cache-tag").flat_map(|v| v.split(|&b| b == b','));
    let space = entry.head.each(b"surrogate-key").flat_map(|v| v.split(|&b| b == b' '));
    comma.chain(space).any(|t| t.trim_ascii() == tag)
}
