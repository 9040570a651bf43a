//! Balancing policies. The choice is made by each worker from its own state (round-robin cursor,
//! smooth-weight counters, its own open-connection counts, its own random generator), so choosing a
//! target never writes shared memory. Consistent hashing uses an immutable Maglev table built at
//! config compile time.

use std::time::{Duration, Instant};

use rampart_model::health::now_ms;

pub use rampart_model::balance::{client_hash, hash_bytes, BalancePolicy, HashKey, Maglev};

use rampart_model::Upstream;

/// How fast a latency average forgets: a sample `DECAY` old weighs 1/e of a new one.
const DECAY_SECS: f64 = 10.0;

/// One target's moving average of latency, as seen by one worker.
#[derive(Debug, Clone, Copy, Default)]
struct Latency {
    nanos: f64,
    at: Option<Instant>,
}

impl Latency {
    /// Peak EWMA: a slower sample replaces the average at once, faster ones pull it down with a
    /// weight that grows with the time since the last sample.
    fn observe(&mut self, sample: Duration, now: Instant) {
        let sample = sample.as_nanos() as f64;
        self.nanos = match self.at {
            Some(at) if sample < self.nanos => {
                let keep = (-now.saturating_duration_since(at).as_secs_f64() / DECAY_SECS).exp();
                self.nanos * keep + sample * (1.0 - keep)
            }
            _ => sample,
        };
        self.at = Some(now);
    }

    /// The average as of `now`: without new samples it decays towards zero.
    fn current(&self, now: Instant) -> f64 {
        match self.at {
            None => 0.0,
            Some(at) => self.nanos * (-now.saturating_duration_since(at).as_secs_f64() / DECAY_SECS).exp(),
        }
    }
}

/// How many times a pick that landed on a target in slow start is made again, at most.
const SLOW_START_PICKS: usize = 4;

/// The targets a first pick passes over: those whose time in `until` is after `now`.
#[derive(Clone, Copy)]
struct PassOver<'a> {
    until: &'a [u64],
    now: u64,
}

impl PassOver<'_> {
    fn skips(&self, target: usize) -> bool {
        self.until.get(target).is_some_and(|u| *u > self.now)
    }
}

/// Targets already tried for one client connection (at most [`Tried::CAPACITY`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Tried {
    indices: [usize; Tried::CAPACITY],
    len: usize,
}

impl Tried {
    pub const CAPACITY: usize = 8;

    pub fn contains(&self, index: usize) -> bool {
        self.indices[..self.len].contains(&index)
    }

