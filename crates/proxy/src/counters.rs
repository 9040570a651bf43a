//! A worker's counters: written by that worker alone, read by the control plane.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One worker's counters. Written only by the owning worker (plain load+store, no locked
/// instruction), read by the control plane. Aligned so that two workers never share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerCounters {
    pub accepted: AtomicU64,
    pub rejected_over_limit: AtomicU64,
    pub connect_failures: AtomicU64,
    pub no_healthy_target: AtomicU64,
    pub proxy_header_errors: AtomicU64,
    /// TLS handshakes that failed or timed out (and plain HTTP sent to a TLS port).
    pub tls_handshake_failures: AtomicU64,
    pub open: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    /// HTTP requests answered (proxied or local).
    pub http_requests: AtomicU64,
    /// New upstream connections opened for HTTP requests.
    pub upstream_connects: AtomicU64,
    /// HTTP requests sent on a pooled (reused) upstream connection.
    pub upstream_reuses: AtomicU64,
    /// Connections still open when the drain deadline passed (and so cut).
    pub cut_at_drain: AtomicU64,
}

/// Adds `n` to a counter that only this thread writes.
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Subtracts `n` from a counter that only this thread writes.
#[inline]
pub fn drop_by(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_sub(n), Relaxed);
}
