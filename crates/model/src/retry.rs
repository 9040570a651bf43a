//! When a failed request is tried again (`retry_on`) and how many retries an upstream's requests
//! may add (`retry_budget`). Connect failures are always tried on another target (nothing was
//! sent); these settings govern the rest.

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

/// How many retries an upstream's requests may add, per worker (Envoy's retry budget): the
/// requests retrying at once may be at most `percent` of the requests in flight to the upstream,
/// or `min_retrying`, whichever is more (so a quiet upstream still gets its few retries). A retry
/// over the budget is not made: the failure (or the response) goes to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    pub percent: u32,
    pub min_retrying: u32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            percent: 20,
            min_retrying: 3,
        }
    }
}

impl RetryBudget {
    /// Whether one more request may be retrying, `retrying` others being so among `active`
    /// requests in flight (this one included): with 10 in flight at 20%, 2 may retry at once;
    /// with few in flight, `min_retrying`.
    #[inline]
    pub fn allows(&self, retrying: i64, active: i64) -> bool {
        let after = retrying.saturating_add(1);
        after.saturating_mul(100) <= active.saturating_mul(i64::from(self.percent))
            || after <= i64::from(self.min_retrying)
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

    #[test]
    fn the_budget_is_a_share_of_the_requests_in_flight_or_a_floor() {
        let budget = RetryBudget {
            percent: 20,
            min_retrying: 1,
        };
        // 10 requests in flight: 2 retrying at once.
        assert!(budget.allows(0, 10) && budget.allows(1, 10) && !budget.allows(2, 10));
        // One request alone: the floor.
        assert!(budget.allows(0, 1) && !budget.allows(1, 2));
        let none = RetryBudget {
            percent: 20,
            min_retrying: 0,
        };
        assert!(!none.allows(0, 1) && none.allows(0, 5));
        // 100%: every request may retry.
        let all = RetryBudget {
            percent: 100,
            min_retrying: 0,
        };
        assert!(all.allows(0, 1) && all.allows(9, 10) && !all.allows(10, 10));
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
