//! Each worker's memory of tokens it has verified, so that a client sending the same token on
//! every request pays for one signature check, not one per request.
//!
//! One cache serves one `jwt` filter (its settings and key source) on one worker; a reload makes
//! new filters, and so new caches. How the filter is meant to use it:
//!
//! ```text
//! let generation = source.generation();                    // one atomic load
//! if let Some(token) = cache.get(bytes, generation, now, settings.leeway) {
//!     forward token.claims ...                              // no allocation, no decoding
//! } else {
//!     let keys = source.current();                          // after reading the generation
//!     match verify(bytes, settings, &keys.keys, now) {
//!         Ok(token) => cache.insert(bytes, keys.generation, token, now, settings.leeway),
//!         Err(JwtRejection::UnknownKey) => { source.request_refresh(); 401 }
//!         Err(why) => 401 (why.reason() in the log),
//!     }
//! }
//! ```
//!
//! An entry is the token's bytes, what verification granted, and the key-set generation it was
//! verified against. A hit needs the same bytes (looked up by a keyed hash of the length and last
//! 32 bytes, the signature's tail, then compared in full), the same generation (a new key set,
//! after rotation or a revoked key, sends every token through verification again), and `exp`
//! and `nbf` still satisfied now (leeway included). Only verified tokens are inserted, so a
//! client cannot fill the cache with forgeries; when it is full, stale entries go first, and if
//! none is stale the cache is emptied.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::rc::Rc;

use rampart_model::defaults;

use super::jwt::VerifiedToken;

/// Bytes at the end of a token that its cache key is made of (inside the signature).
const KEY_TAIL: usize = 32;

struct CachedToken {
    token: Box<[u8]>,
    generation: u64,
    verified: Rc<VerifiedToken>,
}

/// One worker's verified tokens for one `jwt` filter.
pub struct VerifiedTokenCache {
    /// By [`VerifiedTokenCache::key`], already a hash: the map does not hash it again.
    entries: HashMap<u64, CachedToken, BuildHasherDefault<KeyIsHash>>,
    /// Keys the hash, so that keys cannot be predicted from outside.
    seed: u64,
    capacity: usize,
}

/// The map's hasher for keys that are hashes already.
#[derive(Default)]
struct KeyIsHash(u64);

impl Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl Default for VerifiedTokenCache {
    fn default() -> Self {
        VerifiedTokenCache::new(defaults::JWT_CACHE_SIZE)
    }
}

impl VerifiedTokenCache {
    pub fn new(capacity: usize) -> Self {
        VerifiedTokenCache {
            entries: HashMap::default(),
            seed: RandomState::new().hash_one(0u64) | 1,
            capacity: capacity.max(1),
        }
    }

    /// A keyed multiply-rotate hash of the token's length and last [`KEY_TAIL`] bytes (its
    /// signature's): cheap, where SipHash costs a few hundred instructions per request. Crafted
    /// collisions gain nothing: only verified tokens are inserted, and a hit compares the whole
    /// token.
    fn key(&self, token: &[u8]) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let tail = &token[token.len().saturating_sub(KEY_TAIL)..];
        let mut h = self.seed ^ (token.len() as u64).wrapping_mul(K);
        for word in tail.chunks(8) {
            let mut bytes = [0u8; 8];
            bytes[..word.len()].copy_from_slice(word);
            h = (h ^ u64::from_le_bytes(bytes)).wrapping_mul(K).rotate_left(29);
        }
        h ^ (h >> 32)
    }

    /// What `token` granted when it was verified against key-set `generation`, if it is still
    /// current at `now` (seconds since the Unix epoch, `leeway` seconds allowed). Allocates
    /// nothing and decodes nothing.
    pub fn get(&self, token: &[u8], generation: u64, now: u64, leeway: u64) -> Option<&Rc<VerifiedToken>> {
        let entry = self.entries.get(&self.key(token))?;
        let hit = entry.generation == generation && *entry.token == *token && entry.verified.is_current(now, leeway);
        hit.then_some(&entry.verified)
    }

    /// Remembers that `token` verified against key-set `generation` and granted `verified`;
    /// returns the entry's shared copy.
    pub fn insert(
        &mut self,
        token: &[u8],
        generation: u64,
        verified: VerifiedToken,
        now: u64,
        leeway: u64,
    ) -> Rc<VerifiedToken> {
        let key = self.key(token);
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries
                .retain(|_, e| e.generation == generation && e.verified.is_current(now, leeway));
            if self.entries.len() >= self.capacity {
                self.entries.clear();
            }
        }
        let verified = Rc::new(verified);
        self.entries.insert(
            key,
            CachedToken {
                token: token.into(),
                generation,
                verified: verified.clone(),
            },
        );
        verified
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;
