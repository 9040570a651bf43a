//! A route's requests shared among upstreams by weight (`split`: a canary taking 5%), a request
//! that carries a way's header or cookie going to that way whatever the weights (the tester sent
//! to the canary); and a copy of a share of them sent to a shadow upstream (`mirror`).

/// The ways of a `split` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub ways: Vec<SplitWay>,
    /// The sum of the ways' weights (at least 1).
    pub total_weight: u32,
}

/// One way: an upstream, its weight, and what sends a request to it whatever the weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitWay {
    /// An index into the snapshot's upstreams.
    pub upstream: usize,
    pub weight: u32,
    /// A request header (lowercase) whose presence picks this way.
    pub header: Option<String>,
    /// A cookie whose presence picks this way.
    pub cookie: Option<String>,
}

impl Split {
    /// The upstream for a request: the first way whose header or cookie it carries (`carries`
    /// says), else the way `draw` (0 to `total_weight - 1`, drawn at random) falls in by weight.
    pub fn choose(&self, carries: impl Fn(&SplitWay) -> bool, draw: u32) -> usize {
        if let Some(way) = self
            .ways
            .iter()
            .find(|w| (w.header.is_some() || w.cookie.is_some()) && carries(w))
        {
            return way.upstream;
        }
        let mut left = draw % self.total_weight.max(1);
        for way in &self.ways {
            if left < way.weight {
                return way.upstream;
            }
            left -= way.weight;
        }
        self.ways.last().map_or(0, |w| w.upstream)
    }
}

/// A route's `mirror`: a copy of `percent` of its requests (those without a body) goes to the
/// upstream `upstream` (plain HTTP/1.1); its answers are dropped, and it never delays or fails
/// the request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub upstream: usize,
    pub percent: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary() -> Split {
        let way = |upstream, weight, header: Option<&str>| SplitWay {
            upstream,
            weight,
            header: header.map(String::from),
            cookie: None,
        };
        Split {
            ways: vec![way(0, 95, None), way(1, 5, Some("x-canary")), way(2, 0, None)],
            total_weight: 100,
        }
    }

    #[test]
    fn weights_share_the_draws_and_an_override_wins() {
        let split = canary();
        let to = |upstream| (0..100).filter(|d| split.choose(|_| false, *d) == upstream).count();
        assert_eq!((to(0), to(1), to(2)), (95, 5, 0));
        assert_eq!(split.choose(|w| w.header.as_deref() == Some("x-canary"), 0), 1);
        assert_eq!(split.choose(|_| false, 1_000_003), 0, "a draw past the total wraps");
    }
}
