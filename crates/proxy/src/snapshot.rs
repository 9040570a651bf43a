//! The compiled configuration: what workers run on.
//!
//! A [`Snapshot`] is immutable once built. Workers take the current one when they accept a
//! connection and keep it until that connection closes, so a reload never changes the rules under
//! an open connection. Names are resolved to indices at compile time.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use rampart_proto::proxy_protocol::ProxyVersion;

use crate::balance::{BalancePolicy, Maglev};
use crate::health::TargetHealth;
use crate::net::IpNet;

/// Everything the data plane needs, compiled from one config file (or command line).
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every successful load; workers rebuild per-snapshot state when it changes.
    pub generation: u64,
    pub listeners: Vec<Listener>,
    pub upstreams: Vec<Upstream>,
    /// Where session records go, if anywhere.
    pub session_log: Option<std::path::PathBuf>,
    /// How long open connections may run on after SIGTERM/SIGINT.
    pub drain_timeout: Duration,
}

/// One TCP listener. Every worker binds its own socket for it (SO_REUSEPORT).
#[derive(Debug)]
pub struct Listener {
    pub name: String,
    pub bind: SocketAddr,
    /// Index into [`Snapshot::upstreams`].
    pub upstream: usize,
    /// Open connections allowed at once across all workers; past it, new ones are closed at once.
    pub max_connections: usize,
    /// Open connections now, shared by the workers. Kept across reloads for the same bind address.
    pub open_connections: Arc<AtomicUsize>,
    /// A connection with no byte in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Size of each relay buffer (one per direction while a connection copies through user space).
    pub buffer_size: usize,
    /// Clients from these networks must begin with a PROXY protocol header (v1 or v2).
    pub proxy_protocol_from: Vec<IpNet>,
    /// How long a trusted client has to send its PROXY header.
    pub proxy_header_timeout: Duration,
}

impl Listener {
    /// Whether a client at `ip` must send a PROXY header first.
    pub fn expects_proxy_header(&self, ip: std::net::IpAddr) -> bool {
        self.proxy_protocol_from.iter().any(|net| net.contains(ip))
    }
}

/// A group of interchangeable targets and how to choose among them.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    pub policy: BalancePolicy,
    pub targets: Vec<Target>,
    /// Built for [`BalancePolicy::ConsistentHash`] only.
    pub maglev: Option<Maglev>,
    pub connect_timeout: Duration,
    /// Connect attempts per client connection, each to a different target.
    pub connect_attempts: usize,
    /// Send a PROXY protocol header of this version first on every upstream connection.
    pub send_proxy_protocol: Option<ProxyVersion>,
    pub passive_health: PassiveHealth,
    pub health_check: Option<HealthCheck>,
}

/// One backend address.
#[derive(Debug)]
pub struct Target {
    /// As written in the config (`host:port`), for logs and records.
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    /// Shared with the health checker; kept across reloads for the same upstream and address.
    pub health: Arc<TargetHealth>,
}

/// How failed connects mark a target down.
#[derive(Debug, Clone, Copy)]
pub struct PassiveHealth {
    /// Down time after the first failure; doubles with each further consecutive failure.
    pub base_backoff: Duration,
    /// Upper bound of the down time.
    pub max_backoff: Duration,
}

/// Active TCP health checking of every target of an upstream.
#[derive(Debug, Clone, Copy)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a down target up.
    pub rise: u32,
    /// Consecutive failures that take an up target down.
    pub fall: u32,
}