    /// Adds `index` (once: a target tried twice is one target).
    pub fn push(&mut self, index: usize) {
        if self.len < Self::CAPACITY && !self.contains(index) {
            self.indices[self.len] = index;
            self.len += 1;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One worker's balancing state for one upstream.
#[derive(Debug)]
pub struct BalancerState {
    cursor: usize,
    smooth_current: Vec<i64>,
    open: Vec<u32>,
    latency: Vec<Latency>,
    rng: u64,
    /// Until when ([`now_ms`]) each target is passed over by first picks after it failed one,
    /// and the latest of those times (0: none is), so that a pick reads the clock only while
    /// some target is passed over.
    pass_over_until: Vec<u64>,
    pass_over_latest: u64,
}

impl BalancerState {
    pub fn new(targets: usize, seed: u64) -> Self {
        BalancerState {
            cursor: (seed as usize) % targets.max(1),
            smooth_current: vec![0; targets],
            open: vec![0; targets],
            latency: vec![Latency::default(); targets],
            rng: seed | 1,
            pass_over_until: vec![0; targets],
            pass_over_latest: 0,
        }
    }

    /// `target` just failed a request: first picks pass it over for `time` (the upstream's
    /// `retry_pass_over`; HAProxy's `redispatch` with `observe`), unless no other is left.
    pub fn pass_over(&mut self, target: usize, time: Duration) {
        if time.is_zero() {
            return;
        }
        if let Some(until) = self.pass_over_until.get_mut(target) {
            *until = now_ms() + time.as_millis() as u64;
            self.pass_over_latest = self.pass_over_latest.max(*until);
        }
    }

    /// Whether any target is passed over now: the time when one is.
    fn passing_over(&mut self) -> Option<u64> {
        if self.pass_over_latest == 0 {
            return None;
        }
        let now = now_ms();
        if now >= self.pass_over_latest {
            self.pass_over_latest = 0;
            return None;
        }
        Some(now)
    }

    /// Chooses an available target not in `tried`, or `None` when there is none. `key` is the
    /// hash for [`BalancePolicy::ConsistentHash`] (unused by the other policies). Backup targets
    /// are chosen from only when no primary target is available (down, drained, or tried).
    ///
    /// A `first` pick (a request's first attempt) takes a turn (the round-robin cursor, the
    /// smooth weights move on) and passes over targets that just failed a request while others
    /// are left; a retry's pick takes no turn, so that the next request's first pick is not
    /// moved along by another's failure.
    pub fn pick(&mut self, upstream: &Upstream, key: u64, tried: &Tried, first: bool) -> Option<usize> {
        // Every per-target vector was sized for this upstream's targets (the worker rebuilds the
        // state for each snapshot): with that checked once here, the indices below stay in bounds.
        let n = upstream.targets.len();
        if [
            self.open.len(),
            self.latency.len(),
            self.smooth_current.len(),
            self.pass_over_until.len(),
        ] != [n; 4]
        {
            return None;
        }
        let Some(now) = (if first { self.passing_over() } else { None }) else {
            return self.pick_ramped(upstream, key, tried, first, None);
        };
        // The pass-over times are set aside while picking (the choice borrows them): no copy.
        let until = std::mem::take(&mut self.pass_over_until);
        let picked = self.pick_ramped(upstream, key, tried, first, Some(PassOver { until: &until, now }));
        self.pass_over_until = until;
        picked
    }

    fn pick_ramped(
        &mut self,
        upstream: &Upstream,
        key: u64,
        tried: &Tried,
        turn: bool,
        passed_over: Option<PassOver<'_>>,
    ) -> Option<usize> {
        let mut picked = self.pick_once(upstream, key, tried, turn, passed_over)?;
        let Some(window) = upstream.slow_start else {
            return Some(picked);
        };
        // Slow start: a target still ramping up is kept with the chance of its share, else the
        // balancer picks again (a few times; then the last pick stands), so its traffic rises
        // with its share while targets ramping together share alike.
        for _ in 0..SLOW_START_PICKS {
            let Some(target) = upstream.targets.get(picked) else {
                break;
            };
            let share = target.health.slow_start_share(window);
            let draw = (self.next_random() >> 11) as f64 / (1u64 << 53) as f64;
            if share >= 1.0 || draw < share {
                break;
            }
            picked = self
                .pick_once(upstream, key, tried, turn, passed_over)
                .unwrap_or(picked);
        }
        Some(picked)
    }

    /// A pick among the targets not passed over, else among all (primaries first, then backups).
    fn pick_once(
        &mut self,
        upstream: &Upstream,
        key: u64,
        tried: &Tried,
        turn: bool,
        passed_over: Option<PassOver<'_>>,
    ) -> Option<usize> {
        let among = |this: &mut Self, skip: Option<PassOver<'_>>| {
            this.pick_among(upstream, key, tried, false, turn, skip)
                .or_else(|| this.pick_among(upstream, key, tried, true, turn, skip))
        };
        if passed_over.is_some() {
            if let Some(picked) = among(self, passed_over) {
                return Some(picked);
            }
        }
        among(self, None)
    }

    /// [`BalancerState::pick`] among the primary targets, or among the backups, leaving out
    /// those `skip` names.
    fn pick_among(
        &mut self,
        upstream: &Upstream,
        key: u64,
        tried: &Tried,
        backups: bool,
        turn: bool,
        skip: Option<PassOver<'_>>,
    ) -> Option<usize> {
        let weight = |i: usize| upstream.targets.get(i).map_or(1, |t| t.weight);
        let usable = |i: usize| {
            let Some(t) = upstream.targets.get(i) else { return false };
            t.backup == backups && !tried.contains(i) && !skip.is_some_and(|p| p.skips(i)) && t.health.is_available()
        };
        let n = upstream.targets.len();
        match upstream.policy {
            BalancePolicy::RoundRobin => {
                let found = (0..n).map(|k| (self.cursor + k) % n).find(|&i| usable(i))?;
                if turn {
                    self.cursor = (found + 1) % n;
                }
                Some(found)
            }
            BalancePolicy::WeightedRoundRobin => {
                // Smooth weighted round robin; a pick that takes no turn looks ahead only.
                let mut total = 0i64;
                let mut best: Option<(usize, i64)> = None;
                for i in (0..n).filter(|&i| usable(i)) {
                    let weight = i64::from(weight(i));
                    let current = self.smooth_current[i] + weight;
                    if turn {
                        self.smooth_current[i] = current;
                    }
                    total += weight;
                    if best.is_none_or(|(_, b)| current > b) {
                        best = Some((i, current));
                    }
                }
                let (best, _) = best?;
                if turn {
                    self.smooth_current[best] -= total;
                }
                Some(best)
            }
            BalancePolicy::LeastConnections => {
                // Compare open/weight without division; start at the cursor so ties rotate.
                let mut best: Option<usize> = None;
                for i in (0..n).map(|k| (self.cursor + k) % n).filter(|&i| usable(i)) {
                    let better = best.is_none_or(|b| {
                        u64::from(self.open[i]) * u64::from(weight(b)) < u64::from(self.open[b]) * u64::from(weight(i))
                    });
                    if better {
                        best = Some(i);
                    }
                }
                let best = best?;
                if turn {
                    self.cursor = (best + 1) % n;
                }
                Some(best)
            }
            BalancePolicy::RandomTwo => {
                let (a, b) = self.two_random(n, usable)?;
                let load = |i: usize| u64::from(self.open[i]) * 1024 / u64::from(weight(i).max(1));
                Some(b.filter(|&b| load(b) < load(a)).unwrap_or(a))
            }
            BalancePolicy::P2cEwma => {
                let (a, b) = self.two_random(n, usable)?;
                let Some(b) = b else { return Some(a) };
                let now = Instant::now();
                let cost =
                    |i: usize| self.latency[i].current(now) * f64::from(self.open[i] + 1) / f64::from(weight(i).max(1));
                let (ca, cb) = (cost(a), cost(b));
                // Equal costs (both never measured, say) fall back to fewer open.
                Some(if cb < ca || (cb == ca && self.open[b] < self.open[a]) {
                    b
                } else {
                    a
                })
            }
            BalancePolicy::ConsistentHash => {
                let maglev = upstream.maglev.as_ref()?;
                if !(0..n).any(usable) {
                    return None;
                }
                maglev.lookup(key, usable)
            }
        }
    }

    /// A connection to `target` opened.
    pub fn opened(&mut self, target: usize) {
        if let Some(c) = self.open.get_mut(target) {
            *c += 1;
        }
    }

    /// A connection to `target` closed.
    pub fn closed(&mut self, target: usize) {
        if let Some(c) = self.open.get_mut(target) {
            *c = c.saturating_sub(1);
        }
    }

    /// A response time (or connect time) of `target`, for [`BalancePolicy::P2cEwma`].
    pub fn observe_latency(&mut self, target: usize, sample: Duration) {
        if let Some(l) = self.latency.get_mut(target) {
            l.observe(sample, Instant::now());
        }
    }

    /// Two distinct random usable targets (the second is `None` when only one is usable).
    fn two_random(&mut self, n: usize, usable: impl Fn(usize) -> bool) -> Option<(usize, Option<usize>)> {
        let available = (0..n).filter(|&i| usable(i)).count();
        if available == 0 {
            return None;
        }
        let nth = |rank: usize| (0..n).filter(|&i| usable(i)).nth(rank);
        let a = nth(self.next_random() as usize % available)?;
        if available == 1 {
            return Some((a, None));
        }
        let mut rank_b = self.next_random() as usize % (available - 1);
        let rank_a = (0..a).filter(|&i| usable(i)).count();
        if rank_b >= rank_a {
            rank_b += 1;
        }
        Some((a, nth(rank_b)))
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: fast, per worker, good enough for balancing.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests;
