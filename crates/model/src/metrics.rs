//! Traffic counters, written by the workers and summed by the admin side on a scrape.
//!
//! Every listener, route, upstream and target of a snapshot carries one [`PerWorker`] set of
//! cells: one cell per worker, each on its own cache lines. A worker writes only its own cell
//! (a plain load and store, no locked instruction, no lock), so counting a request touches no
//! memory another worker writes. The label values (names) are fixed when the config is compiled,
//! and a request reaches its cells through indices it already has: nothing is allocated or hashed
//! per request. A reload that keeps a listener, route, upstream or target keeps its cells, so the
//! counters only grow.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A counter written by one thread only.
#[derive(Debug, Default)]
pub struct Count(AtomicU64);

impl Count {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A gauge written by one thread only; the sum over workers is the value (a worker's own share
/// may be negative, as when a connection opened on one snapshot's cells ends on another's).
#[derive(Debug, Default)]
pub struct Level(AtomicU64);

impl Level {
    #[inline]
    pub fn up(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_add(1), Relaxed);
    }

    #[inline]
    pub fn down(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_sub(1), Relaxed);
    }

    /// This worker's share (two's complement: sum the shares with wrapping arithmetic).
    pub fn get(&self) -> i64 {
        self.0.load(Relaxed) as i64
    }
}

/// A peak-EWMA of response times, written by one thread: a slower response replaces the average
/// at once, a faster one pulls it down by a tenth of the difference, or by more the longer it
/// came after the one before (all of it after [`PeakEwma::FORGET_MS`]), so an average made of a
/// slow burst does not outlive the burst on a target that now answers quickly but rarely. It
/// keeps when its last response came, so that the workers' averages are read as the freshest
/// ([`PeakEwma::freshest`]), not the highest.
#[derive(Debug, Default)]
pub struct PeakEwma {
    nanos: AtomicU64,
    /// The [`crate::health::now_ms`] value of the last response (0: none yet).
    at_ms: AtomicU64,
}

impl PeakEwma {
    /// A response this long after its predecessor replaces the average.
    pub const FORGET_MS: u64 = 1000;

    /// A response that took `took`, its head received at `now_ms` ([`crate::health::now_ms`]).
    #[inline]
    pub fn observe(&self, took: Duration, now_ms: u64) {
        let sample = nanos_of(took);
        let current = self.nanos.load(Relaxed);
        let since = now_ms.saturating_sub(self.at_ms.load(Relaxed));
        let next = if sample >= current {
            sample
        } else {
            // A tenth of the difference, up to all of it as the gap grows to FORGET_MS.
            let gap = since.clamp(Self::FORGET_MS / 10, Self::FORGET_MS);
            let pull = (current - sample).saturating_mul(gap) / Self::FORGET_MS;
            current - pull
        };
        self.nanos.store(next, Relaxed);
        self.at_ms.store(now_ms, Relaxed);
    }

    /// The average, or `None` before the first response.
    pub fn get(&self) -> Option<Duration> {
        let nanos = self.nanos.load(Relaxed);
        (nanos > 0).then(|| Duration::from_nanos(nanos))
    }

    /// The average of the worker that saw a response last, among `cells`: the freshest
    /// knowledge of the target (a worker that saw a slow burst and no response since does not
    /// speak for it).
    pub fn freshest<'a>(cells: impl IntoIterator<Item = &'a PeakEwma>) -> Option<Duration> {
        cells
            .into_iter()
            .filter(|c| c.nanos.load(Relaxed) > 0)
            .max_by_key(|c| c.at_ms.load(Relaxed))
            .and_then(PeakEwma::get)
    }
}

/// Nanoseconds in a `u64` (saturating after 584 years), without `u128` arithmetic.
#[inline]
fn nanos_of(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// Bucket upper bounds (seconds) of request and response durations: from 25 µs, so that
/// loopback and LAN latencies (tens to hundreds of microseconds) land in buckets of their own
/// rather than all in the first, then the usual 1-2.5-5 steps up to 10 s. Eighteen bounds: each
/// worker keeps one count per bucket per route and upstream, so the list stays short.
pub const LATENCY_BOUNDS: [f64; 18] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];
/// Bucket upper bounds (seconds) of TCP session durations.
pub const SESSION_BOUNDS: [f64; 12] = [0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0];

