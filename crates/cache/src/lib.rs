//! Rampart's HTTP cache, the parts without I/O: the rules of RFC 9111 for a shared cache (with RFC
//! 5861's stale answers and RFC 9213's targeted fields) as functions of heads and clocks
//! ([`policy`]), and the store that keeps responses in memory, bounded in bytes, with an eviction
//! policy that resists scans ([`store`]). The proxy wires them into the request path.

#![forbid(unsafe_code)]

pub mod coalesce;
pub mod entry;
pub mod policy;
pub mod store;
