//! Per-target health, written by the control plane's active checker and by workers on failed
//! connects (rare events), read by workers on every target choice.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds since the first call in this process: a cheap monotonic clock for backoffs.
pub fn now_ms() -> u64 {
    ms_at(Instant::now())
}

/// [`now_ms`] at `at`, a time already read (so a caller that has one reads no clock again).
pub fn ms_at(at: Instant) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    at.saturating_duration_since(*START.get_or_init(|| at)).as_millis() as u64 + 1
}

/// How failed connects mark a target down.
#[derive(Debug, Clone, Copy)]
pub struct PassiveHealth {
    /// Down time after the first failure; doubles with each further consecutive failure.
    pub base_backoff: Duration,
    /// Upper bound of the down time.
    pub max_backoff: Duration,
}

/// The health of one target.
#[derive(Debug)]
pub struct TargetHealth {
    /// Why the target is out regardless of passive health: [`ACTIVE_DOWN`] (the active checker's
    /// verdict) and [`DRAINED`] (an operator's), in one word so choosing a target reads one flag.
    out: AtomicU8,
    /// Passive down time ends at this [`now_ms`] value (0: not down).
    passive_down_until: AtomicU64,
    /// Consecutive failed connects seen by workers.
    passive_failures: AtomicU32,
    /// Outlier detection ([`crate::outlier`]): bad outcomes in a row, the [`now_ms`] value the
    /// target is ejected until (0: never ejected), and ejections so far.
    pub(crate) outlier_streak: AtomicU32,
    pub(crate) ejected_until: AtomicU64,
    pub(crate) ejections: AtomicU32,
    /// Why the last ejection was made: a [`crate::outlier::BadOutcome`] (0: never ejected).
    pub(crate) ejected_because: AtomicU8,
    /// Requests in flight to it, counted only when its upstream limits them
    /// (`max_requests_per_target`), across workers.
    in_flight: AtomicU32,
    /// When it appeared (this process's first config with it, a reload, a DNS answer), when the
    /// active check last brought it back up, and when it was last taken back from a drain
    /// ([`now_ms`] values): with the ends of its passive backoff and ejection, where slow start
    /// counts from.
    created_at: AtomicU64,
    active_up_at: AtomicU64,
    undrained_at: AtomicU64,
}

/// [`TargetHealth`] flag: the active checker says down.
const ACTIVE_DOWN: u8 = 1;
/// [`TargetHealth`] flag: drained by an operator (no new connections or requests).
const DRAINED: u8 = 2;

impl Default for TargetHealth {
    fn default() -> Self {
        TargetHealth {
            out: AtomicU8::new(0),
            passive_down_until: AtomicU64::new(0),
            passive_failures: AtomicU32::new(0),
            outlier_streak: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            ejected_because: AtomicU8::new(0),
            in_flight: AtomicU32::new(0),
            created_at: AtomicU64::new(now_ms()),
            active_up_at: AtomicU64::new(0),
            undrained_at: AtomicU64::new(0),
        }
    }
}

impl TargetHealth {
    /// The health of a target there since the process started: slow start does not ramp it
    /// (every target would ramp alike).
    pub fn from_start() -> TargetHealth {
        let health = TargetHealth::default();
        health.created_at.store(0, Relaxed);
        health
    }

    /// Whether workers may send new connections to this target now.
    #[inline]
    pub fn is_available(&self) -> bool {
        if self.out.load(Relaxed) != 0 {
            return false;
        }
        let until = self.passive_down_until.load(Relaxed);
        let ejected = self.ejected_until.load(Relaxed);
        if until == 0 && ejected == 0 {
            return true;
        }
        let now = now_ms();
        now >= until && now >= ejected
    }

    /// How much longer passive health keeps the target out (after failed connects).
    pub fn passive_down_for(&self) -> Duration {
        let until = self.passive_down_until.load(Relaxed);
        Duration::from_millis(until.saturating_sub(now_ms()))
    }

    /// Failed connects in a row, as workers saw them.
    pub fn consecutive_failures(&self) -> u32 {
        self.passive_failures.load(Relaxed)
    }

    /// The active checker's verdict.
    pub fn is_active_up(&self) -> bool {
        self.out.load(Relaxed) & ACTIVE_DOWN == 0
    }

    /// Whether an operator drained the target.
    pub fn is_drained(&self) -> bool {
        self.out.load(Relaxed) & DRAINED != 0
    }

    /// Drains the target (no new connections or requests go to it; open ones finish) or takes
    /// it back; returns whether that changed anything.
    pub fn set_drained(&self, drained: bool) -> bool {
        let before = if drained {
            self.out.fetch_or(DRAINED, Relaxed)
        } else {
            self.out.fetch_and(!DRAINED, Relaxed)
        };
        let changed = (before & DRAINED != 0) != drained;
        if changed && !drained {
            self.undrained_at.store(now_ms(), Relaxed);
        }
        changed
    }

