//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of prime size in which
//! each target fills slots following its own permutation. Removing one of N targets changes only
//! about 1/N of the slots.

/// Table size: a prime well above 100 x the number of targets the table is meant for.
pub const TABLE_SIZE: usize = 65_537;

/// An immutable Maglev lookup table.
#[derive(Debug, Clone)]
pub struct Maglev {
    slots: Vec<u16>,
}

/// 64-bit FNV-1a followed by a splitmix64 finaliser.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Maglev {
    /// Builds the table for targets identified by `keys` (stable names such as `host:port`, so the
    /// table does not depend on their order) with integer `weights` (a target of weight 2 takes
    /// two turns per round). Returns `None` for no targets or more than 65,535.
    pub fn build(keys: &[&str], weights: &[u32]) -> Option<Maglev> {
        let n = keys.len();
        if n == 0 || n > usize::from(u16::MAX) {
            return None;
        }
        let m = TABLE_SIZE as u64;
        let perms: Vec<(u64, u64)> = keys
            .iter()
            .map(|k| {
                let offset = hash_bytes(k.as_bytes()) % m;
                let skip = hash_bytes(&[k.as_bytes(), b"#skip"].concat()) % (m - 1) + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0u64; n];
        let mut slots = vec![u16::MAX; TABLE_SIZE];
        let mut filled = 0;
        'rounds: loop {
            for i in 0..n {
                for _ in 0..weights[i].max(1) {
                    let (offset, skip) = perms[i];
                    let mut slot = ((offset + next[i] * skip) % m) as usize;
                    while slots[slot] != u16::MAX {
                        next[i] += 1;
                        slot = ((offset + next[i] * skip) % m) as usize;
                    }
                    slots[slot] = i as u16;
                    next[i] += 1;
                    filled += 1;
                    if filled == TABLE_SIZE {
                        break 'rounds;
                    }
                }
            }
        }
        Some(Maglev { slots })
    }

    /// The target for `hash`; when it is not usable, the next usable one along the table.
    pub fn lookup(&self, hash: u64, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let start = (hash % TABLE_SIZE as u64) as usize;
        (0..TABLE_SIZE)
            .map(|k| usize::from(self.slots[(start + k) % TABLE_SIZE]))
            .find(|&t| usable(t))
    }
}
