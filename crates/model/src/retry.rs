//! When a failed request is tried again (`retry_on`) and how many retries an upstream's requests
//! may add (`retry_budget`). Connect failures are always tried on another target (nothing was
//! sent); these settings govern the rest.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The outcomes, besides a connect failure, that send a request to another target: for requests
/// safe to repeat (idempotent unless `non_idempotent`, with no body or a body kept whole), while
/// `retries` and the budget allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOn {
    /// The upstream closed or reset the connection before any response byte (`reset`).
    pub reset: bool,
    /// No response head within `response_header_timeout` (`timeout`).
    pub timeout: bool,
    /// Requests whose method is not idempotent (POST, PATCH, ...) are tried again too
    /// (`non-idempotent`, nginx's `proxy_next_upstream non_idempotent`).
    pub non_idempotent: bool,
    /// Response statuses 400 to 599 that are tried again (`503`, `5xx`, `gateway-error`), one
    /// bit each: bit `status - 400`. The last try's response goes to the client as it is.
    statuses: [u64; 4],
}

impl Default for RetryOn {
    /// Resets only, as before `retry_on` existed.
    fn default() -> Self {
        RetryOn {
            reset: true,
            timeout: false,
            non_idempotent: false,
            statuses: [0; 4],
        }
    }
}

impl RetryOn {
    /// Nothing but connect failures.
    pub fn none() -> RetryOn {
        RetryOn {
            reset: false,
            ..RetryOn::default()
        }
    }

    /// Adds `status` (400 to 599; others are ignored).
    pub fn add_status(&mut self, status: u16) {
        if let Some(bit) = status.checked_sub(400).filter(|b| *b < 200) {
            self.statuses[usize::from(bit / 64)] |= 1 << (bit % 64);
        }
    }

    /// Whether a response with `status` is tried again.
    #[inline]
    pub fn status(&self, status: u16) -> bool {
        match status.checked_sub(400).filter(|b| *b < 200) {
            Some(bit) => self.statuses[usize::from(bit / 64)] & (1 << (bit % 64)) != 0,
            None => false,
        }
    }

    /// Whether any response status is tried again.
    #[inline]
    pub fn any_status(&self) -> bool {
        self.statuses.iter().any(|w| *w != 0)
    }
}

/// A route's own `retries` and `retry_on`, in place of its upstream's (Envoy's route retry
/// policy): each set one replaces the upstream's for the route's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteRetry {
    pub retries: Option<usize>,
    pub retry_on: Option<RetryOn>,
}

/// How many retries an upstream's requests may add, per worker (Finagle's retry budget, a rate
/// where Envoy's is a share of the requests in flight): each request deposits `percent` hundredths
/// of a retry, each retry withdraws one, and `min_retries_per_second` retries a second are
/// allowed besides (so a quiet upstream still gets its few retries). Deposits not spent are kept
/// up to one retry per request in flight: a reserve for the burst of failures when a target
/// turns bad with many requests on it (at worst all of them fail at once), too small to let a
/// healthy past pay for many retries once every target fails. A retry over the budget is not
/// made: the failure (or the response) goes to the client. With every target failing, the
/// attempts per request stay at most `1 + percent / 100`, plus the floor's and the reserve's few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    pub percent: u32,
    pub min_retries_per_second: u32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            percent: 20,
            min_retries_per_second: 10,
        }
    }
}

/// One retry in [`RetryTokens`]' unit (a thousandth of a retry: a deposit of 20% is 200).
const RETRY: u64 = 1000;

/// One worker's [`RetryBudget`] account for one upstream: written by that worker only (plain
/// loads and stores, as the metric cells), so a request writes no shared memory.
/// [`RetryTokens::next_second`] brings the floor back, from the worker's housekeeping.
#[derive(Debug, Default)]
pub struct RetryTokens {
    /// Deposits not spent, in thousandths of a retry, up to one retry per request in flight.
    balance: AtomicU64,
    /// This worker's requests in flight to the upstream.
    in_flight: AtomicU64,
    /// The floor's retries taken this second.
    floor_spent: AtomicU64,
}

impl RetryTokens {
    /// A request to the upstream begins: it deposits its share of a retry. [`RetryTokens::end`]
    /// must follow.
    #[inline]
    pub fn begin(&self, budget: &RetryBudget) {
        let in_flight = self.in_flight.load(Relaxed).saturating_add(1);
        self.in_flight.store(in_flight, Relaxed);
        let share = u64::from(budget.percent) * (RETRY / 100);
        let balance = self.balance.load(Relaxed).saturating_add(share);
        self.balance
            .store(balance.min(in_flight.saturating_mul(RETRY)), Relaxed);
    }

