//! The memory store: responses by key, shared by the workers, bounded in bytes, evicted by
//! S3-FIFO (Yang et al., SOSP 2023), which resists scans where LRU does not: a new object enters
//! a small FIFO queue (a tenth of the bytes) and reaches the main one only if it was read again
//! while there; an object evicted from the small queue leaves its key in a ghost queue, so one
//! that comes back soon goes straight to the main queue; the main queue is a FIFO whose objects
//! read since they last passed its tail go round again. A one-time scan therefore flows through
//! the small queue and never pushes out what is read often.
//!
//! The store is split into shards by key (one per 16 MiB, at most 16), each with its own queues
//! and its own lock: an operation is a hash lookup and a few queue steps under one shard's lock,
//! never I/O nor a copy of a body (values are `Arc`s).

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

use foldhash::quality::RandomState;
// A cache shared by the workers is shared state written by requests: like nginx's shared-memory
// zone and HAProxy's shared cache, it takes a lock, but one per shard, held for a few queue steps,
// and only on routes that cache (a hit then saves a whole upstream exchange).
#[allow(clippy::disallowed_types)]
use std::sync::{Arc, Mutex, MutexGuard};

use crate::lock;

/// What a stored value costs the store: its bytes, with whatever it holds.
pub trait Weighted {
    fn weight(&self) -> usize;
}

/// The queue an object is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

struct Slot<V> {
    value: Arc<V>,
    weight: usize,
    /// Reads since it entered its queue or last went round, at most 3.
    freq: u8,
    queue: Queue,
    /// Which insertion of the key this is (queue entries of earlier ones are stale).
    generation: u64,
}

/// Counts the store keeps (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub objects: usize,
    pub bytes: usize,
    pub evictions: u64,
}

struct Inner<K, V> {
    slots: HashMap<K, Slot<V>, RandomState>,
    small: VecDeque<(K, u64)>,
    main: VecDeque<(K, u64)>,
    ghost: VecDeque<K>,
    ghosts: HashMap<K, u64, RandomState>,
    small_bytes: usize,
    main_bytes: usize,
    generation: u64,
    evictions: u64,
}

/// Bytes per shard of a store, at least.
const SHARD_BYTES: usize = 16 << 20;

/// Values of type `V` by key `K`, at most `capacity` bytes (by [`Weighted::weight`]).
pub struct MemoryStore<K, V> {
    capacity: usize,
    /// Each shard's share of the bytes.
    shard_capacity: usize,
    #[allow(clippy::disallowed_types)]
    shards: Vec<Mutex<Inner<K, V>>>,
    hasher: RandomState,
}

impl<K: Hash + Eq + Clone, V: Weighted> MemoryStore<K, V> {
    /// A store of `capacity` bytes, one shard per 16 MiB (at most 16).
    pub fn new(capacity: usize) -> Self {
        Self::with_shards(capacity, (capacity / SHARD_BYTES).clamp(1, 16))
    }

