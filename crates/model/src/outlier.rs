//! Outlier detection (Envoy's, HAProxy's `observe layer7`): a target whose real traffic goes bad
//! (5xx responses, gateway failures, slow responses) several times in a row is ejected, taken
//! out of balancing for a time that grows with each ejection, never more than a share of its
//! upstream at once. The state lives in [`TargetHealth`], beside the passive backoff of failed
//! connects, so every worker sees an ejection at its next pick.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::health::{now_ms, TargetHealth};

/// An upstream's `outlier_detection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierDetection {
    /// Bad outcomes in a row that eject a target.
    pub consecutive: u32,
    /// A response head slower than this is a bad outcome too.
    pub slow_response: Option<Duration>,
    /// The first ejection's length; the n-th lasts n times as long…
    pub base_ejection: Duration,
    /// …up to this.
    pub max_ejection: Duration,
    /// At most this share of the upstream's targets is ejected at once (at least one target).
    pub max_ejection_percent: u32,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        OutlierDetection {
            consecutive: 5,
            slow_response: None,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
            max_ejection_percent: 50,
        }
    }
}

/// What made an attempt's outcome bad: what a streak counts, and why a target was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadOutcome {
    /// A 5xx response.
    Status5xx = 1,
    /// A reset, a timeout or a malformed response.
    GatewayFailure = 2,
    /// A response head slower than `slow_response`.
    SlowResponse = 3,
}

impl BadOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            BadOutcome::Status5xx => "5xx",
            BadOutcome::GatewayFailure => "gateway_failure",
            BadOutcome::SlowResponse => "slow_response",
        }
    }

    fn from_u8(n: u8) -> Option<BadOutcome> {
        match n {
            1 => Some(BadOutcome::Status5xx),
            2 => Some(BadOutcome::GatewayFailure),
            3 => Some(BadOutcome::SlowResponse),
            _ => None,
        }
    }
}

impl OutlierDetection {
    /// How many of `targets` may be ejected at once.
    pub fn max_ejected(&self, targets: usize) -> usize {
        (targets * self.max_ejection_percent as usize / 100).max(1)
    }
}

impl TargetHealth {
    /// A good outcome: ends a streak of bad ones. Writes only when there was one, so healthy
    /// targets see no shared writes on the hot path.
    #[inline]
    pub fn outlier_success(&self) {
        if self.outlier_streak.load(Relaxed) != 0 {
            self.outlier_streak.store(0, Relaxed);
        }
    }

    /// A bad outcome where no outlier detection is set: counted in the streak the admin API
    /// shows, nothing more.
    pub fn bad_outcome(&self) {
        self.outlier_streak.fetch_add(1, Relaxed);
    }

    /// Bad outcomes in a row now (any worker's; back to 0 at a good one and at an ejection).
    pub fn bad_outcomes_in_a_row(&self) -> u32 {
        self.outlier_streak.load(Relaxed)
    }

    /// A bad outcome (`why`). When it completes a streak and `ejected` (how many of the
    /// upstream's `targets` are ejected now) leaves room, the target is ejected: the time it is
    /// out.
    pub fn outlier_failure(
        &self,
        policy: &OutlierDetection,
        targets: usize,
        ejected: impl FnOnce() -> usize,
        why: BadOutcome,
    ) -> Option<Duration> {
        let streak = self.outlier_streak.fetch_add(1, Relaxed).saturating_add(1);
        if streak < policy.consecutive || self.is_ejected() || ejected() >= policy.max_ejected(targets) {
            return None;
        }
        self.outlier_streak.store(0, Relaxed);
        let now = now_ms();
        let last_until = self.ejected_until.load(Relaxed);
        // A target that has stayed in for `max_ejection` since its last ejection starts again
        // from the base time.
        let forgiven = last_until != 0 && now.saturating_sub(last_until) > policy.max_ejection.as_millis() as u64;
        let count = if forgiven {
            1
        } else {
            self.ejections.load(Relaxed).saturating_add(1)
        };
        let time = policy.base_ejection.saturating_mul(count).min(policy.max_ejection);
        // Two workers may complete the streak at once: one ejection.
        let until = now + time.as_millis() as u64;
        self.ejected_until
            .compare_exchange(last_until, until, Relaxed, Relaxed)
            .ok()?;
        self.ejections.store(count, Relaxed);
        self.ejected_because.store(why as u8, Relaxed);
        Some(time)
    }

    /// What completed the streak of the last ejection (`None`: never ejected).
    pub fn ejection_reason(&self) -> Option<BadOutcome> {
        BadOutcome::from_u8(self.ejected_because.load(Relaxed))
    }

    /// Whether outlier detection has the target out now.
    #[inline]
    pub fn is_ejected(&self) -> bool {
        now_ms() < self.ejected_until.load(Relaxed)
    }

    /// How much longer the target stays ejected.
    pub fn ejected_for(&self) -> Duration {
        Duration::from_millis(self.ejected_until.load(Relaxed).saturating_sub(now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> OutlierDetection {
        OutlierDetection {
            consecutive: 3,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(25),
            ..OutlierDetection::default()
        }
    }

    #[test]
    fn a_streak_ejects_and_a_success_breaks_it() {
        let (h, p) = (TargetHealth::default(), policy());
        assert!(h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx).is_none());
        h.outlier_success();
        assert!(h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx).is_none());
        assert!(h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx).is_none());
        assert_eq!(
            h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx),
            Some(Duration::from_secs(10))
        );
        assert!(h.is_ejected() && !h.is_available());
        assert!(h.ejected_for() > Duration::from_secs(9));
        assert_eq!(h.ejection_reason(), Some(BadOutcome::Status5xx));
        assert_eq!(h.bad_outcomes_in_a_row(), 0, "an ejection starts a new streak");
    }

    #[test]
    fn ejections_grow_up_to_the_maximum() {
        let (h, p) = (TargetHealth::default(), policy());
        let mut times = Vec::new();
        for _ in 0..3 {
            for _ in 0..2 {
                h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx);
            }
            // The last ejection ends now: the third failure of the streak ejects again.
            h.ejected_until.store(now_ms(), Relaxed);
            times.push(h.outlier_failure(&p, 3, || 0, BadOutcome::Status5xx).unwrap().as_secs());
        }
        assert_eq!(times, [10, 20, 25]);
    }

    #[test]
    fn no_more_than_the_share_is_ejected() {
        let (h, p) = (TargetHealth::default(), policy());
        for _ in 0..5 {
            assert!(
                h.outlier_failure(&p, 4, || 2, BadOutcome::Status5xx).is_none(),
                "50% of 4 already out"
            );
        }
        assert_eq!(p.max_ejected(1), 1);
        assert_eq!(p.max_ejected(10), 5);
    }
}
