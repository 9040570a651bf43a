//! The key set a `jwt` filter verifies with, shared between the workers that read it and, for a
//! JWKS URL, the fetcher that replaces it.
//!
//! Workers never wait here: [`JwtKeySource::current`] is one arc-swap load, and
//! [`JwtKeySource::generation`] (what a worker's verified-token cache compares against) one atomic
//! load. A worker that meets a token whose `kid` it does not know asks for an early fetch with
//! [`JwtKeySource::request_refresh`]: an atomic flag and, the first time it is raised, a call to
//! the waker the fetcher installed; no lock, no runtime (the waker is type-erased, so this crate
//! stays free of tokio). The fetcher decides when to honour the request (at most once per
//! `min_refresh`).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption, Guard};

use super::JwtKeySet;
use crate::defaults;
use crate::filter::endpoint::EndpointTls;
/// Where a JWKS document is fetched from (the filters' common HTTP endpoint).
pub use crate::filter::endpoint::HttpEndpoint as JwksEndpoint;

/// A key set and the generation it was published as.
#[derive(Debug)]
pub struct VersionedKeySet {
    /// 0 for the empty set a source starts with before its first fetch; then 1, 2, ...
    pub generation: u64,
    pub keys: JwtKeySet,
}

/// What a worker calls to wake the fetcher (installed by the fetcher).
pub type RefreshWaker = Box<dyn Fn() + Send + Sync>;

/// The current key set of one `jwt` filter.
pub struct JwtKeySource {
    current: ArcSwap<VersionedKeySet>,
    /// `current.generation`, readable with one load; stored after `current`, so a worker that
    /// reads it first and the set second never pairs a newer number with an older set.
    generation: AtomicU64,
    refresh_requested: AtomicBool,
    waker: ArcSwapOption<RefreshWaker>,
}

impl JwtKeySource {
    /// Keys that never change (PEM files, a secret): generation 1.
    pub fn fixed(keys: JwtKeySet) -> Self {
        Self::with(1, keys)
    }

    /// No keys until a fetcher publishes the first set (generation 0 until then).
    pub fn awaiting_fetch() -> Self {
        Self::with(0, JwtKeySet::default())
    }

    fn with(generation: u64, keys: JwtKeySet) -> Self {
        JwtKeySource {
            current: ArcSwap::from_pointee(VersionedKeySet { generation, keys }),
            generation: AtomicU64::new(generation),
            refresh_requested: AtomicBool::new(false),
            waker: ArcSwapOption::empty(),
        }
    }

    /// The current set, with its generation.
    pub fn current(&self) -> Guard<Arc<VersionedKeySet>> {
        self.current.load()
    }

    /// The current generation (one atomic load).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces the set (the fetcher's call); returns its generation.
    pub fn publish(&self, keys: JwtKeySet) -> u64 {
        let generation = self.current.load().generation + 1;
        self.current.store(Arc::new(VersionedKeySet { generation, keys }));
        self.generation.store(generation, Ordering::Release);
        generation
    }

    /// Asks the fetcher for an early fetch. Costs one load while a request is already pending,
    /// and wakes the fetcher only when the flag is raised.
    pub fn request_refresh(&self) {
        if self.refresh_requested.load(Ordering::Relaxed) {
            return;
        }
        if !self.refresh_requested.swap(true, Ordering::AcqRel) {
            if let Some(wake) = &*self.waker.load() {
                wake();
            }
        }
    }

    /// Whether an early fetch was asked for.
    pub fn refresh_requested(&self) -> bool {
        self.refresh_requested.load(Ordering::Acquire)
    }

    /// Lowers the flag (the fetcher's call, as it starts a fetch); says whether it was raised.
    pub fn take_refresh_request(&self) -> bool {
        self.refresh_requested.swap(false, Ordering::AcqRel)
    }

    /// Installs (or, with `None`, removes) the fetcher's waker.
    pub fn set_refresh_waker(&self, waker: Option<RefreshWaker>) {
        self.waker.store(waker.map(Arc::new));
    }
}

impl fmt::Debug for JwtKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current.load();
        f.debug_struct("JwtKeySource")
            .field("generation", &current.generation)
            .field("keys", &current.keys.len())
            .finish_non_exhaustive()
    }
}

/// How one JWKS document is fetched and refreshed.
#[derive(Clone)]
pub struct JwksFetch {
    pub endpoint: JwksEndpoint,
    /// For `https://`: the client configuration (trust roots) and the name the server's
    /// certificate must carry.
    pub tls: Option<EndpointTls>,
    /// Time between fetches when the answer has no `Cache-Control: max-age` (and the longest a
    /// `max-age` may stretch it to).
    pub refresh: Duration,
    /// Least time between two fetches (the shortest a `max-age` may make it; early requests
    /// wait for it too).
    pub min_refresh: Duration,
    /// Time for one whole fetch.
    pub timeout: Duration,
    /// First wait after a failure; doubled per failure, up to `refresh` and at most a minute.
    pub retry: Duration,
    /// Largest document accepted.
    pub max_body: usize,
    /// The snapshot index of the upstream of Rampart's own that the fetch is sent to (one per
    /// URL, made by the config compiler); `None` until it is set.
    pub upstream: Option<usize>,
}

impl JwksFetch {
    /// A fetch of `url` with the default intervals; `https://` needs `tls`.
    pub fn new(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Self, String> {
        let endpoint = JwksEndpoint::parse(url)?;
        let tls = endpoint.client_tls(tls)?;
        Ok(JwksFetch {
            endpoint,
            tls,
            refresh: defaults::JWKS_REFRESH,
            min_refresh: defaults::JWKS_MIN_REFRESH,
            timeout: defaults::JWKS_TIMEOUT,
            retry: defaults::JWKS_RETRY,
            max_body: defaults::JWKS_MAX_BODY,
            upstream: None,
        })
    }
}

impl fmt::Debug for JwksFetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwksFetch")
            .field("url", &self.endpoint.url)
            .field("refresh", &self.refresh)
            .field("min_refresh", &self.min_refresh)
            .field("timeout", &self.timeout)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}
