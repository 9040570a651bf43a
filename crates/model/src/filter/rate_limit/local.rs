//! LOCAL mode's buckets: one table per rate-limit filter and process, shared by every worker
//! thread (held in an `Arc` in the compiled snapshot), with no lock.
//!
//! # Layout
//!
//! A fixed array of slots (the capacity rounded up to a power of two, at least [`PROBE`]), each
//! two `AtomicU64`: the 64-bit hash of the bucket's key (0: never used) and the bucket's TAT in
//! [`monotonic_ns`](super::monotonic_ns) nanoseconds. **16 bytes a slot** (a million slots take
//! 16 MiB), four to a cache line, nothing per key beyond its slot. A key's home slot is the top
//! bits of its hash times a Fibonacci constant; it lives in one of the [`PROBE`] slots from there
//! (open addressing, linear probe, wrapping).
//!
//! # A take
//!
//! Look through the key's probe slots for its hash; found: a compare-and-swap loop on the TAT
//! runs [`RateLimit::take`] until it stores its new TAT (a denial stores nothing, so a flood of
//! denied requests only reads). As the TAT is one word changed only by CAS, takes of one key in
//! one slot are exact however many threads race: at one instant exactly `burst` tokens go out.
//!
//! Not found: claim a slot with a CAS on its key hash, the first of the probe slots that is
//! - empty, or
//! - **full again** (TAT <= now). A bucket is summed up by `max(TAT - now, 0)`, so a full bucket is
//!   indistinguishable from a fresh one: the old key loses nothing (when it comes back it claims a
//!   slot as a full bucket, which is what it had) and the new key starts full, which it would have.
//!
//! When every probe slot holds a live bucket (TAT > now), the one **closest to full** (smallest
//! TAT) is replaced: the new key starts with a full bucket, and so does the evicted key when it
//! comes back: it regains the tokens it had spent (at most `burst`), the price of a bounded table.
//! Size the table for the keys active within one refill time (`tolerance`) to keep that rare.
//! A lost claim (another thread changed the slot's key first) looks the key up again.
//!
//! A lookup stops at the first empty slot: a key is only ever placed at the first claimable slot
//! of its probe, or (all probe slots live, none empty) at the evicted one, and a slot never
//! becomes empty again, so no key lives beyond an empty slot.
//!
//! # Races, and why they are benign
//!
//! The key hash and the TAT are two words, so a slot can change hands between a thread reading
//! the key and its CAS on the TAT. Two keys then meet in a reclaimed (or evicted) slot: a thread
//! that found key X computes a take while another thread reclaims the slot for key Y. Either the
//! X take's CAS fails, the thread sees the key changed and starts over (nothing is mischarged), or
//! it succeeds first and its token is charged to the bucket that Y takes over: Y starts that many
//! tokens short, X (whose next request claims a slot as a full bucket) got them for free. Only
//! takes in flight at the instant of the reclaim are affected, so at most one token per thread
//! taking concurrently (per worker) per reclaim; a reclaimed bucket was full, so X was not being
//! limited anyway. Likewise two threads can, when their views of `now` differ, claim two slots
//! for one new key; lookups then use the first in probe order and the other drains away, so that
//! key gets at most the tokens taken in flight from the second slot beyond its `burst`. Steady
//! state (a key in its slot) is exact.
//!
//! Every access is `Relaxed`: each decision depends on one word at a time, and a CAS always acts
//! on the latest value of its word; no other memory is published through these words.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{Decision, RateLimit, RateLimitError};

/// Slots a key may live in, from its home slot on.
pub const PROBE: usize = 8;

/// The most slots a table may have (2^26: 1 GiB).
pub const MAX_CAPACITY: usize = 1 << 26;

/// 2^64 / φ: multiplying by it spreads any hash's bits into the top bits, which pick the home slot.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// The buckets of one rate limit in one process, keyed by a 64-bit hash of the key.
#[derive(Debug)]
pub struct LocalBuckets {
    slots: Box<[Slot]>,
    /// 64 - log2(capacity): the home slot is `(hash × FIBONACCI) >> shift`.
    shift: u32,
}