const fn nanos<const N: usize>(bounds: [f64; N]) -> [u64; N] {
    let mut out = [0u64; N];
    let mut i = 0;
    while i < N {
        out[i] = (bounds[i] * 1e9) as u64;
        i += 1;
    }
    out
}

const LATENCY_NANOS: [u64; 18] = nanos(LATENCY_BOUNDS);
const SESSION_NANOS: [u64; 12] = nanos(SESSION_BOUNDS);

/// A histogram written by one thread: a count per bucket (not cumulative; the last bucket is
/// `+Inf`) and the sum of the observations in nanoseconds.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    buckets: [Count; N],
    sum_nanos: Count,
}

impl<const N: usize> Default for Histogram<N> {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| Count::default()),
            sum_nanos: Count::default(),
        }
    }
}

impl<const N: usize> Histogram<N> {
    #[inline]
    fn observe_in(&self, bounds: &[u64], took: Duration) {
        let nanos = nanos_of(took);
        let bucket = bounds.iter().position(|&b| nanos <= b).unwrap_or(bounds.len());
        self.buckets[bucket].add(1);
        self.sum_nanos.add(nanos);
    }

    /// Adds this cell's buckets and sum into `into`.
    pub fn add_to(&self, into: &mut HistogramTotal) {
        if into.buckets.len() < N {
            into.buckets.resize(N, 0);
        }
        for (total, bucket) in into.buckets.iter_mut().zip(&self.buckets) {
            *total += bucket.get();
        }
        into.sum_nanos += self.sum_nanos.get();
    }
}

/// Request and response durations: [`LATENCY_BOUNDS`] and `+Inf`.
pub type LatencyHistogram = Histogram<19>;
/// TCP session durations: [`SESSION_BOUNDS`] and `+Inf`.
pub type SessionHistogram = Histogram<13>;

impl LatencyHistogram {
    #[inline]
    pub fn observe(&self, took: Duration) {
        self.observe_in(&LATENCY_NANOS, took);
    }
}

impl SessionHistogram {
    #[inline]
    pub fn observe(&self, took: Duration) {
        self.observe_in(&SESSION_NANOS, took);
    }
}

/// A histogram summed over workers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramTotal {
    /// Per bucket, not cumulative, the last one `+Inf`.
    pub buckets: Vec<u64>,
    pub sum_nanos: u64,
}

impl HistogramTotal {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// One cell per worker, each aligned to its own cache lines.
#[derive(Debug)]
pub struct PerWorker<C> {
    cells: Box<[Padded<C>]>,
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<C>(C);

impl<C: Default> PerWorker<C> {
    /// Cells for `workers` workers (at least one).
    pub fn new(workers: usize) -> Self {
        PerWorker {
            cells: (0..workers.max(1)).map(|_| Padded::default()).collect(),
        }
    }
}

impl<C> PerWorker<C> {
    /// Worker `id`'s cell. Every snapshot of a process has a cell per worker; an id past them
    /// (which a correct caller never has) shares the last one rather than panic.
    #[inline]
    pub fn worker(&self, id: usize) -> &C {
        debug_assert!(id < self.cells.len(), "worker {id} has no metric cell");
        &self.cells[id.min(self.cells.len() - 1)].0
    }

    /// Every worker's cell, for summing.
    pub fn iter(&self) -> impl Iterator<Item = &C> {
        self.cells.iter().map(|p| &p.0)
    }

    /// How many workers this set was made for.
    pub fn workers(&self) -> usize {
        self.cells.len()
    }
}

/// Response status classes, `1xx` to `5xx`.
pub const CODE_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The index in [`CODE_CLASSES`] of `status` (out-of-range statuses count as `5xx`).
#[inline]
pub fn code_class(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// Why the connection stage refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedReason {
    /// The listener's connection limit.
    Limit,
    /// A missing, malformed or late PROXY header.
    ProxyHeader,
    /// A failed or timed-out TLS handshake (or plain HTTP sent to a TLS port).
    Tls,
}

impl RefusedReason {
    pub const ALL: [RefusedReason; 3] = [RefusedReason::Limit, RefusedReason::ProxyHeader, RefusedReason::Tls];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusedReason::Limit => "limit",
            RefusedReason::ProxyHeader => "proxy_header",
            RefusedReason::Tls => "tls",
        }
    }
}

