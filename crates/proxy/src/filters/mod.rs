//! The data-plane parts of the built-in request filters.
//!
//! - [`auth`]: password and JWT verification, the per-worker caches in front of them, and the
//!   JWKS fetcher.

pub mod auth;
