//! The auth filters, their verification, and what makes it cheap enough per request.
//!
//! - [`basic`]: `basic_auth` (HTTP Basic against an htpasswd file, hash checks off the worker
//!   thread, bounded and shared per credential).
//! - [`api_key`]: `api_key` (keys from a file, in a header, the query or a bearer token).
//! - [`forward_auth`]: `forward_auth` (a sub-request to an auth service decides).
//! - [`password`]: bcrypt and argon2 checks (`basic_auth`), and [`password::PasswordCache`], the
//!   per-worker memory of recent outcomes: a hash check costs tens of milliseconds by design, so
//!   the filter runs it off the worker thread and asks the cache first.
//! - [`jwt`]: token verification (`jwt`): signature by a key of the token's own algorithm family,
//!   `exp`/`nbf` with leeway, `iss`, `aud`, required claims, claims to forward; every refusal a
//!   [`jwt::JwtRejection`] with a short, log-safe reason.
//! - [`jwt_cache`]: the per-worker cache of verified tokens, checked before any decoding.
//! - [`jwks_fetch`]: the control-plane task that fetches a JWKS document (through the internal
//!   client) and swaps it into the filter's
//!   [`JwtKeySource`](rampart_model::filter::jwt::JwtKeySource).

pub mod api_key;
pub mod basic;
pub mod forward_auth;
pub mod jwks_fetch;
pub mod jwt;
pub mod jwt_cache;
pub mod password;
#[cfg(test)]
mod testing;