/// Why an attempt to use a target failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamErrorKind {
    /// The TCP connect failed or timed out.
    Connect,
    /// The connection broke before or during the response.
    Reset,
    /// No response head, body bytes or request progress in time.
    Timeout,
    /// A malformed response head or body.
    BadResponse,
    /// The TLS handshake failed (certificate not verified, nothing in common).
    Tls,
}

impl UpstreamErrorKind {
    pub const ALL: [UpstreamErrorKind; 5] = [
        UpstreamErrorKind::Connect,
        UpstreamErrorKind::Reset,
        UpstreamErrorKind::Timeout,
        UpstreamErrorKind::BadResponse,
        UpstreamErrorKind::Tls,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamErrorKind::Connect => "connect",
            UpstreamErrorKind::Reset => "reset",
            UpstreamErrorKind::Timeout => "timeout",
            UpstreamErrorKind::BadResponse => "bad_response",
            UpstreamErrorKind::Tls => "tls",
        }
    }
}

/// A listener's cells. Its open connections are [`crate::Listener::open_connections`].
#[derive(Debug, Default)]
pub struct ListenerCells {
    pub accepted: Count,
    /// By [`RefusedReason`] (its discriminant).
    pub refused: [Count; 3],
    /// Bytes from clients.
    pub bytes_in: Count,
    /// Bytes to clients.
    pub bytes_out: Count,
    /// TCP listeners: how long each session lasted.
    pub session_duration: SessionHistogram,
}

impl ListenerCells {
    #[inline]
    pub fn refused(&self, reason: RefusedReason) -> &Count {
        &self.refused[reason as usize]
    }
}

/// A route's cells (also used for an HTTP listener's requests that matched no route).
#[derive(Debug, Default)]
pub struct RouteCells {
    /// By [`code_class`] of the status the client got.
    pub requests: [Count; 5],
    /// From the first byte of the request head to the end of the response.
    pub duration: LatencyHistogram,
    /// Requests on a route with a `cache`, by [`crate::cache::CacheOutcome`].
    pub cache: [Count; 5],
}

/// A TCP route's cells (also used for a TCP listener's default, route `""`).
#[derive(Debug, Default)]
pub struct TcpRouteCells {
    /// Connections the route took.
    pub connections: Count,
    /// Of those, the ones that went here because nothing decided before the peek timeout or the
    /// peek limit (the default only).
    pub undecided: Count,
    /// Connections a payload filter closed.
    pub filter_closes: Count,
}

/// An upstream's cells.
#[derive(Debug, Default)]
pub struct UpstreamCells {
    /// From the request sent to the response head received.
    pub response_duration: LatencyHistogram,
    /// Attempts made again after a failure.
    pub retries: Count,
    /// Retries not made because the retry budget was spent.
    pub retries_over_budget: Count,
    /// Requests that waited in the upstream's queue, and those answered 503 because it was full
    /// or their wait ran out.
    pub queued: Count,
    pub queue_full: Count,
    pub queue_timeout: Count,
    /// Copies of requests sent to it as a route's mirror, and those that got no response head.
    pub mirrored: Count,
    pub mirror_failed: Count,
    /// This worker's retry budget account ([`crate::retry::RetryBudget`]).
    pub retry_tokens: crate::retry::RetryTokens,

    /// Requests (answered 503) and TCP connections (closed) that found no available target to
    /// try: every target down, drained or in its passive backoff.
    pub no_target: Count,
}

/// A target's cells.
#[derive(Debug, Default)]
pub struct TargetCells {
    /// Responses received, by [`code_class`] of the target's status.
    pub responses: [Count; 5],
    /// By [`UpstreamErrorKind`] (its discriminant).
    pub errors: [Count; 5],
    /// Connections opened to it.
    pub opened: Count,
    /// Requests sent on a pooled connection.
    pub reused: Count,
    /// HTTP requests in flight to it, or TCP sessions relayed to it.
    pub active: Level,
    /// Times outlier detection ejected it (counted by the worker that saw the last bad outcome).
    pub ejections: Count,
    /// Response times (HTTP) as this worker saw them.
    pub latency: PeakEwma,
}

