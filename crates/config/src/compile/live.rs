//! State that a reload carries over from one snapshot to the next.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use rampart_model::filter::jwt::JwtKeySource;
use rampart_model::filter::rate_limit::{BucketStore, LocalBuckets, RateLimitError, PROBE};
use rampart_model::filter::{Filter, FilterRegistry, FilterSlot};
use rampart_model::health::TargetHealth;
use rampart_model::metrics::{ListenerCells, PerWorker, RouteCells, TargetCells, TcpRouteCells, UpstreamCells};
use rampart_model::Snapshot;

use super::filter_slots::{DefinitionDigest, FilterSlots};
use super::tls;

/// State that outlives one snapshot: target health, listener connection counts and traffic
/// counters, keyed so that a reload which keeps a target, listener or route keeps its state too.
#[derive(Debug, Default)]
pub struct LiveState {
    generation: u64,
    health: HashMap<(String, SocketAddr), Arc<TargetHealth>>,
    open: HashMap<(rampart_model::Transport, SocketAddr), Arc<AtomicUsize>>,
    /// TLS ticket keys and session caches by listener address.
    tls: HashMap<SocketAddr, tls::Resumption>,
    /// The number of workers, fixed by the first load (metric cells are made per worker).
    workers: Option<usize>,
    metrics: MetricCells,
    /// Filter types registered from outside the built-ins.
    filters: FilterRegistry,
    /// The key sources of `jwt` filters by JWKS URL: a reload keeps the keys fetched so far.
    jwks: HashMap<String, Arc<JwtKeySource>>,
    /// LOCAL rate-limit tables by the filter's scope: a reload keeps what clients have spent.
    rate_buckets: HashMap<String, Arc<LocalBuckets>>,
    /// The slots of filters' per-worker state: a reload keeps an unchanged filter's.
    filter_slots: FilterSlots,
    /// What the ACME client publishes (certificates, challenge answers): one for the process.
    acme: Arc<rampart_model::acme::AcmeShared>,
    /// HTTP cache stores by name: a reload keeps what they hold while a route uses them and
    /// their size is the same.
    caches: HashMap<
        String,
        (
            Arc<rampart_model::cache::CacheStore>,
            Arc<rampart_model::cache::CacheInFlight>,
        ),
    >,
    /// HTTP caches' disk stores by name: a reload keeps one while its directory and size are
    /// the same (opening one reads the head of every file in it).
    cache_disks: HashMap<String, Arc<rampart_model::cache::DiskStore>>,
}

/// Traffic counters by the names that label them.
#[derive(Debug, Default)]
struct MetricCells {
    listeners: HashMap<String, Arc<PerWorker<ListenerCells>>>,
    /// By listener and route name; the route name `""` holds requests that matched no route.
    routes: HashMap<(String, String), Arc<PerWorker<RouteCells>>>,
    /// By TCP listener and route name; the route name `""` holds the default's connections.
    tcp_routes: HashMap<(String, String), Arc<PerWorker<TcpRouteCells>>>,
    upstreams: HashMap<String, Arc<PerWorker<UpstreamCells>>>,
    targets: HashMap<(String, String), Arc<PerWorker<TargetCells>>>,
}

impl LiveState {
    /// State for a process whose worker count the command line fixed (or `None` to take it from
    /// the first config loaded, else one per CPU).
    pub fn new(workers: Option<usize>) -> Self {
        LiveState {
            workers,
            ..Default::default()
        }
    }

    /// This state with `registry`'s filter types known to the compiler.
    pub fn with_filters(mut self, registry: FilterRegistry) -> Self {
        self.filters = registry;
        self
    }

    /// The filter types registered from outside the built-ins.
    pub fn filter_registry(&self) -> &FilterRegistry {
        &self.filters
    }

    /// The number of workers: fixed by the first load (by the command line, the config's
    /// `workers`, or one per CPU) and kept by every reload.
    pub fn workers(&self) -> usize {
        self.workers.unwrap_or(1)
    }

    /// The worker id of the control plane's own context (the active health checks' requests):
    /// the metric cells have one past the workers' for it.
    pub fn control_plane_id(&self) -> usize {
        self.workers()
    }

    /// Fixes the worker count at the first load; later loads keep it.
    pub(super) fn fix_workers(&mut self, configured: Option<usize>) {
        if self.workers.is_none() {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            self.workers = Some(configured.unwrap_or(cpus));
        }
    }

    pub(super) fn listener_metrics(&mut self, listener: &str) -> Arc<PerWorker<ListenerCells>> {
        let workers = self.workers();
        kept(&mut self.metrics.listeners, listener.to_string(), workers)
    }

    /// The cells of route `route` of `listener` (`""`: the requests that matched no route).
    pub(super) fn route_metrics(&mut self, listener: &str, route: &str) -> Arc<PerWorker<RouteCells>> {
        let key = (listener.to_string(), route.to_string());
        let workers = self.workers();
        kept(&mut self.metrics.routes, key, workers)
    }

