//! Compiled settings of the built-in request filters.
//!
//! - [`auth`]: the credentials of `basic_auth` (an htpasswd file) and `api_key` (a key file).
//! - [`jwt`]: the settings and key sets of `jwt`, the JWKS document format, and the shared key
//!   source that a JWKS fetcher refreshes.

pub mod auth;
pub mod jwt;
