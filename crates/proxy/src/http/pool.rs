//! Each worker's idle keep-alive upstream connections ("hot pipes"), keyed by what makes a
//! connection reusable for a request: the target address and, when the upstream is sent PROXY
//! headers, the client the header named, and for TLS the configuration it was made with.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::stream::Stream;

/// What an idle connection must match to carry a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolKey {
    pub target: SocketAddr,
    /// The client named in the PROXY header this connection began with, if it began with one:
    /// such a connection speaks for that client only.
    pub proxied_client: Option<SocketAddr>,
    /// For TLS, the identity of the client configuration it was made with (0 for plain TCP):
    /// a reload that changes an upstream's TLS settings leaves its old connections unused.
    pub tls: usize,
}

impl PoolKey {
    pub fn new(target: SocketAddr) -> Self {
        PoolKey {
            target,
            proxied_client: None,
            tls: 0,
        }
    }
}

impl Hash for PoolKey {
    /// A few words, not the derived byte-by-byte walk.
    fn hash<H: Hasher>(&self, state: &mut H) {
        fn addr<H: Hasher>(a: &SocketAddr, state: &mut H) {
            match a {
                SocketAddr::V4(v4) => state.write_u32(u32::from(*v4.ip())),
                SocketAddr::V6(v6) => state.write(&v6.ip().octets()),
            }
            state.write_u16(a.port());
        }
        addr(&self.target, state);
        state.write_usize(self.tls);
        if let Some(client) = &self.proxied_client {
            addr(client, state);
        }
    }
}

struct Idle {
    stream: Stream,
    since: Instant,
}

/// A multiply-rotate hasher: target addresses are few and not attacker-chosen, so SipHash's
/// flooding resistance buys nothing here and costs time on every request.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Idle connections by key: each key's list in a slot of `lists`, found through `slots`; the
/// slot used last is tried first (by comparing keys), so the take and the put of a request, and
/// the requests of a worker that talks to one target, hash no key.
#[derive(Default)]
pub struct UpstreamPool {
    slots: HashMap<PoolKey, usize, BuildHasherDefault<AddrHasher>>,
    lists: Vec<(PoolKey, Vec<Idle>)>,
    /// The slot used last (a hint: its key is compared before it is used).
    last: usize,
}

impl UpstreamPool {
    /// The slot of `key`, if it has one.
    fn slot(&mut self, key: &PoolKey) -> Option<usize> {
        if self.lists.get(self.last).is_some_and(|(k, _)| k == key) {
            return Some(self.last);
        }
        let slot = *self.slots.get(key)?;
        self.last = slot;
        Some(slot)
    }

    /// The most recently parked live connection for `key` no older than `max_idle`, if any.
    /// Connections the upstream has closed (or that hold unexpected bytes) are dropped.
    pub fn take(&mut self, key: &PoolKey, max_idle: Duration) -> Option<Stream> {
        let slot = self.slot(key)?;
        let list = &mut self.lists[slot].1;
        while let Some(mut conn) = list.pop() {
            if conn.since.elapsed() <= max_idle && conn.stream.is_reusable_when_idle() {
                return Some(conn.stream);
            }
        }
        None
    }

    /// Parks a connection after a complete exchange, unless `key` already has `max` parked.
    pub fn put(&mut self, key: PoolKey, stream: Stream, max: usize) {
        let slot = match self.slot(&key) {
            Some(slot) => slot,
            None => {
                let slot = self.lists.len();
                self.lists.push((key, Vec::new()));
                self.slots.insert(key, slot);
                self.last = slot;
                slot
            }
        };
        let list = &mut self.lists[slot].1;
        if list.len() < max {
            list.push(Idle {
                stream,
                since: Instant::now(),
            });
        }
    }

    /// Closes parked connections older than `max_idle` (called periodically by the worker).
    pub fn sweep(&mut self, max_idle: Duration) {
        for (_, list) in &mut self.lists {
            list.retain_mut(|c| c.since.elapsed() <= max_idle && c.stream.is_reusable_when_idle());
        }
        self.keep_lists(|_, list| !list.is_empty());
    }

    /// Closes the idle connections to targets for which `keep` says no (after a reload).
    pub fn retain_targets(&mut self, keep: impl Fn(SocketAddr) -> bool) {
        self.keep_lists(|key, _| keep(key.target));
    }

    /// Keeps the keys' lists for which `keep` says yes (dropping the others' connections), and
    /// numbers the slots again.
    fn keep_lists(&mut self, mut keep: impl FnMut(&PoolKey, &[Idle]) -> bool) {
        let before = self.lists.len();
        self.lists.retain(|(key, list)| keep(key, list));
        if self.lists.len() != before {
            self.slots.clear();
            self.slots
                .extend(self.lists.iter().enumerate().map(|(slot, (key, _))| (*key, slot)));
        }
    }

    /// How many idle connections are kept for `key`.
    #[cfg(test)]
    pub fn idle_count(&self, key: &PoolKey) -> usize {
        self.slots.get(key).map_or(0, |&slot| self.lists[slot].1.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` connected loopback streams (the accepting ends are kept open by the returned list).
    async fn streams(n: usize) -> (Vec<Stream>, Vec<tokio::net::TcpStream>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..n {
            ours.push(Stream::Tcp(tokio::net::TcpStream::connect(addr).await.unwrap()));
            theirs.push(listener.accept().await.unwrap().0);
        }
        (ours, theirs)
    }

    #[test]
    fn connections_are_kept_per_key_up_to_the_limit_and_dropped_with_their_target() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (mut conns, _peers) = streams(4).await;
            let target: SocketAddr = "10.0.0.1:80".parse().unwrap();
            let other: SocketAddr = "10.0.0.2:80".parse().unwrap();
            let plain = PoolKey::new(target);
            let alice = PoolKey {
                target,
                proxied_client: Some("192.0.2.1:1000".parse().unwrap()),
                tls: 0,
            };
            let idle = Duration::from_secs(60);
            let mut pool = UpstreamPool::default();
            pool.put(alice, conns.pop().unwrap(), 8);
            // A connection that began with Alice's PROXY header is hers alone.
            assert!(pool.take(&plain, idle).is_none());
            assert!(pool
                .take(
                    &PoolKey {
                        proxied_client: Some("192.0.2.2:1000".parse().unwrap()),
                        ..alice
                    },
                    idle
                )
                .is_none());
            let hers = pool.take(&alice, idle).unwrap();
            pool.put(alice, hers, 8);
            // At most `max` per key.
            pool.put(plain, conns.pop().unwrap(), 1);
            pool.put(plain, conns.pop().unwrap(), 1);
            assert_eq!(pool.idle_count(&plain), 1);
            pool.put(PoolKey::new(other), conns.pop().unwrap(), 1);
            // After a reload without `target`, only `other` keeps its connection.
            pool.retain_targets(|addr| addr == other);
            assert_eq!((pool.idle_count(&plain), pool.idle_count(&alice)), (0, 0));
            assert_eq!(pool.idle_count(&PoolKey::new(other)), 1);
            // The slots were numbered again: `other`'s connection is found, by hint or by hash.
            let back = pool.take(&PoolKey::new(other), idle).unwrap();
            pool.put(plain, back, 1);
            assert_eq!(pool.idle_count(&plain), 1);
            assert!(pool.take(&PoolKey::new(other), idle).is_none());
        });
    }
}