    /// The cells of TCP route `route` of `listener` (`""`: the listener's default).
    pub(super) fn tcp_route_metrics(&mut self, listener: &str, route: &str) -> Arc<PerWorker<TcpRouteCells>> {
        let key = (listener.to_string(), route.to_string());
        let workers = self.workers();
        kept(&mut self.metrics.tcp_routes, key, workers)
    }

    pub(super) fn upstream_metrics(&mut self, upstream: &str) -> Arc<PerWorker<UpstreamCells>> {
        let workers = self.workers();
        kept(&mut self.metrics.upstreams, upstream.to_string(), workers)
    }

    pub(super) fn target_metrics(&mut self, upstream: &str, target: &str) -> Arc<PerWorker<TargetCells>> {
        let key = (upstream.to_string(), target.to_string());
        let workers = self.workers();
        kept(&mut self.metrics.targets, key, workers)
    }

    pub(super) fn target_health(&mut self, upstream: &str, addr: SocketAddr) -> Arc<TargetHealth> {
        // The first load's targets were there from the start: slow start does not ramp them.
        let first_load = self.generation == 0;
        self.health
            .entry((upstream.to_string(), addr))
            .or_insert_with(|| {
                Arc::new(if first_load {
                    TargetHealth::from_start()
                } else {
                    TargetHealth::default()
                })
            })
            .clone()
    }

    /// What the ACME client publishes and listeners read: the same for every load.
    pub fn acme(&self) -> Arc<rampart_model::acme::AcmeShared> {
        self.acme.clone()
    }

    pub(super) fn open_connections(
        &mut self,
        transport: rampart_model::Transport,
        bind: SocketAddr,
    ) -> Arc<AtomicUsize> {
        self.open.entry((transport, bind)).or_default().clone()
    }

    /// The ticket keys and session cache of the TLS listener on `bind`, kept across reloads (a
    /// new cache when its size changed). `None` if ticket keys cannot be made.
    pub(super) fn tls_resumption(&mut self, bind: Option<SocketAddr>, cache_size: usize) -> Option<tls::Resumption> {
        let Some(bind) = bind else {
            return tls::Resumption::new(cache_size);
        };
        match self.tls.get(&bind) {
            Some(r) if r.cache_size == cache_size => Some(r.clone()),
            _ => {
                let r = tls::Resumption::new(cache_size)?;
                self.tls.insert(bind, r.clone());
                Some(r)
            }
        }
    }

    /// The key source of the JWKS at `url`, shared by every `jwt` filter that names it and kept
    /// across reloads.
    pub(super) fn jwks_source(&mut self, url: &str) -> Arc<JwtKeySource> {
        self.jwks
            .entry(url.to_string())
            .or_insert_with(|| Arc::new(JwtKeySource::awaiting_fetch()))
            .clone()
    }

    /// The LOCAL buckets of the rate limit at `scope`: the ones a previous load made, unless
    /// their size changed.
    pub(super) fn rate_limit_buckets(
        &mut self,
        scope: &str,
        max_keys: usize,
    ) -> Result<Arc<LocalBuckets>, RateLimitError> {
        let wanted = max_keys.max(PROBE).next_power_of_two();
        match self.rate_buckets.get(scope) {
            Some(b) if b.capacity() == wanted => Ok(b.clone()),
            _ => {
                let buckets = Arc::new(LocalBuckets::new(max_keys)?);
                self.rate_buckets.insert(scope.to_string(), buckets.clone());
                Ok(buckets)
            }
        }
    }

    /// Starts handing out filter slots for a load (see [`super::filter_slots`]).
    pub(super) fn begin_filter_slots(&mut self) {
        self.filter_slots.begin_load();
    }

    /// The slot of the filter defined in `place` as `definition`.
    pub(super) fn filter_slot(&mut self, place: &str, definition: DefinitionDigest) -> FilterSlot {
        self.filter_slots.slot(place, definition)
    }

    pub(super) fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Forgets state that `snapshot` no longer uses.
    /// The store of `[caches.NAME]`, of `size` bytes, and its misses in flight: the ones a
    /// previous load made when its size is the same, else a new, empty store.
    pub(super) fn cache_store(
        &mut self,
        name: &str,
        size: usize,
    ) -> (
        Arc<rampart_model::cache::CacheStore>,
        Arc<rampart_model::cache::CacheInFlight>,
    ) {
        let (store, in_flight) = self.caches.entry(name.to_string()).or_insert_with(|| {
            (
                Arc::new(rampart_model::cache::CacheStore::new(size)),
                Default::default(),
            )
        });
        if store.capacity() != size {
            *store = Arc::new(rampart_model::cache::CacheStore::new(size));
        }
        (store.clone(), in_flight.clone())
    }

