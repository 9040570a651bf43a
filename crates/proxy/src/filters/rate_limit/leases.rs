//! GLOBAL mode's per-worker leases: tokens a worker took from Redis for one key and spends
//! without asking again, so that a hot key costs a Redis round trip per lease, not per request.
//!
//! For each key (by hash) a worker keeps at most one lease and at most one take in flight:
//!
//! - a request spends a token of a live lease (no Redis);
//! - with none left, it becomes the key's **fetcher** and asks Redis for the next lease, while
//!   requests for the same key that arrive meanwhile **wait** for that answer and then try again
//!   (one round trip serves them all: the lease asked for covers them);
//! - a denial from Redis (no token left) is remembered until its `retry_after`, and requests in
//!   that window are refused at once.
//!
//! Lease size adapts per key: it doubles (up to `max_lease`) when a lease was spent within half
//! of [`LEASE_TTL`], and halves when one expired with tokens left. Tokens of an expired lease are
//! dropped, not returned: the limit is never exceeded (every token passed out was granted by
//! Redis), at the price of under-admission of at most one lease per worker per key and
//! [`LEASE_TTL`].
//!
//! Times are monotonic nanoseconds, passed in, so the table is tested without a clock.

use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::Notify;

use super::redis::TakeReply;

/// How long a lease's tokens may be spent.
pub const LEASE_TTL_NS: u64 = 250_000_000;
/// Keys whose leases one worker keeps per filter; past it, idle keys are forgotten.
pub const MAX_KEYS: usize = 16_384;

/// What a request can do now.
pub enum Step {
    /// Spent a token: the quota as far as this worker knows.
    Allowed(Quota),
    /// Redis has no token for the key until `retry_after_ns` from now.
    Denied { retry_after_ns: u64, quota: Quota },
    /// Another request of this worker is asking Redis for this key: wait for it, then try again.
    Wait(Rc<Notify>),
    /// Ask Redis for `wanted` tokens, then call [`Leases::complete`] (or [`Leases::abandon`]).
    Fetch { wanted: u64 },
}

/// What the `RateLimit` field says: tokens left, and seconds until the bucket is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    pub remaining: u64,
    pub reset_ns: u64,
}

#[derive(Default)]
struct Lease {
    tokens: u64,
    expires: u64,
    granted_at: u64,
    /// The size of the next lease asked for.
    size: u64,
    denied_until: u64,
    /// Redis's count of tokens left after the last take, and when its bucket is full again.
    remaining: u64,
    reset_at: u64,
    fetching: Option<Rc<Notify>>,
}

impl Lease {
    fn quota(&self, now: u64) -> Quota {
        Quota {
            remaining: self.remaining.saturating_add(self.tokens),
            reset_ns: self.reset_at.saturating_sub(now),
        }
    }
}

/// One worker's leases for one filter.
pub struct Leases {
    keys: HashMap<u64, Lease>,
    max_lease: u64,
}

impl Leases {
    pub fn new(max_lease: u64) -> Leases {
        Leases {
            keys: HashMap::new(),
            max_lease: max_lease.max(1),
        }
    }

    /// A request for one token of key `hash` at `now`.
    pub fn try_take(&mut self, hash: u64, now: u64) -> Step {
        if self.keys.len() >= MAX_KEYS && !self.keys.contains_key(&hash) {
            self.forget_idle(now);
        }
        let lease = self.keys.entry(hash).or_insert_with(|| Lease {
            size: 1,
            ..Lease::default()
        });
        if lease.tokens > 0 && now < lease.expires {
            lease.tokens -= 1;
            return Step::Allowed(lease.quota(now));
        }
        if now < lease.denied_until {
            return Step::Denied {
                retry_after_ns: lease.denied_until - now,
                quota: lease.quota(now),
            };
        }
        if let Some(wait) = &lease.fetching {
            return Step::Wait(wait.clone());
        }
        if lease.granted_at > 0 || lease.expires > 0 {
            if lease.tokens > 0 {
                // Expired unspent: ask for less next time.
                lease.size = (lease.size / 2).max(1);
            } else if now.saturating_sub(lease.granted_at) < LEASE_TTL_NS / 2 {
                lease.size = lease.size.saturating_mul(2).min(self.max_lease);
            }
        }
        lease.tokens = 0;
        lease.fetching = Some(Rc::new(Notify::new()));
        Step::Fetch { wanted: lease.size }
    }

