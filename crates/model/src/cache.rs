//! A route's `cache`: the store (one of `[caches]`, shared by the workers and kept across
//! reloads) and how requests are keyed in it. The rules are `rampart_cache::policy`'s.

use std::sync::Arc;
use std::time::Duration;

use rampart_cache::coalesce::InFlight;
pub use rampart_cache::disk::{DiskError, DiskStore};
use rampart_cache::entry::Entry;
pub use rampart_cache::policy::control::Targets;
use rampart_cache::store::MemoryStore;

/// A named store of `[caches]`: responses by key (shared, so that the store's queues hold the
/// key without a copy of it).
pub type CacheStore = MemoryStore<Arc<[u8]>, Entry>;

/// The keys of a store with a request on its way to an upstream (request coalescing).
pub type CacheInFlight = InFlight<Arc<[u8]>>;

/// What a route's `cache` says.
pub struct RouteCache {
    /// The store's name in `[caches]` (for logs and metrics).
    pub store_name: String,
    pub store: Arc<CacheStore>,
    /// The store's disk part (`disk` in `[caches.NAME]`): what memory does not hold is looked
    /// for there, and what is stored is written there too.
    pub disk: Option<Arc<DiskStore>>,
    /// Misses on their way, shared by the routes that use the store.
    pub in_flight: Arc<CacheInFlight>,
    /// How long a request waits for another one for the same key before it goes upstream
    /// itself.
    pub coalesce_timeout: Duration,
    /// Request fields (lowercase) whose values are part of the key, beside the method, scheme,
    /// host and target.
    pub key_fields: Vec<String>,
    /// Cookies whose values are part of the key (`key_cookies`).
    pub key_cookies: Vec<String>,
    /// What becomes of requests with `Authorization`.
    pub authorized: Authorized,
    /// The targeted cache-control fields the store follows (RFC 9213).
    pub targets: Targets,
    /// The largest body stored; a longer response passes through unstored.
    pub max_object_size: usize,
    /// The most a heuristic freshness lifetime may be (RFC 9111 section 4.2.2).
    pub heuristic_max: Duration,
}

impl std::fmt::Debug for RouteCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteCache")
            .field("store_name", &self.store_name)
            .field("key_fields", &self.key_fields)
            .field("key_cookies", &self.key_cookies)
            .field("authorized", &self.authorized)
            .field("max_object_size", &self.max_object_size)
            .field("heuristic_max", &self.heuristic_max)
            .field("coalesce_timeout", &self.coalesce_timeout)
            .finish_non_exhaustive()
    }
}

/// What a route's cache does with requests that carry `Authorization` (`authorized = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authorized {
    /// RFC 9111 section 3.5: their responses are stored only when `public`, `s-maxage` or
    /// `must-revalidate` allows it, and stored responses answer them as any request.
    #[default]
    Rfc,
    /// They skip the cache: no lookup, nothing stored (Varnish's built-in rule).
    Bypass,
    /// The `Authorization` value is part of the key, and their responses are stored as any
    /// other's: each credential is answered only with what was stored for it.
    PerCredential,
}

/// `[caches.NAME]`, compiled: the store's bytes and its defaults for the routes that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    pub size: usize,
    pub max_object_size: usize,
    pub heuristic_max: Duration,
    pub coalesce_timeout: Duration,
    /// The disk store's directory and bytes.
    pub disk: Option<(std::path::PathBuf, usize)>,
    /// The targeted cache-control fields followed (RFC 9213 section 2.2): `CDN-Cache-Control`
    /// by default.
    pub targets: Targets,
}

impl CacheSettings {
    /// A store of `size` bytes: objects up to a tenth of it (S3-FIFO's small queue), at most
    /// 8 MiB by default; heuristic lifetimes up to a day; waits for a coalesced miss up to 5 s
    /// (nginx's `proxy_cache_lock_timeout`).
    pub fn new(size: usize) -> Self {
        CacheSettings {
            size,
            max_object_size: (size / 10).min(8 << 20),
            heuristic_max: Duration::from_secs(86_400),
            coalesce_timeout: Duration::from_secs(5),
            disk: None,
            targets: Targets::default(),
        }
    }

    /// With a disk store of `size` bytes in `dir`: objects up to a tenth of it, at most 64 MiB by
    /// default (a response is kept in memory while it arrives, before it is written).
    pub fn with_disk(mut self, dir: std::path::PathBuf, size: usize) -> Self {
        self.max_object_size = (size / 10).min(64 << 20);
        self.disk = Some((dir, size));
        self
    }
}

/// What the cache did for a request (RFC 9211's words where it has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from the store, fresh.
    Hit = 0,
    /// Answered from the store, stale (`max-stale`, or `stale-if-error` in an error's place).
    Stale = 1,
    /// Validated with the upstream, which answered 304: answered from the store.
    Revalidated = 2,
    /// Went to the upstream (not stored, stale, or a variant not stored).
    Miss = 3,
    /// Waited for another request for the same key, and answered from what it stored.
    Collapsed = 4,
}

/// [`CacheOutcome`]s by their index: their names in metrics and logs.
pub const CACHE_OUTCOMES: [&str; 5] = ["hit", "stale", "revalidated", "miss", "collapsed"];

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        CACHE_OUTCOMES[self as usize]
    }
}
