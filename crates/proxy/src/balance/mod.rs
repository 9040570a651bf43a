//! Balancing policies. The choice is made by each worker from its own state (round-robin cursor,
//! smooth-weight counters, its own open-connection counts, its own random generator), so choosing a
//! target never writes shared memory. Consistent hashing uses an immutable Maglev table built at
//! config compile time.

mod maglev;

use std::net::IpAddr;

pub use maglev::{hash_bytes, Maglev};

use crate::snapshot::Upstream;

/// How an upstream chooses a target for a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancePolicy {
    /// Each target in turn (weights ignored).
    RoundRobin,
    /// nginx's smooth weighted round robin: weight 3 gets 3 of every `sum(weights)` connections,
    /// spread out rather than in bursts.
    WeightedRoundRobin,
    /// The target with the fewest open connections from this worker, relative to its weight.
    LeastConnections,
    /// Power of two random choices: two random targets, the one with fewer open connections wins.
    RandomTwo,
    /// Maglev consistent hashing on the client's IP address: a client keeps its target, and adding
    /// or removing one of N targets moves about 1/N of the clients.
    ConsistentHash,
}

impl BalancePolicy {
    /// The names accepted in config files and on the command line.
    pub const NAMES: &'static [&'static str] = &[
        "round_robin",
        "weighted_round_robin",
        "least_connections",
        "random_two",
        "consistent_hash",
    ];

    /// Parses a policy name as written in config files and on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "round_robin" => BalancePolicy::RoundRobin,
            "weighted_round_robin" => BalancePolicy::WeightedRoundRobin,
            "least_connections" => BalancePolicy::LeastConnections,
            "random_two" => BalancePolicy::RandomTwo,
            "consistent_hash" => BalancePolicy::ConsistentHash,
            _ => return None,
        })
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

    pub fn push(&mut self, index: usize) {
        if self.len < Self::CAPACITY {
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
    rng: u64,
}

impl BalancerState {
    pub fn new(targets: usize, seed: u64) -> Self {
        BalancerState {
            cursor: (seed as usize) % targets.max(1),
            smooth_current: vec![0; targets],
            open: vec![0; targets],
            rng: seed | 1,
        }
    }

    /// Chooses an available target not in `tried`, or `None` when there is none.
    pub fn pick(&mut self, upstream: &Upstream, client: IpAddr, tried: &Tried) -> Option<usize> {
        let usable = |i: usize| !tried.contains(i) && upstream.targets[i].health.is_available();
        let n = upstream.targets.len();
        match upstream.policy {
            BalancePolicy::RoundRobin => {
                let found = (0..n).map(|k| (self.cursor + k) % n).find(|&i| usable(i))?;
                self.cursor = (found + 1) % n;
                Some(found)
            }
            BalancePolicy::WeightedRoundRobin => {
                let mut total = 0i64;
                let mut best: Option<usize> = None;
                for i in (0..n).filter(|&i| usable(i)) {
                    self.smooth_current[i] += i64::from(upstream.targets[i].weight);
                    total += i64::from(upstream.targets[i].weight);
                    if best.is_none_or(|b| self.smooth_current[i] > self.smooth_current[b]) {
                        best = Some(i);
                    }
                }
                let best = best?;
                self.smooth_current[best] -= total;
                Some(best)
            }
            BalancePolicy::LeastConnections => {
                // Compare open/weight without division; start at the cursor so ties rotate.
                let mut best: Option<usize> = None;
                for i in (0..n).map(|k| (self.cursor + k) % n).filter(|&i| usable(i)) {
                    let better = best.is_none_or(|b| {
                        u64::from(self.open[i]) * u64::from(upstream.targets[b].weight)
                            < u64::from(self.open[b]) * u64::from(upstream.targets[i].weight)
                    });
                    if better {
                        best = Some(i);
                    }
                }
                let best = best?;
                self.cursor = (best + 1) % n;
                Some(best)
            }
            BalancePolicy::RandomTwo => {
                let available = (0..n).filter(|&i| usable(i)).count();
                if available == 0 {
                    return None;
                }
                let nth = |rank: usize| (0..n).filter(|&i| usable(i)).nth(rank);
                let a = nth(self.next_random() as usize % available)?;
                if available == 1 {
                    return Some(a);
                }
                let mut rank_b = self.next_random() as usize % (available - 1);
                let rank_a = (0..a).filter(|&i| usable(i)).count();
                if rank_b >= rank_a {
                    rank_b += 1;
                }
                let b = nth(rank_b)?;
                let load = |i: usize| u64::from(self.open[i]) * 1024 / u64::from(upstream.targets[i].weight.max(1));
                Some(if load(b) < load(a) { b } else { a })
            }
            BalancePolicy::ConsistentHash => {
                let maglev = upstream.maglev.as_ref()?;
                if !(0..n).any(usable) {
                    return None;
                }
                maglev.lookup(client_hash(client), usable)
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

    fn next_random(&mut self) -> u64 {
        // xorshift64*: fast, per worker, good enough for balancing.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The hash of a client address used by [`BalancePolicy::ConsistentHash`].
pub fn client_hash(ip: IpAddr) -> u64 {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => hash_bytes(&v4.octets()),
        IpAddr::V6(v6) => hash_bytes(&v6.octets()),
    }
}

#[cfg(test)]
mod tests;