    /// The fetcher's answer from Redis for key `hash`: the fetcher spends one granted token (or
    /// is denied); waiting requests are woken to try again.
    pub fn complete(&mut self, hash: u64, reply: TakeReply, now: u64) -> Step {
        let Some(lease) = self.keys.get_mut(&hash) else {
            return Step::Denied {
                retry_after_ns: 0,
                quota: Quota::default(),
            };
        };
        if let Some(waiting) = lease.fetching.take() {
            waiting.notify_waiters();
        }
        lease.remaining = reply.remaining;
        lease.reset_at = now.saturating_add(reply.reset_after_us.saturating_mul(1000));
        if reply.granted == 0 {
            lease.denied_until = now.saturating_add(reply.retry_after_us.max(1).saturating_mul(1000));
            return Step::Denied {
                retry_after_ns: lease.denied_until - now,
                quota: lease.quota(now),
            };
        }
        lease.tokens = reply.granted - 1;
        lease.granted_at = now;
        lease.expires = now.saturating_add(LEASE_TTL_NS);
        Step::Allowed(lease.quota(now))
    }

    /// The fetch for `hash` got no answer (Redis failed, the wait timed out, the request went
    /// away): waiting requests are woken, and the next one asks again.
    pub fn abandon(&mut self, hash: u64) {
        if let Some(waiting) = self.keys.get_mut(&hash).and_then(|l| l.fetching.take()) {
            waiting.notify_waiters();
        }
    }

    /// Drops keys with nothing worth keeping: no live tokens, no denial, no fetch in flight; if
    /// that frees nothing, every key without a fetch in flight.
    fn forget_idle(&mut self, now: u64) {
        self.keys
            .retain(|_, l| l.fetching.is_some() || (l.tokens > 0 && now < l.expires) || now < l.denied_until);
        if self.keys.len() >= MAX_KEYS {
            self.keys.retain(|_, l| l.fetching.is_some());
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn granted(n: u64) -> TakeReply {
        TakeReply {
            granted: n,
            retry_after_us: 0,
            reset_after_us: 1_000_000,
            remaining: 100,
        }
    }

    fn fetch(step: Step) -> u64 {
        match step {
            Step::Fetch { wanted } => wanted,
            _ => panic!("expected a fetch"),
        }
    }

    #[test]
    fn a_lease_is_spent_without_asking_again_and_others_wait_for_a_fetch() {
        let mut leases = Leases::new(8);
        assert_eq!(fetch(leases.try_take(7, MS)), 1);
        // A second request for the key while the first asks: it waits.
        let Step::Wait(notify) = leases.try_take(7, MS) else {
            panic!("expected a wait")
        };
        let woken = notify.notified();
        assert!(matches!(leases.complete(7, granted(1), 2 * MS), Step::Allowed(_)));
        drop(woken);
        // Spent within half the TTL: the next lease doubles, up to the maximum.
        let mut now = 3 * MS;
        let mut sizes = Vec::new();
        for _ in 0..5 {
            let wanted = fetch(leases.try_take(7, now));
            sizes.push(wanted);
            assert!(matches!(leases.complete(7, granted(wanted), now), Step::Allowed(_)));
            for _ in 1..wanted {
                assert!(matches!(leases.try_take(7, now), Step::Allowed(_)));
            }
            now += MS;
        }
        assert_eq!(sizes, [2, 4, 8, 8, 8]);
    }

    #[test]
    fn an_expired_lease_halves_and_its_tokens_are_dropped() {
        let mut leases = Leases::new(8);
        leases.try_take(1, 0);
        leases.complete(1, granted(8), 0);
        leases.keys.get_mut(&1).unwrap().size = 8;
        assert!(matches!(leases.try_take(1, MS), Step::Allowed(q) if q.remaining == 100 + 6));
        // Past the TTL the 6 left are gone, and the next lease is smaller.
        assert_eq!(fetch(leases.try_take(1, LEASE_TTL_NS + MS)), 4);
    }

    #[test]
    fn a_denial_is_remembered_until_retry_after() {
        let mut leases = Leases::new(4);
        leases.try_take(3, 0);
        let denied = TakeReply {
            granted: 0,
            retry_after_us: 20_000,
            reset_after_us: 500_000,
            remaining: 0,
        };
        assert!(
            matches!(leases.complete(3, denied, 0), Step::Denied { retry_after_ns, .. } if retry_after_ns == 20 * MS)
        );
        assert!(
            matches!(leases.try_take(3, 10 * MS), Step::Denied { retry_after_ns, .. } if retry_after_ns == 10 * MS)
        );
        assert!(matches!(leases.try_take(3, 20 * MS), Step::Fetch { .. }));
    }

    #[test]
    fn an_abandoned_fetch_lets_the_next_request_ask() {
        let mut leases = Leases::new(4);
        leases.try_take(9, 0);
        assert!(matches!(leases.try_take(9, 0), Step::Wait(_)));
        leases.abandon(9);
        assert!(matches!(leases.try_take(9, 0), Step::Fetch { .. }));
    }

    #[test]
    fn the_table_is_bounded() {
        let mut leases = Leases::new(1);
        for key in 0..(MAX_KEYS as u64 + 10) {
            if let Step::Fetch { .. } = leases.try_take(key, 0) {
                leases.abandon(key);
            }
        }
        assert!(leases.len() <= MAX_KEYS);
    }
}