    /// The disk store of `[caches.NAME]` in `dir`, of `size` bytes, following `targets`: the one a
    /// previous load opened when all three are the same, else the directory opened anew.
    pub(super) fn cache_disk(
        &mut self,
        name: &str,
        dir: &std::path::Path,
        size: usize,
        targets: &rampart_model::cache::Targets,
    ) -> Result<Arc<rampart_model::cache::DiskStore>, rampart_model::cache::DiskError> {
        if let Some(disk) = self.cache_disks.get(name) {
            if disk.dir() == dir && disk.capacity() == size && disk.targets() == targets {
                return Ok(disk.clone());
            }
        }
        let disk = Arc::new(rampart_model::cache::DiskStore::open(dir, size, targets.clone())?);
        self.cache_disks.insert(name.to_string(), disk.clone());
        Ok(disk)
    }

    pub(super) fn keep_only(&mut self, snapshot: &Snapshot) {
        self.filter_slots.commit();
        let used: Vec<&str> = snapshot
            .listeners
            .iter()
            .filter_map(|l| l.http())
            .flat_map(|h| &h.routes)
            .filter_map(|r| r.cache.as_ref().map(|c| c.store_name.as_str()))
            .collect();
        self.caches.retain(|name, _| used.contains(&name.as_str()));
        self.cache_disks.retain(|name, _| used.contains(&name.as_str()));
        // Targets found by DNS come back when the answers are published: keep their state.
        self.forget_targets(snapshot, true);
        self.open.retain(|(transport, bind), _| {
            snapshot
                .listeners
                .iter()
                .any(|l| l.bind == Some(*bind) && l.transport() == *transport)
        });
        self.tls.retain(|bind, _| {
            snapshot
                .listeners
                .iter()
                .any(|l| l.bind == Some(*bind) && l.tls.is_some())
        });
        let jwks_urls: Vec<&str> = snapshot
            .http_filters()
            .filter_map(|f| match f {
                Filter::Jwt(jwt) => jwt.jwks.as_ref().map(|j| j.endpoint.url.as_str()),
                _ => None,
            })
            .collect();
        self.jwks.retain(|url, _| jwks_urls.contains(&url.as_str()));
        let scopes: Vec<&str> = snapshot
            .http_filters()
            .filter_map(|f| match f {
                Filter::RateLimit(r) if matches!(r.store, BucketStore::Local(_)) => Some(r.scope.as_str()),
                _ => None,
            })
            .collect();
        self.rate_buckets.retain(|scope, _| scopes.contains(&scope.as_str()));
        let listener = |name: &str| snapshot.listeners.iter().find(|l| l.name == name);
        let upstream = |name: &str| snapshot.upstreams.iter().find(|u| u.name == name);
        let m = &mut self.metrics;
        m.listeners.retain(|name, _| listener(name).is_some());
        m.routes.retain(|(l, r), _| {
            listener(l)
                .and_then(|l| l.http())
                .is_some_and(|h| r.is_empty() || h.routes.iter().any(|route| &route.name == r))
        });
        m.tcp_routes.retain(|(l, r), _| {
            listener(l)
                .and_then(|l| l.tcp_routing())
                .is_some_and(|t| r.is_empty() || t.routes.iter().any(|route| &route.name == r))
        });
        m.upstreams.retain(|name, _| upstream(name).is_some());
    }

    /// Forgets the health and counters of targets that `snapshot` no longer has; with
    /// `keep_discovered`, those of any target of an upstream with DNS lookups are kept (a load
    /// compiles such upstreams without the targets the answers give).
    pub(super) fn forget_targets(&mut self, snapshot: &Snapshot, keep_discovered: bool) {
        let upstream = |name: &str| snapshot.upstreams.iter().find(|u| u.name == name);
        let kept = |u: &rampart_model::Upstream| keep_discovered && !u.lookups.is_empty();
        self.health
            .retain(|(up, addr), _| upstream(up).is_some_and(|u| kept(u) || u.targets.iter().any(|t| &t.addr == addr)));
        self.metrics
            .targets
            .retain(|(up, t), _| upstream(up).is_some_and(|u| kept(u) || u.targets.iter().any(|x| &x.name == t)));
    }
}

/// The cells kept under `key`, made the first time: one per worker (ids `0..workers`), and one
/// more, id `workers`, for the control plane's context ([`LiveState::control_plane_id`]), which no worker
/// writes.
fn kept<K: Eq + std::hash::Hash, C: Default>(
    cells: &mut HashMap<K, Arc<PerWorker<C>>>,
    key: K,
    workers: usize,
) -> Arc<PerWorker<C>> {
    cells
        .entry(key)
        .or_insert_with(|| Arc::new(PerWorker::new(workers + 1)))
        .clone()
}
