//! State that a reload carries over from one snapshot to the next.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use rampart_model::health::TargetHealth;
use rampart_model::Snapshot;

use super::tls;

/// State that outlives one snapshot: target health and listener connection counts, keyed so that
/// a reload which keeps a target or a listener keeps its state too.
#[derive(Debug, Default)]
pub struct LiveState {
    generation: u64,
    health: HashMap<(String, SocketAddr), Arc<TargetHealth>>,
    open: HashMap<SocketAddr, Arc<AtomicUsize>>,
    /// TLS ticket keys and session caches by listener address.
    tls: HashMap<SocketAddr, tls::Resumption>,
}

impl LiveState {
    pub(super) fn target_health(&mut self, upstream: &str, addr: SocketAddr) -> Arc<TargetHealth> {
        self.health.entry((upstream.to_string(), addr)).or_default().clone()
    }

    pub(super) fn open_connections(&mut self, bind: SocketAddr) -> Arc<AtomicUsize> {
        self.open.entry(bind).or_default().clone()
    }

    /// The ticket keys and session cache of the TLS listener on `bind`, kept across reloads (a
    /// new cache when its size changed). `None` if ticket keys cannot be made.
    pub(super) fn tls_resumption(&mut self, bind: Option<SocketAddr>, cache_size: usize) -> Option<tls::Resumption> {
        let Some(bind) = bind else {
            return tls::Resumption::new(cache_size);
        };
        match self.tls.get(&bind) {
            Some(r) if r.cache_size == cache_size => Some(r.clone()),
            _ => {
                let r = tls::Resumption::new(cache_size)?;
                self.tls.insert(bind, r.clone());
                Some(r)
            }
        }
    }

    pub(super) fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Forgets state that `snapshot` no longer uses.
    pub(super) fn keep_only(&mut self, snapshot: &Snapshot) {
        self.health.retain(|(up, addr), _| {
            snapshot
                .upstreams
                .iter()
                .any(|u| &u.name == up && u.targets.iter().any(|t| &t.addr == addr))
        });
        self.open
            .retain(|bind, _| snapshot.listeners.iter().any(|l| &l.bind == bind));
        self.tls
            .retain(|bind, _| snapshot.listeners.iter().any(|l| &l.bind == bind && l.tls.is_some()));
    }
}
