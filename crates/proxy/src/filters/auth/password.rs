//! Password checks for `basic_auth`, and the per-worker cache in front of them.
//!
//! bcrypt and argon2 are slow on purpose (bcrypt at cost 10 takes tens of milliseconds, argon2
//! with its default parameters as long and 19 MiB), so [`verify_password`] must not run on a
//! worker thread: the filter hands it to a blocking pool and keeps the outcome in a
//! [`PasswordCache`]. How the filter is meant to use it:
//!
//! ```text
//! let digest = credential_digest(user, password, stored_hash);
//! match cache.lookup(&digest, now) {
//!     Some(true) => accept,
//!     Some(false) => 401,                      // the same wrong guess, seen moments ago
//!     None => {
//!         let ok = spawn_blocking(verify_password(stored_hash, password)).await;
//!         cache.record(digest, ok, Instant::now());
//!     }
//! }
//! ```
//!
//! The cache keys on a SHA-256 of (user, password, stored hash), so it never holds a password,
//! and an entry stops matching as soon as the htpasswd file gives the user another hash. Accepted
//! credentials are remembered for [`PASSWORD_CACHE_TTL`](defaults::PASSWORD_CACHE_TTL), refused
//! ones for the shorter [`PASSWORD_REFUSED_TTL`](defaults::PASSWORD_REFUSED_TTL): a burst of the
//! same wrong guess costs one hash check, while a corrected password is tried at once (it has
//! another digest). Each side holds at most `capacity` entries; when full, expired entries go
//! first, and if none has expired the side is emptied (a full side is rare and cheap to refill).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use argon2::PasswordVerifier;
use rampart_model::defaults;
use rampart_model::filter::auth::PasswordHash;
use sha2::{Digest, Sha256};

/// Whether `password` matches `hash`. Slow by design: call it off the worker thread. A hash that
/// does not parse (the config checked it, so it should not happen) matches nothing.
///
/// bcrypt reads at most 72 bytes of a password, as every bcrypt does: longer passwords that
/// share their first 72 bytes match the same hash.
pub fn verify_password(hash: &PasswordHash, password: &[u8]) -> bool {
    match hash {
        PasswordHash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
        PasswordHash::Argon2(h) => match argon2::PasswordHash::new(h) {
            // The hash's own algorithm, version and parameters are used, not the defaults.
            Ok(parsed) => argon2::Argon2::default().verify_password(password, &parsed).is_ok(),
            Err(_) => false,
        },
    }
}

/// SHA-256 of a user, a password and the hash stored for the user.
pub type CredentialDigest = [u8; 32];

/// The cache key for `user` presenting `password` against `stored` (each part length-prefixed,
/// so `("ab", "c")` and `("a", "bc")` differ).
pub fn credential_digest(user: &[u8], password: &[u8], stored: &PasswordHash) -> CredentialDigest {
    let mut sha = Sha256::new();
    for part in [user, password, stored.as_str().as_bytes()] {
        sha.update((part.len() as u64).to_be_bytes());
        sha.update(part);
    }
    sha.finalize().into()
}

/// One worker's recent password-check outcomes.
#[derive(Debug)]
pub struct PasswordCache {
    /// Digest → when the entry expires.
    accepted: HashMap<CredentialDigest, Instant>,
    refused: HashMap<CredentialDigest, Instant>,
    capacity: usize,
    accepted_ttl: Duration,
    refused_ttl: Duration,
}

impl Default for PasswordCache {
    fn default() -> Self {
        PasswordCache::new(
            defaults::PASSWORD_CACHE_SIZE,
            defaults::PASSWORD_CACHE_TTL,
            defaults::PASSWORD_REFUSED_TTL,
        )
    }
}

impl PasswordCache {
    /// A cache of at most `capacity` accepted and `capacity` refused entries.
    pub fn new(capacity: usize, accepted_ttl: Duration, refused_ttl: Duration) -> Self {
        PasswordCache {
            accepted: HashMap::new(),
            refused: HashMap::new(),
            capacity: capacity.max(1),
            accepted_ttl,
            refused_ttl,
        }
    }

    /// `Some(true)`: accepted recently; `Some(false)`: refused recently; `None`: check the hash.
    pub fn lookup(&mut self, digest: &CredentialDigest, now: Instant) -> Option<bool> {
        for (side, verdict) in [(&mut self.accepted, true), (&mut self.refused, false)] {
            if let Some(expires) = side.get(digest) {
                if now < *expires {
                    return Some(verdict);
                }
                side.remove(digest);
            }
        }
        None
    }

    /// Remembers the outcome of a hash check made for `digest`.
    pub fn record(&mut self, digest: CredentialDigest, accepted: bool, now: Instant) {
        let (side, ttl) = if accepted {
            (&mut self.accepted, self.accepted_ttl)
        } else {
            (&mut self.refused, self.refused_ttl)
        };
        if side.len() >= self.capacity && !side.contains_key(&digest) {
            side.retain(|_, expires| now < *expires);
            if side.len() >= self.capacity {
                side.clear();
            }
        }
        side.insert(digest, now + ttl);
    }

    /// Entries held: (accepted, refused).
    pub fn len(&self) -> (usize, usize) {
        (self.accepted.len(), self.refused.len())
    }
}

#[cfg(test)]
mod tests;
