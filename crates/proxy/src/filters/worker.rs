//! What the built-in filters keep per worker: a random number generator (request ids), each
//! filter's own per-worker state ([`FilterSlots`]: caches, leases), and the connections to the
//! Redis servers of GLOBAL rate limits, one per server. Owned by the worker's thread: no lock, no
//! shared write.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::rc::{Rc, Weak};

use rampart_model::filter::rate_limit::RedisEndpoint;
use rampart_model::filter::FilterId;

use super::rate_limit::redis::RedisClient;

/// Per-worker filter state.
pub struct FilterWorkerState {
    rng: Cell<u64>,
    /// Each filter's per-worker state, by the filter's id.
    pub slots: FilterSlots,
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
            rng: Cell::new(seed),
            slots: FilterSlots::default(),
            redis: RefCell::default(),
        }
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

/// The state each filter keeps on one worker, by [`FilterId`]: made on a filter's first request
/// on the worker, dropped by [`FilterSlots::retain`] once no filter of the current snapshot has
/// the id (the worker's housekeeping calls it after a reload).
#[derive(Default)]
pub struct FilterSlots {
    slots: RefCell<HashMap<FilterId, Box<dyn Any>>>,
}

impl FilterSlots {
    /// Runs `f` on filter `id`'s state of type `T` (made with `make` the first time). The state
    /// is borrowed for the call only, so `f` cannot hold it across an `.await`; `f` must not call
    /// `with` again (a nested call for another filter would find the slots borrowed: it panics).
    pub fn with<T: 'static, R>(&self, id: FilterId, make: impl FnOnce() -> T, f: impl FnOnce(&mut T) -> R) -> R {
        let mut slots = self.slots.borrow_mut();
        let slot = slots.entry(id).or_insert_with(|| Box::new(()));
        if !slot.is::<T>() {
            // Made on first use (an id belongs to one filter, so one type: a slot of another
            // type is only the placeholder above).
            *slot = Box::new(make());
        }
        match slot.downcast_mut::<T>() {
            Some(state) => f(state),
            None => unreachable!("the slot was just made a T"),
        }
    }

    /// Runs `f` on filter `id`'s state of type `T`, if it has one (`None` otherwise).
    pub fn with_existing<T: 'static, R>(&self, id: FilterId, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut slots = self.slots.borrow_mut();
        slots.get_mut(&id)?.downcast_mut::<T>().map(f)
    }

    /// Keeps the states of the ids `keep` says yes to, drops the others.
    pub fn retain(&self, mut keep: impl FnMut(FilterId) -> bool) {
        self.slots.borrow_mut().retain(|id, _| keep(*id));
    }

    /// How many filters have state here.
    pub fn len(&self) -> usize {
        self.slots.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_filter_has_its_own_state_until_dropped() {
        let slots = FilterSlots::default();
        let (a, b) = (FilterId::new(), FilterId::new());
        assert_ne!(a, b);
        slots.with(a, || 0u32, |n| *n += 1);
        slots.with(a, || 0u32, |n| *n += 1);
        slots.with(b, || 10u32, |n| *n += 1);
        assert_eq!(slots.with(a, || 0u32, |n| *n), 2);
        assert_eq!(slots.with(b, || 0u32, |n| *n), 11);
        slots.retain(|id| id == b);
        assert_eq!(slots.len(), 1);
        assert_eq!(slots.with(a, || 5u32, |n| *n), 5);
    }
}