    /// Records the active checker's verdict; returns whether it changed.
    pub fn set_active_up(&self, up: bool) -> bool {
        let before = if up {
            self.out.fetch_and(!ACTIVE_DOWN, Relaxed)
        } else {
            self.out.fetch_or(ACTIVE_DOWN, Relaxed)
        };
        let changed = (before & ACTIVE_DOWN == 0) != up;
        if changed && up {
            self.active_up_at.store(now_ms(), Relaxed);
            // A target the checker sees come back gets a fresh start: its passive backoff and
            // an outlier ejection end (the ejection count, which lengthens the next one, stays).
            self.passive_failures.store(0, Relaxed);
            self.passive_down_until.store(0, Relaxed);
            self.outlier_streak.store(0, Relaxed);
            let now = now_ms();
            let _ = self
                .ejected_until
                .fetch_update(Relaxed, Relaxed, |until| (until > now).then_some(now));
        }
        changed
    }

    /// The share of its traffic a target in slow start takes now: from near 0 when it joined or
    /// came back (appeared, active check up, drain lifted, passive backoff or ejection over) to
    /// 1 after `window`.
    pub fn slow_start_share(&self, window: Duration) -> f64 {
        let since = [
            self.created_at.load(Relaxed),
            self.active_up_at.load(Relaxed),
            self.undrained_at.load(Relaxed),
            self.passive_down_until.load(Relaxed),
            self.ejected_until.load(Relaxed),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        if since == 0 {
            // There from the start, and never out since.
            return 1.0;
        }
        let elapsed = now_ms().saturating_sub(since) as f64;
        (elapsed / window.as_millis().max(1) as f64).min(1.0)
    }

    /// Takes one of `max` request slots; `false` when all are taken.
    pub fn try_acquire(&self, max: u32) -> bool {
        self.in_flight
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_ok()
    }

    /// Gives back a slot [`TargetHealth::try_acquire`] took.
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    /// Requests in flight, as counted for a limit.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Relaxed)
    }

    /// A worker could not connect: mark the target down for an exponential, capped backoff.
    /// Returns the down time.
    pub fn record_connect_failure(&self, policy: &PassiveHealth) -> Duration {
        let failures = self.passive_failures.fetch_add(1, Relaxed).saturating_add(1);
        let shift = (failures - 1).min(20);
        let backoff = policy.base_backoff.saturating_mul(1 << shift).min(policy.max_backoff);
        self.passive_down_until
            .store(now_ms() + backoff.as_millis() as u64, Relaxed);
        backoff
    }

    /// A worker connected: clear the passive failure streak. Only writes when there was one, so
    /// healthy targets see no shared writes on the hot path.
    #[inline]
    pub fn record_connect_success(&self) {
        if self.passive_failures.load(Relaxed) != 0 {
            self.passive_failures.store(0, Relaxed);
            self.passive_down_until.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_backoff_doubles_and_caps() {
        let policy = PassiveHealth {
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(5),
        };
        let h = TargetHealth::default();
        assert!(h.is_available());
        let got: Vec<u64> = (0..5).map(|_| h.record_connect_failure(&policy).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 5, 5]);
        assert!(!h.is_available());
        h.record_connect_success();
        assert!(h.is_available());
    }

    #[test]
    fn active_down_overrides_and_recovery_resets_passive() {
        let policy = PassiveHealth {
            base_backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(60),
        };
        let h = TargetHealth::default();
        assert!(h.set_active_up(false));
        assert!(!h.is_available());
        h.record_connect_failure(&policy);
        assert!(h.set_active_up(true));
        assert!(h.is_available());
        assert!(!h.set_active_up(true));

        // An outlier ejection ends when the checker sees the target come back, not on a check
        // that only confirms it is up.
        let outliers = crate::outlier::OutlierDetection {
            consecutive: 1,
            ..Default::default()
        };
        assert!(h
            .outlier_failure(&outliers, 2, || 0, crate::outlier::BadOutcome::Status5xx)
            .is_some());
        assert!(!h.is_available());
        assert!(!h.set_active_up(true) && !h.is_available());
        assert!(h.set_active_up(false) && h.set_active_up(true));
        assert!(h.is_available() && !h.is_ejected());
    }

    #[test]
    fn a_drained_target_is_out_whatever_its_health_says() {
        let h = TargetHealth::default();
        assert!(h.set_drained(true) && !h.set_drained(true));
        assert!(!h.is_available() && h.is_drained() && h.is_active_up());
        // The checker's verdicts do not undo a drain, nor the other way round.
        assert!(h.set_active_up(false) && h.set_active_up(true));
        assert!(!h.is_available());
        assert!(h.set_drained(false));
        assert!(h.is_available());
        h.set_active_up(false);
        h.set_drained(true);
        h.set_drained(false);
        assert!(!h.is_available() && !h.is_active_up());
    }
}
