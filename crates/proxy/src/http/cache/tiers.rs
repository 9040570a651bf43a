//! A store's two tiers on the request path: memory first, then the disk store when the cache
//! has one. A response found on disk is read on the blocking pool (never on the worker) and
//! kept in memory from then on; a response stored goes to memory at once and to disk from the
//! blocking pool, in the background (a write that finds too many under way is skipped: the
//! response is in memory, and the worker never waits).

use std::sync::Arc;

use rampart_cache::entry::Entry;
use rampart_model::cache::{CacheStore, DiskStore, RouteCache};

/// The tiers of one store.
#[derive(Clone, Copy)]
pub(super) struct Tiers<'a> {
    pub memory: &'a Arc<CacheStore>,
    pub disk: Option<&'a Arc<DiskStore>>,
}

impl<'a> Tiers<'a> {
    pub fn of(cache: &'a RouteCache) -> Self {
        Tiers {
            memory: &cache.store,
            disk: cache.disk.as_ref(),
        }
    }

    /// The response under `key`, from memory or else from disk.
    pub async fn get(self, key: &[u8]) -> Option<Arc<Entry>> {
        if let Some(entry) = self.memory.get(key) {
            return Some(entry);
        }
        let disk = self.disk?;
        let record = disk.get(key)?;
        let (reader, wanted) = (disk.clone(), key.to_vec());
        let read = tokio::task::spawn_blocking(move || reader.read(&wanted, &record)).await;
        match read {
            Ok(Ok(entry)) => {
                let entry = Arc::new(entry);
                self.memory.insert_arc(Arc::from(key), entry.clone());
                Some(entry)
            }
            Ok(Err(e)) => {
                tracing::warn!("cache disk store: {e} (dropped from the store)");
                None
            }
            Err(_) => None,
        }
    }

    /// Whether the response under `key` (in memory, else on disk) varies.
    pub fn varies(self, key: &[u8]) -> bool {
        match self.memory.peek(key) {
            Some(entry) => !entry.variant.names.is_empty(),
            None => self.disk.and_then(|d| d.get(key)).is_some_and(|r| r.varies),
        }
    }

    /// Stores `entry` under `key` in memory, and on disk in the background.
    pub fn put(self, key: Arc<[u8]>, entry: Arc<Entry>) {
        if let Some(reservation) = self.disk.and_then(|d| d.reserve()) {
            let (key, entry) = (key.clone(), entry.clone());
            tokio::task::spawn_blocking(move || {
                if let Err(e) = reservation.write(&key, &entry) {
                    tracing::warn!("cache disk store: {e}");
                }
            });
        }
        self.memory.insert_arc(key, entry);
    }

    /// Removes what is under `key` from both tiers.
    pub fn remove(self, key: &[u8]) {
        self.memory.remove(key);
        if let Some(disk) = self.disk {
            disk.remove(key);
        }
    }

    /// Removes every key `f` picks from both tiers.
    pub fn remove_keys(self, f: impl Fn(&[u8]) -> bool) {
        self.memory.remove_where(|k, _| f(k));
        if let Some(disk) = self.disk {
            disk.remove_where(|k, _| f(k));
        }
    }
}
