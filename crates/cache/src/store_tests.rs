//! The memory store: bounds, replacement, removal, and S3-FIFO against LRU on a Zipf trace with
//! scans (the hit ratios are printed; run with `--nocapture` to read them).

use std::collections::{BTreeMap, HashMap};

use super::{MemoryStore, Weighted};

struct Blob(usize);

impl Weighted for Blob {
    fn weight(&self) -> usize {
        self.0
    }
}

#[test]
fn the_store_stays_within_its_bytes_and_replaces_and_removes() {
    let store = MemoryStore::new(1000);
    for key in 0..100u32 {
        assert!(store.insert(key, Blob(50)));
        assert!(store.stats().bytes <= 1000);
    }
    assert_eq!(store.stats().objects, 20);
    assert!(store.stats().evictions >= 80);
    // Replacing a key counts its new weight only.
    store.insert(99, Blob(10));
    assert_eq!(store.peek(&99).map(|b| b.0), Some(10));
    assert!(store.stats().bytes <= 1000);
    assert!(store.remove(&99));
    assert!(store.get(&99).is_none());
    let before = store.stats().objects;
    let removed = store.remove_where(|k, _| k % 2 == 0);
    assert!(removed > 0);
    assert_eq!(store.stats().objects, before - removed);
    assert!((0..100u32).filter(|k| k % 2 == 0).all(|k| store.peek(&k).is_none()));
    // An object larger than the small queue's tenth is refused.
    assert!(!store.insert(7, Blob(101)));
    assert!(store.get(&7).is_none());
}

#[test]
fn a_key_read_while_new_survives_a_scan_that_lru_would_let_flush_it() {
    let store = MemoryStore::new(100 * 10);
    store.insert(0u32, Blob(10));
    store.get(&0);
    for key in 1..1000u32 {
        store.insert(key, Blob(10));
    }
    assert!(
        store.get(&0).is_some(),
        "the object read while new went to the main queue"
    );
}

/// splitmix64: a deterministic stream of numbers for the traces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Keys 0..n drawn with probability proportional to 1 / (rank + 1)^s.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for rank in 0..n {
            total += 1.0 / ((rank + 1) as f64).powf(s);
            cdf.push(total);
        }
        Zipf(cdf.into_iter().map(|c| c / total).collect())
    }

    fn draw(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        self.0.partition_point(|&c| c < u) as u64
    }
}

/// Plain LRU at the same bytes, the reference.
struct Lru {
    capacity: usize,
    bytes: usize,
    stamp: u64,
    by_key: HashMap<u64, (u64, usize)>,
    by_stamp: BTreeMap<u64, u64>,
}

impl Lru {
    fn get(&mut self, key: u64) -> bool {
        let Some((old, weight)) = self.by_key.get(&key).copied() else {
            return false;
        };
        self.stamp += 1;
        self.by_stamp.remove(&old);
        self.by_stamp.insert(self.stamp, key);
        self.by_key.insert(key, (self.stamp, weight));
        true
    }

    fn insert(&mut self, key: u64, weight: usize) {
        self.stamp += 1;
        self.by_key.insert(key, (self.stamp, weight));
        self.by_stamp.insert(self.stamp, key);
        self.bytes += weight;
        while self.bytes > self.capacity {
            let (_, victim) = self.by_stamp.pop_first().unwrap();
            self.bytes -= self.by_key.remove(&victim).unwrap().1;
        }
    }
}

/// Zipf-distributed reads per trace.
const READS: usize = 100_000;

/// Hit ratios of S3-FIFO and LRU (equal bytes) over the Zipf(`s`) reads of a trace: `READS` reads
/// over `keys` objects of 100 bytes, a store of `capacity_objects`, and every `scan_every` reads a
/// scan of `scan_len` keys never seen before (each stored as a miss stores it).
fn hit_ratios(keys: usize, s: f64, capacity_objects: usize, scan_every: usize, scan_len: usize) -> (f64, f64) {
    let zipf = Zipf::new(keys, s);
    let mut rng = Rng(42);
    let store = MemoryStore::new(capacity_objects * 100);
    let mut lru = Lru {
        capacity: capacity_objects * 100,
        bytes: 0,
        stamp: 0,
        by_key: HashMap::new(),
        by_stamp: BTreeMap::new(),
    };
    let (mut hits, mut lru_hits) = (0, 0);
    let mut scanned = keys as u64;
    for i in 0..READS {
        let key = zipf.draw(&mut rng);
        if scan_every > 0 && i % scan_every == 0 {
            // A scan: keys read once, never again (always misses, so not counted).
            for key in scanned..scanned + scan_len as u64 {
                store.insert(key, Blob(100));
                lru.insert(key, 100);
            }
            scanned += scan_len as u64;
        }
        match store.get(&key) {
            Some(_) => hits += 1,
            None => {
                store.insert(key, Blob(100));
            }
        }
        match lru.get(key) {
            true => lru_hits += 1,
            false => lru.insert(key, 100),
        }
    }
    (hits as f64 / READS as f64, lru_hits as f64 / READS as f64)
}

#[test]
fn s3_fifo_keeps_more_hits_than_lru_on_zipf_traces_with_and_without_scans() {
    for (s, scan_every, scan_len) in [(1.0, 0, 0), (0.8, 0, 0), (1.0, 1000, 2000), (0.8, 1000, 2000)] {
        let (s3, lru) = hit_ratios(20_000, s, 1_000, scan_every, scan_len);
        println!("zipf {s}, scan of {scan_len} every {scan_every} reads: S3-FIFO {s3:.3}, LRU {lru:.3}");
        assert!(s3 >= lru, "S3-FIFO {s3} below LRU {lru}");
    }
}

#[test]
fn a_sharded_store_stays_within_its_bytes_across_its_shards() {
    let store = MemoryStore::new(64 << 20);
    assert_eq!(store.shards.len(), 4);
    for key in 0..100_000u32 {
        store.insert(key, Blob(1024));
    }
    let stats = store.stats();
    assert!(stats.bytes <= 64 << 20, "{stats:?}");
    assert!(stats.objects > 50_000 && stats.evictions > 30_000, "{stats:?}");
    assert_eq!(stats.bytes, stats.objects * 1024);
}
