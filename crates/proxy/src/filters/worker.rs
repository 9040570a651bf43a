//! What the built-in filters keep per worker: a random number generator (request ids). Owned by
//! the worker's thread: no lock, no shared write.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

/// Per-worker filter state.
pub struct FilterWorkerState {
    rng: Cell<u64>,
}

impl FilterWorkerState {
    /// State for worker `id`, its generator seeded from the process's random hash keys (which
    /// come from the operating system's generator) and the worker's id.
    pub fn new(id: usize) -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_usize(id);
        let seed = hasher.finish() | 1;
        FilterWorkerState { rng: Cell::new(seed) }
    }

    /// 64 random bits (wyrand: fast, good enough for ids; not for secrets).
    pub fn random(&self) -> u64 {
        let s = self.rng.get().wrapping_add(0xa076_1d64_78bd_642f);
        self.rng.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        (t as u64) ^ ((t >> 64) as u64)
    }
}