impl TargetCells {
    #[inline]
    pub fn error(&self, kind: UpstreamErrorKind) -> &Count {
        &self.errors[kind as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_upper_bounds() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(25)); // exactly the first bound
        h.observe(Duration::from_micros(26));
        h.observe(Duration::from_secs(11)); // past the last bound
        let mut total = HistogramTotal::default();
        h.add_to(&mut total);
        h.add_to(&mut total);
        assert_eq!(total.buckets.len(), 19);
        assert_eq!(total.buckets[0], 2);
        assert_eq!(total.buckets[1], 2);
        assert_eq!(total.buckets[18], 2);
        assert_eq!(total.count(), 6);
        assert_eq!(total.sum_nanos, 2 * (25_000 + 26_000 + 11_000_000_000));
    }

    #[test]
    fn loopback_latencies_get_buckets_of_their_own() {
        // 70 µs and 300 µs (a loopback and a LAN round trip) land in different buckets, neither
        // in the first.
        let bucket = |d: Duration| LATENCY_NANOS.iter().position(|&b| d.as_nanos() as u64 <= b);
        let (fast, lan) = (bucket(Duration::from_micros(70)), bucket(Duration::from_micros(300)));
        assert_eq!(fast, Some(2));
        assert_eq!(lan, Some(4));
        assert!(LATENCY_BOUNDS.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
    }

    #[test]
    fn levels_sum_over_workers_with_wrapping() {
        let set: PerWorker<Level> = PerWorker::new(2);
        set.worker(0).up();
        set.worker(0).up();
        set.worker(1).down();
        let sum = set.iter().fold(0i64, |s, l| s.wrapping_add(l.get()));
        assert_eq!(sum, 1);
    }

    #[test]
    fn peak_ewma_jumps_up_and_decays_down() {
        let e = PeakEwma::default();
        assert_eq!(e.get(), None);
        e.observe(Duration::from_millis(10), 1);
        assert_eq!(e.get(), Some(Duration::from_millis(10)));
        e.observe(Duration::from_millis(100), 2);
        assert_eq!(e.get(), Some(Duration::from_millis(100)));
        // Close behind: a tenth of the difference.
        e.observe(Duration::ZERO, 3);
        assert_eq!(e.get(), Some(Duration::from_millis(90)));
        // Half a second later: half of it; a second or more later: all of it.
        e.observe(Duration::from_millis(10), 503);
        assert_eq!(e.get(), Some(Duration::from_millis(50)));
        e.observe(Duration::from_millis(2), 5000);
        assert_eq!(e.get(), Some(Duration::from_millis(2)));
    }

    #[test]
    fn the_freshest_worker_speaks_for_a_target_not_the_slowest() {
        // Worker 0 saw a slow burst at 1 s and nothing since; worker 1 sees 2 ms answers now.
        let set: PerWorker<PeakEwma> = PerWorker::new(3);
        set.worker(0).observe(Duration::from_millis(1010), 1000);
        set.worker(1).observe(Duration::from_millis(2), 40_000);
        assert_eq!(PeakEwma::freshest(set.iter()), Some(Duration::from_millis(2)));
        assert_eq!(PeakEwma::freshest(PerWorker::<PeakEwma>::new(2).iter()), None);
    }

    #[test]
    fn code_classes() {
        assert_eq!(CODE_CLASSES[code_class(101)], "1xx");
        assert_eq!(CODE_CLASSES[code_class(204)], "2xx");
        assert_eq!(CODE_CLASSES[code_class(404)], "4xx");
        assert_eq!(CODE_CLASSES[code_class(503)], "5xx");
        assert_eq!(CODE_CLASSES[code_class(0)], "5xx");
    }

    #[test]
    fn cells_do_not_share_cache_lines() {
        let set: PerWorker<Count> = PerWorker::new(3);
        let a = set.worker(0) as *const Count as usize;
        let b = set.worker(1) as *const Count as usize;
        assert!(b - a >= 128);
    }
}