/// One bucket: 16 bytes.
#[derive(Debug, Default)]
struct Slot {
    /// The key's hash (never 0: hash 0 is stored as 1); 0 while the slot was never used.
    key: AtomicU64,
    /// The bucket's theoretical arrival time, nanoseconds of `monotonic_ns`.
    tat: AtomicU64,
}

/// Where a take goes.
enum Lookup<'a> {
    /// The key's own slot.
    Found(&'a Slot),
    /// A slot to claim for the key: its key and TAT as read (the expected values of the CASes).
    Claim { slot: &'a Slot, key: u64, tat: u64 },
}

impl LocalBuckets {
    /// A table of `capacity` slots, rounded up to a power of two and to at least [`PROBE`].
    pub fn new(capacity: usize) -> Result<LocalBuckets, RateLimitError> {
        if capacity > MAX_CAPACITY {
            return Err(RateLimitError::CapacityTooLarge);
        }
        let capacity = capacity.max(PROBE).next_power_of_two();
        Ok(LocalBuckets {
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            shift: 64 - capacity.trailing_zeros(),
        })
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes the slots take (16 a slot).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// One request for `wanted` tokens (all or nothing) from the bucket of the key whose hash is
    /// `key_hash`, at `now` ([`monotonic_ns`](super::monotonic_ns)). Every call for one table
    /// must use the same `limit` (a reload with a new limit may keep the table: a TAT means the
    /// same under any limit, and one further ahead than the new tolerance just waits).
    pub fn take(&self, key_hash: u64, limit: &RateLimit, now: u64, wanted: u64) -> Decision {
        let key = key_hash.max(1);
        'lookup: loop {
            let (slot, mut expected, mut basis) = match self.lookup(key, now) {
                Lookup::Found(slot) => {
                    let tat = slot.tat.load(Relaxed);
                    (slot, tat, tat)
                }
                Lookup::Claim {
                    slot,
                    key: old_key,
                    tat,
                } => {
                    if slot.key.compare_exchange(old_key, key, Relaxed, Relaxed).is_err() {
                        continue 'lookup;
                    }
                    // Ours, as a full bucket: a TAT in the past is one already; an evicted
                    // bucket's is replaced by `now` (full) or by what this take leaves.
                    (slot, tat, tat.min(now))
                }
            };
            loop {
                let decision = limit.take(basis, now, wanted);
                if decision.tat == expected {
                    return decision;
                }
                match slot.tat.compare_exchange(expected, decision.tat, Relaxed, Relaxed) {
                    Ok(_) => return decision,
                    // Another key took the slot over: this one must find (or claim) its own.
                    Err(_) if slot.key.load(Relaxed) != key => continue 'lookup,
                    Err(actual) => {
                        expected = actual;
                        basis = actual;
                    }
                }
            }
        }
    }

    /// The key's slot, or the slot to claim for it: the first empty or full-again probe slot,
    /// else the live one closest to full.
    fn lookup(&self, key: u64, now: u64) -> Lookup<'_> {
        let mask = self.slots.len() - 1;
        let home = (key.wrapping_mul(FIBONACCI) >> self.shift) as usize;
        let mut reusable = None;
        let mut victim: Option<(&Slot, u64, u64)> = None;
        for i in 0..PROBE {
            let slot = &self.slots[(home + i) & mask];
            let slot_key = slot.key.load(Relaxed);
            if slot_key == key {
                return Lookup::Found(slot);
            }
            let tat = slot.tat.load(Relaxed);
            if slot_key == 0 {
                // The key is not further on (see the module docs).
                let (slot, old_key, tat) = reusable.unwrap_or((slot, 0, tat));
                return Lookup::Claim {
                    slot,
                    key: old_key,
                    tat,
                };
            }
            if reusable.is_none() && tat <= now {
                reusable = Some((slot, slot_key, tat));
            }
            if victim.is_none_or(|(_, _, closest)| tat < closest) {
                victim = Some((slot, slot_key, tat));
            }
        }
        match reusable.or(victim) {
            Some((slot, old_key, tat)) => Lookup::Claim {
                slot,
                key: old_key,
                tat,
            },
            None => unreachable!("PROBE > 0 slots were looked at"),
        }
    }
}

#[cfg(test)]
mod tests;
