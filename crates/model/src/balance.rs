//! Balancing policies as configured, and the hashes consistent hashing uses. The per-worker
//! state that applies them lives in the data plane.

use std::net::IpAddr;

pub use crate::maglev::{hash_bytes, Maglev};

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
    /// Maglev consistent hashing on a key (the client's IP address, or for HTTP a request header
    /// or cookie, see [`HashKey`]): a key keeps its target, and adding or removing one of N
    /// targets moves about 1/N of the keys.
    ConsistentHash,
    /// Power of two random choices on latency: of two random targets, the one with the lower
    /// `peak EWMA latency x (open + 1) / weight` wins. The latency is each worker's moving average
    /// (10 s decay) of the target's response times (HTTP: request sent to response head; TCP:
    /// connect time), jumping up at once on a slower sample; a target that gets no traffic sees
    /// its figure decay towards zero, so it is tried again.
    P2cEwma,
}

/// What [`BalancePolicy::ConsistentHash`] hashes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashKey {
    #[default]
    ClientAddress,
    /// The value of this request header (lowercase name); the client address without it.
    Header(Box<str>),
    /// The value of this cookie; the client address without it.
    Cookie(Box<str>),
}

impl BalancePolicy {
    /// The names accepted in config files and on the command line.
    pub const NAMES: &'static [&'static str] = &[
        "round_robin",
        "weighted_round_robin",
        "least_connections",
        "random_two",
        "consistent_hash",
        "p2c_ewma",
    ];

    /// The policy's name as written in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BalancePolicy::RoundRobin => "round_robin",
            BalancePolicy::WeightedRoundRobin => "weighted_round_robin",
            BalancePolicy::LeastConnections => "least_connections",
            BalancePolicy::RandomTwo => "random_two",
            BalancePolicy::ConsistentHash => "consistent_hash",
            BalancePolicy::P2cEwma => "p2c_ewma",
        }
    }

    /// Parses a policy name as written in config files and on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "round_robin" => BalancePolicy::RoundRobin,
            "weighted_round_robin" => BalancePolicy::WeightedRoundRobin,
            "least_connections" => BalancePolicy::LeastConnections,
            "random_two" => BalancePolicy::RandomTwo,
            "consistent_hash" => BalancePolicy::ConsistentHash,
            "p2c_ewma" => BalancePolicy::P2cEwma,
            _ => return None,
        })
    }

    /// Whether the policy looks at response times, so each attempt's must be told to it.
    pub fn uses_latency(self) -> bool {
        self == BalancePolicy::P2cEwma
    }

    /// Whether the policy looks at open connections (or requests in flight), so they must be
    /// counted.
    pub fn uses_load(self) -> bool {
        matches!(
            self,
            BalancePolicy::LeastConnections | BalancePolicy::RandomTwo | BalancePolicy::P2cEwma
        )
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