    /// A request [`RetryTokens::begin`] counted is over.
    #[inline]
    pub fn end(&self) {
        self.in_flight
            .store(self.in_flight.load(Relaxed).saturating_sub(1), Relaxed);
    }

    /// Takes a retry from the budget (the deposits, else the floor); `false` when it has none.
    pub fn withdraw(&self, budget: &RetryBudget) -> bool {
        let balance = self.balance.load(Relaxed);
        if balance >= RETRY {
            self.balance.store(balance - RETRY, Relaxed);
            return true;
        }
        let floor_spent = self.floor_spent.load(Relaxed);
        if floor_spent + RETRY <= u64::from(budget.min_retries_per_second) * RETRY {
            self.floor_spent.store(floor_spent + RETRY, Relaxed);
            return true;
        }
        false
    }

    /// A second is over: the floor comes back.
    pub fn next_second(&self) {
        self.floor_spent.store(0, Relaxed);
    }
}

/// An upstream's `max_requests_per_target` and `queue` (HAProxy's server `maxconn` and its
/// queue): a target takes at most `per_target` requests at once, across workers; a request that
/// finds every target full waits in the upstream's queue, at most `queue_size` of them, each for
/// up to `queue_timeout`, and is answered 503 when the queue is full or its wait runs out.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    pub per_target: u32,
    pub queue_size: u32,
    pub queue_timeout: std::time::Duration,
    /// The requests waiting now, across workers, in their order.
    pub queue: std::sync::Arc<crate::queue::RequestQueue>,
}

impl PartialEq for RequestLimits {
    fn eq(&self, other: &Self) -> bool {
        (self.per_target, self.queue_size, self.queue_timeout)
            == (other.per_target, other.queue_size, other.queue_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_kept_one_bit_each() {
        let mut on = RetryOn::none();
        assert!(!on.any_status());
        for s in [400, 429, 502, 503, 599] {
            on.add_status(s);
        }
        on.add_status(200);
        on.add_status(600);
        for s in [400, 429, 502, 503, 599] {
            assert!(on.status(s), "{s}");
        }
        for s in [200, 399, 401, 500, 504, 600, 0] {
            assert!(!on.status(s), "{s}");
        }
    }

    /// Retries `tokens` grants while `requests` requests, one after another, each want one.
    fn granted(tokens: &RetryTokens, budget: &RetryBudget, requests: usize) -> usize {
        (0..requests)
            .filter(|_| {
                tokens.begin(budget);
                let granted = tokens.withdraw(budget);
                tokens.end();
                granted
            })
            .count()
    }

    #[test]
    fn every_request_deposits_a_share_of_a_retry_and_a_floor_comes_each_second() {
        let budget = RetryBudget {
            percent: 20,
            min_retries_per_second: 0,
        };
        let tokens = RetryTokens::default();
        // Every request failing: one retry in five requests, never more.
        assert_eq!(granted(&tokens, &budget, 1000), 200);
        tokens.next_second();
        assert_eq!(granted(&tokens, &budget, 1000), 200);
        // The floor: three retries a second with no request to earn them.
        let floor = RetryBudget {
            percent: 20,
            min_retries_per_second: 3,
        };
        let tokens = RetryTokens::default();
        assert_eq!((0..10).filter(|_| tokens.withdraw(&floor)).count(), 3);
        tokens.next_second();
        assert_eq!((0..10).filter(|_| tokens.withdraw(&floor)).count(), 3);
        // 100%: a retry for every request.
        let all = RetryBudget {
            percent: 100,
            min_retries_per_second: 0,
        };
        assert_eq!(granted(&RetryTokens::default(), &all, 50), 50);
    }

    #[test]
    fn the_reserve_covers_every_request_in_flight_failing_at_once_and_no_more() {
        let budget = RetryBudget {
            percent: 20,
            min_retries_per_second: 0,
        };
        let tokens = RetryTokens::default();
        // 40 requests in flight at any time, thousands of them needing no retry.
        (0..40).for_each(|_| tokens.begin(&budget));
        (0..4000).for_each(|_| {
            tokens.end();
            tokens.begin(&budget);
        });
        // All 40 fail at once: every one is retried, and that is all the reserve holds.
        assert_eq!((0..100).filter(|_| tokens.withdraw(&budget)).count(), 40);
        (0..40).for_each(|_| tokens.end());
        // One request at a time: a retry saved up every five requests, never two.
        (0..20).for_each(|_| {
            tokens.begin(&budget);
            tokens.end();
        });
        assert!(tokens.withdraw(&budget) && !tokens.withdraw(&budget));
    }
}
