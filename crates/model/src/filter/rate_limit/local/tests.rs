use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::*;

const SEC: u64 = 1_000_000_000;

fn per_second(rate: u64, burst: u64) -> RateLimit {
    RateLimit::new(rate, Duration::from_secs(1), burst).unwrap()
}

/// Takes one token at a time until denied; returns how many were granted.
fn drain(table: &LocalBuckets, key: u64, limit: &RateLimit, now: u64) -> u64 {
    let mut granted = 0;
    while table.take(key, limit, now, 1).is_allowed() {
        granted += 1;
        assert!(granted <= limit.burst(), "more than the burst for key {key}");
    }
    granted
}

#[test]
fn sixteen_bytes_a_slot_and_capacity_rounds_up() {
    assert_eq!(std::mem::size_of::<Slot>(), 16);
    let t = LocalBuckets::new(1000).unwrap();
    assert_eq!(t.capacity(), 1024);
    assert_eq!(t.memory_bytes(), 16 * 1024);
    assert_eq!(LocalBuckets::new(0).unwrap().capacity(), PROBE);
    assert_eq!(
        LocalBuckets::new(MAX_CAPACITY + 1).unwrap_err(),
        RateLimitError::CapacityTooLarge
    );
}

#[test]
fn shared_by_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Arc<LocalBuckets>>();
}

#[test]
fn exact_counts_for_one_key() {
    let t = LocalBuckets::new(64).unwrap();
    let l = per_second(10, 5);
    let now = 3 * SEC;
    for left in (0..5).rev() {
        let d = t.take(42, &l, now, 1);
        assert_eq!((d.granted, d.remaining), (1, left));
    }
    let d = t.take(42, &l, now, 1);
    assert_eq!((d.granted, d.retry_after), (0, SEC / 10));
    assert_eq!(t.take(42, &l, now + SEC / 10 - 1, 1).granted, 0);
    assert_eq!(t.take(42, &l, now + SEC / 10, 1).granted, 1);
    // Another key has its own bucket; hash 0 is a key like any other.
    assert_eq!(drain(&t, 43, &l, now), 5);
    assert_eq!(drain(&t, 0, &l, now), 5);
    // All or nothing.
    assert_eq!(t.take(44, &l, now, 6).granted, 0);
    assert_eq!(t.take(44, &l, now, 5).granted, 5);
}

#[test]
fn threads_hammering_one_key_get_exactly_the_burst() {
    const THREADS: usize = 8;
    let table = Arc::new(LocalBuckets::new(16).unwrap());
    let limit = per_second(1, 1000);
    let now = 5 * SEC;
    let start = Arc::new(Barrier::new(THREADS));
    let allowed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (table, start, allowed) = (table.clone(), start.clone(), allowed.clone());
            thread::spawn(move || {
                start.wait();
                for _ in 0..2_000 {
                    allowed.fetch_add(table.take(0xfeed, &limit, now, 1).granted, Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(allowed.load(Relaxed), 1000);
}

#[test]
fn threads_hammering_many_keys_get_exactly_the_burst_each() {
    const THREADS: usize = 4;
    const KEYS: u64 = 64;
    let table = Arc::new(LocalBuckets::new(4096).unwrap());
    let limit = per_second(1, 50);
    let now = SEC;
    let start = Arc::new(Barrier::new(THREADS));
    let allowed: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (table, start, allowed) = (table.clone(), start.clone(), allowed.clone());
            thread::spawn(move || {
                start.wait();
                for round in 0..100 {
                    for k in 0..KEYS {
                        // Each thread walks the keys from a different place.
                        let k = (k + t as u64 * 17 + round) % KEYS;
                        let key = k.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xabc;
                        allowed[k as usize].fetch_add(table.take(key, &limit, now, 1).granted, Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for (k, a) in allowed.iter().enumerate() {
        assert_eq!(a.load(Relaxed), 50, "key {k}");
    }
}

#[test]
fn a_full_again_slot_is_reused_and_live_ones_are_kept() {
    // Eight slots: every key's probe covers the whole table.
    let t = LocalBuckets::new(PROBE).unwrap();
    let l = per_second(1, 2);
    // Key 100 empties its bucket (TAT 2 s); keys 1..=7 take one token each (TAT 1 s).
    assert_eq!(drain(&t, 100, &l, 0), 2);
    for k in 1..=7 {
        assert!(t.take(k, &l, 0, 1).is_allowed());
    }
    // At 1 s keys 1..=7 are full again: seven new keys take their slots, each with a full bucket.
    for k in 11..=17 {
        assert_eq!(drain(&t, k, &l, SEC), 2, "key {k}");
    }
    // Key 100 kept its slot and its state: one token back after one second, not two.
    assert_eq!(drain(&t, 100, &l, SEC), 1);
    // A reused key comes back as a full bucket (it was full when it lost its slot).
    assert_eq!(drain(&t, 1, &l, 2 * SEC), 2);
}

#[test]
fn a_full_table_replaces_the_bucket_closest_to_full() {
    let t = LocalBuckets::new(PROBE).unwrap();
    let l = per_second(1, 10);
    // Keys 10..18 take 2, 3, .. 9 tokens: key 10's bucket is the fullest.
    for k in 10..18 {
        assert_eq!(t.take(k, &l, 0, k - 8).granted, k - 8);
    }
    // A ninth key finds every slot live and replaces key 10; it starts full.
    assert_eq!(t.take(18, &l, 0, 1).remaining, 9);
    // The others kept their buckets (exactly what they had left, no more).
    for k in 11..18 {
        assert_eq!(drain(&t, k, &l, 0), 10 - (k - 8), "key {k}");
    }
    // Key 10 comes back with a full bucket, replacing key 18 (now the fullest).
    assert_eq!(drain(&t, 10, &l, 0), 10);
    assert_eq!(drain(&t, 18, &l, 0), 10);
}

#[test]
fn hash_0_and_hash_1_are_one_key() {
    // 0 marks an empty slot, so a key hashing to 0 is stored as 1 (a 2^-64 collision).
    let t = LocalBuckets::new(PROBE).unwrap();
    let l = per_second(1, 3);
    assert_eq!(t.take(0, &l, 0, 2).granted, 2);
    assert_eq!(drain(&t, 1, &l, 0), 1);
}

#[test]
fn a_request_beyond_the_burst_on_a_claimed_slot_resets_the_evicted_state() {
    let t = LocalBuckets::new(PROBE).unwrap();
    let l = per_second(1, 4);
    for k in 10..18 {
        assert_eq!(drain(&t, k, &l, 0), 4);
    }
    // Key 18 wants more than a bucket holds: denied, but the slot it claimed is a full bucket,
    // not the drained one it replaced.
    assert_eq!(t.take(18, &l, 0, 5).granted, 0);
    assert_eq!(drain(&t, 18, &l, 0), 4);
}

#[test]
fn huge_times_and_limits_do_not_overflow() {
    let t = LocalBuckets::new(PROBE).unwrap();
    for l in [
        RateLimit::new(1, Duration::from_nanos(u64::MAX), 1).unwrap(),
        RateLimit::new(1, Duration::from_nanos(1), u64::MAX).unwrap(),
        per_second(SEC, u64::MAX / 2),
    ] {
        for now in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            for k in 0..10 {
                let d = t.take(k, &l, now, 1);
                assert!(d.granted <= 1);
                let d = t.take(k, &l, now, u64::MAX);
                assert!(d.granted == 0 || d.granted == u64::MAX);
            }
        }
    }
}
