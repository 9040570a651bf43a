//! Rampart's HTTP cache: the rules of RFC 9111 for a shared cache (with RFC 5861's stale answers
//! and RFC 9213's targeted fields) as functions of heads and clocks ([`policy`], no I/O), the
//! store that keeps responses in memory, bounded in bytes, with an eviction policy that resists
//! scans ([`store`], no I/O), and the disk store ([`disk`]: blocking file I/O, which the proxy
//! runs on its blocking pool, never on a worker). The proxy wires them into the request path.

#![forbid(unsafe_code)]

pub mod coalesce;
pub mod disk;
pub mod entry;
pub mod growing;
pub mod policy;
pub mod store;

/// A lock of the store's or the coalescing table's. A panic while it was held leaves state that
/// every step checks as it reads it: go on rather than fail every request after.
#[allow(clippy::disallowed_types)]
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
