//! The HTTP caches on the admin API: `GET /api/caches` lists the stores (bytes, objects,
//! evictions; the routes that use each and their requests by cache outcome, for the status page's
//! hit ratio); `POST /api/caches/{name}/purge?url=URL` removes what a URL's requests stored (every
//! `key_fields` variant of it); `POST /api/caches/{name}/ban?prefix=URL` removes everything stored
//! under URLs that begin so, and `?tag=TAG` everything whose response named the tag in
//! `Cache-Tag` (comma-separated) or `Surrogate-Key` (space-separated). URLs are as the cache keys
//! them: `scheme://host/path?query`, the host lowercase.

use std::collections::HashSet;
use std::sync::Arc;

use rampart_cache::store::StoreStats;
use rampart_model::cache::{CacheStore, DiskStore, CACHE_OUTCOMES};
use rampart_model::metrics::{PerWorker, RouteCells};
use rampart_model::Snapshot;
use serde_json::{json, Value};

use super::api::{percent_decode, Answer};
use super::state::AdminShared;

/// Picks keys to remove: by the key, and by whether the response named a tag (the second
/// argument answers that for the response at hand).
type Pick<'a> = dyn Fn(&[u8], &dyn Fn(&[u8]) -> bool) -> bool + 'a;

/// A store's memory and disk tiers.
type Tiers = (Arc<CacheStore>, Option<Arc<DiskStore>>);

/// Every store the routes of `snapshot` use, by name (each once).
fn stores(snapshot: &Snapshot) -> Vec<(String, Tiers)> {
    let mut found: Vec<(String, Tiers)> = Vec::new();
    let caches = snapshot
        .listeners
        .iter()
        .filter_map(|l| l.http())
        .flat_map(|h| &h.routes)
        .filter_map(|r| r.cache.as_ref());
    for cache in caches {
        if !found.iter().any(|(name, _)| *name == cache.store_name) {
            found.push((cache.store_name.clone(), (cache.store.clone(), cache.disk.clone())));
        }
    }
    found
}

/// Each store tier's counts, by store name and tier (`memory`, `disk`), for the metrics; with
/// a disk tier's failed writes and refused reads.
pub fn store_stats(snapshot: &Snapshot) -> Vec<TierStats> {
    let mut out = Vec::new();
    for (name, (memory, disk)) in stores(snapshot) {
        out.push(TierStats {
            name: name.clone(),
            tier: "memory",
            stats: memory.stats(),
            errors: None,
        });
        if let Some(disk) = disk {
            let stats = disk.stats();
            out.push(TierStats {
                name,
                tier: "disk",
                stats: stats.index,
                errors: Some((stats.read_errors, stats.write_errors)),
            });
        }
    }
    out
}

/// The routes (`listener/route`) that use the store `name`, and their requests summed by cache
/// outcome ([`CACHE_OUTCOMES`]); two routes that share their counters (one name) count once.
fn route_outcomes(snapshot: &Snapshot, name: &str) -> (Vec<String>, [u64; 5]) {
    let (mut routes, mut outcomes) = (Vec::new(), [0u64; 5]);
    let mut seen: Vec<*const PerWorker<RouteCells>> = Vec::new();
    for listener in snapshot.listeners.iter() {
        let Some(http) = listener.http() else { continue };
        for route in &http.routes {
            if route.cache.as_ref().is_none_or(|c| c.store_name != name) || seen.contains(&Arc::as_ptr(&route.metrics))
            {
                continue;
            }
            seen.push(Arc::as_ptr(&route.metrics));
            routes.push(format!("{}/{}", listener.name, route.name));
            for cells in route.metrics.iter() {
                for (total, count) in outcomes.iter_mut().zip(&cells.cache) {
                    *total = total.wrapping_add(count.get());
                }
            }
        }
    }
    (routes, outcomes)
}

/// One tier of a store, counted.
#[derive(Debug, Clone)]
pub struct TierStats {
    pub name: String,
    pub tier: &'static str,
    pub stats: StoreStats,
    /// A disk tier's read and write errors.
    pub errors: Option<(u64, u64)>,
}

/// `GET /api/caches`.
pub fn list(shared: &AdminShared) -> Answer {
    let snapshot = shared.snapshot.load();
    let caches: Vec<Value> = stores(&snapshot)
        .iter()
        .map(|(name, (store, disk))| {
            let stats = store.stats();
            let (routes, outcomes) = route_outcomes(&snapshot, name);
            let requests: serde_json::Map<String, Value> = CACHE_OUTCOMES
                .iter()
                .zip(outcomes)
                .map(|(outcome, n)| (outcome.to_string(), n.into()))
                .collect();
            let mut value = json!({
                "name": name,
                "size": store.capacity(),
                "bytes": stats.bytes,
                "objects": stats.objects,
                "evictions": stats.evictions,
                "routes": routes,
                "requests": requests,
            });
            if let Some(disk) = disk {
                let d = disk.stats();
                value["disk"] = json!({
                    "dir": disk.dir().display().to_string(),
                    "size": disk.capacity(),
                    "bytes": d.index.bytes,
                    "objects": d.index.objects,
                    "evictions": d.index.evictions,
                    "writes": d.writes,
                    "write_errors": d.write_errors,
                    "read_errors": d.read_errors,
                });
            }
            value
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
    let Some((_, (store, disk))) = stores(&snapshot).into_iter().find(|(n, _)| *n == name) else {
        return Answer::error(404, &format!("no cache `{name}` used by a route"));
    };
    let param = |key: &str| {
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| percent_decode(&v.replace('+', " ")))
        })
    };
    // Keys removed from either tier, each counted once.
    let mut removed: HashSet<Vec<u8>> = HashSet::new();
    let mut remove = |pick: &Pick| {
        store.remove_where(|key, entry| {
            let hit = pick(key, &|tag| rampart_cache::policy::tags(&entry.head).any(|t| t == tag));
            if hit {
                removed.insert(key.to_vec());
            }
            hit
        });
        if let Some(disk) = &disk {
            disk.remove_where(|key, record| {
                let hit = pick(key, &|tag| record.tagged(tag));
                if hit {
                    removed.insert(key.to_vec());
                }
                hit
            });
        }
    };
    match (action, param("url"), param("prefix"), param("tag")) {
        ("purge", Some(url), None, None) => {
            let url = normalized(&url);
            remove(&|key, _| key_url(key) == url.as_bytes());
        }
        ("ban", None, Some(prefix), None) => {
            let prefix = normalized(&prefix);
            remove(&|key, _| key_url(key).starts_with(prefix.as_bytes()));
        }
        ("ban", None, None, Some(tag)) => remove(&|_, tagged| tagged(tag.as_bytes())),
        ("purge", ..) => return Answer::error(400, "purge takes ?url=URL"),
        ("ban", ..) => return Answer::error(400, "ban takes ?prefix=URL or ?tag=TAG"),
        (other, ..) => return Answer::error(404, &format!("no action `{other}` (purge or ban)")),
    };
    let removed = removed.len();
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
