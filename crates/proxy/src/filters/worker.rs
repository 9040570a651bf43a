//! What filters keep per worker: a random number generator (request ids), each filter's own
//! per-worker state in its slot ([`WorkerSlots`]: caches, leases, connections), and the
//! connections to the Redis servers of GLOBAL rate limits, one per server. Owned by the worker's
//! thread: no lock, no shared write. Filters see it through
//! [`FilterWorker`](crate::http::filter::FilterWorker).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::rc::{Rc, Weak};

use rampart_model::filter::rate_limit::RedisEndpoint;

use super::rate_limit::redis::RedisClient;
use crate::http::filter::WorkerSlots;

/// Per-worker filter state.
pub struct FilterWorkerState {
    id: usize,
    rng: Cell<u64>,
    /// Each filter's per-worker state, by the index of its slot.
    pub slots: WorkerSlots,
    /// Redis connections by server, shared by the filters that use the server (each holds an
    /// `Rc`; the connection closes when the last one goes).
    redis: RefCell<HashMap<RedisEndpoint, Weak<RedisClient>>>,
}

impl FilterWorkerState {
    /// State for worker `id`, its generator seeded from the process's random hash keys (which
    /// come from the operating system's generator) and the worker's id.
    pub fn new(id: usize) -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_usize(id);
        let seed = hasher.finish() | 1;
        FilterWorkerState {
            id,
            rng: Cell::new(seed),
            slots: WorkerSlots::default(),
            redis: RefCell::default(),
        }
    }

    /// The worker's number.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The worker's client of the Redis at `endpoint`, started on first use (inside the
    /// worker's `LocalSet`).
    pub fn redis_client(&self, endpoint: &RedisEndpoint) -> Rc<RedisClient> {
        let mut clients = self.redis.borrow_mut();
        if let Some(client) = clients.get(endpoint).and_then(Weak::upgrade) {
            return client;
        }
        clients.retain(|_, c| c.strong_count() > 0);
        let client = Rc::new(RedisClient::start(endpoint.clone()));
        clients.insert(endpoint.clone(), Rc::downgrade(&client));
        client
    }

    /// 64 random bits (wyrand: fast, good enough for ids; not for secrets).
    pub fn random(&self) -> u64 {
        let s = self.rng.get().wrapping_add(0xa076_1d64_78bd_642f);
        self.rng.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        (t as u64) ^ ((t >> 64) as u64)
    }
}