    /// A store of `capacity` bytes in `shards` shards (at least one). Each shard's small queue,
    /// a tenth of its bytes, bounds the largest value: the disk store's index has one shard so
    /// that its objects may be a tenth of the whole.
    pub fn with_shards(capacity: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        MemoryStore {
            capacity,
            shard_capacity: capacity / shards,
            shards: (0..shards)
                .map(|_| {
                    #[allow(clippy::disallowed_types)]
                    Mutex::new(Inner {
                        slots: HashMap::default(),
                        small: VecDeque::new(),
                        main: VecDeque::new(),
                        ghost: VecDeque::new(),
                        ghosts: HashMap::default(),
                        small_bytes: 0,
                        main_bytes: 0,
                        generation: 0,
                        evictions: 0,
                    })
                })
                .collect(),
            hasher: RandomState::default(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The shard of `key`, locked.
    fn lock<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, Inner<K, V>> {
        let shard = (self.hasher.hash_one(key) as usize) % self.shards.len();
        lock(&self.shards[shard])
    }

    /// The value under `key`, counted as read.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
    {
        let mut inner = self.lock(key);
        let slot = inner.slots.get_mut(key)?;
        slot.freq = (slot.freq + 1).min(3);
        Some(slot.value.clone())
    }

    /// The value under `key`, not counted as read (to look, or to update it).
    pub fn peek<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
    {
        self.lock(key).slots.get(key).map(|s| s.value.clone())
    }

    /// Stores `value` under `key` (replacing what was there), evicting as needed; a value larger
    /// than the small queue's share of its shard is not stored (false).
    pub fn insert(&self, key: K, value: V) -> bool {
        self.insert_arc(key, Arc::new(value))
    }

    /// [`Self::insert`] of a value shared already.
    pub fn insert_arc(&self, key: K, value: Arc<V>) -> bool {
        let weight = value.weight();
        if weight > self.small_capacity().max(1) {
            self.remove(&key);
            return false;
        }
        let mut inner = self.lock(&key);
        inner.take(&key);
        inner.generation += 1;
        let generation = inner.generation;
        let queue = match inner.ghosts.remove(&key) {
            Some(_) => Queue::Main,
            None => Queue::Small,
        };
        match queue {
            Queue::Small => {
                inner.small.push_back((key.clone(), generation));
                inner.small_bytes += weight;
            }
            Queue::Main => {
                inner.main.push_back((key.clone(), generation));
                inner.main_bytes += weight;
            }
        }
        let slot = Slot {
            value,
            weight,
            freq: 0,
            queue,
            generation,
        };
        inner.slots.insert(key, slot);
        self.evict(&mut inner);
        true
    }

    /// Removes what is under `key`; whether there was something.
    pub fn remove<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.lock(key).take(key)
    }

    /// Removes every value `f` picks; how many.
    pub fn remove_where(&self, mut f: impl FnMut(&K, &V) -> bool) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            let mut inner = lock(shard);
            let doomed: Vec<K> = inner
                .slots
                .iter()
                .filter(|(k, s)| f(k, &s.value))
                .map(|(k, _)| k.clone())
                .collect();
            for key in &doomed {
                inner.take(key);
            }
            removed += doomed.len();
        }
        removed
    }

    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats::default();
        for shard in &self.shards {
            let inner = lock(shard);
            stats.objects += inner.slots.len();
            stats.bytes += inner.small_bytes + inner.main_bytes;
            stats.evictions += inner.evictions;
        }
        stats
    }

    fn small_capacity(&self) -> usize {
        self.shard_capacity / 10
    }

    fn evict(&self, inner: &mut Inner<K, V>) {
        while inner.small_bytes + inner.main_bytes > self.shard_capacity {
            if inner.small_bytes > self.small_capacity() || inner.main_bytes == 0 {
                self.evict_small(inner);
            } else {
                inner.evict_main();
            }
        }
        // The ghost queue remembers about as many keys as the main queue holds objects.
        let limit = inner.main.len().max(16);
        while inner.ghost.len() > limit {
            if let Some(key) = inner.ghost.pop_front() {
                inner.ghosts.remove(&key);
            }
        }
    }

    /// The small queue's oldest object goes: to the main queue if it was read while there, else
    /// out, its key to the ghost queue.
    fn evict_small(&self, inner: &mut Inner<K, V>) {
        let Some((key, generation)) = inner.small.pop_front() else {
            return;
        };
        let Some(slot) = inner
            .slots
            .get_mut(&key)
            .filter(|s| s.generation == generation && s.queue == Queue::Small)
        else {
            return;
        };
        let weight = slot.weight;
        inner.small_bytes -= weight;
        if slot.freq > 0 {
            slot.freq = 0;
            slot.queue = Queue::Main;
            inner.main.push_back((key, generation));
            inner.main_bytes += weight;
        } else {
            inner.slots.remove(&key);
            inner.evictions += 1;
            inner.ghosts.insert(key.clone(), generation);
            inner.ghost.push_back(key);
        }
    }
}

impl<K: Hash + Eq + Clone, V: Weighted> std::fmt::Debug for MemoryStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("capacity", &self.capacity)
            .field("shards", &self.shards.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<K: Hash + Eq + Clone, V> Inner<K, V> {
    /// Takes `key`'s object out of the store (its queue entry goes stale).
    fn take<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        let Some(slot) = self.slots.remove(key) else {
            return false;
        };
        match slot.queue {
            Queue::Small => self.small_bytes -= slot.weight,
            Queue::Main => self.main_bytes -= slot.weight,
        }
        true
    }

    /// The main queue's oldest object goes round again if it was read since it last came by
    /// (one read less), else out.
    fn evict_main(&mut self) {
        let Some((key, generation)) = self.main.pop_front() else {
            return;
        };
        let Some(slot) = self
            .slots
            .get_mut(&key)
            .filter(|s| s.generation == generation && s.queue == Queue::Main)
        else {
            return;
        };
        if slot.freq > 0 {
            slot.freq -= 1;
            self.main.push_back((key, generation));
        } else {
            self.main_bytes -= slot.weight;
            self.slots.remove(&key);
            self.evictions += 1;
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
