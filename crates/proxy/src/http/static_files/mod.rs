//! The `static` route action: files under a root directory, the way nginx's `root`, `index`,
//! `try_files $uri /index.html`, `gzip_static` and `autoindex` serve them.
//!
//! - [`path`]: request path → relative path (decoded once; NUL, encoded `/`, `\` and `..`
//!   refused) → a file opened beneath the root (openat2 `RESOLVE_BENEATH`: no way out through
//!   symbolic links).
//! - [`serve`]: the answer to one request: index, directory redirect, listing, fallback,
//!   precompressed sibling, preconditions, range, and the response head.
//! - [`conditional`]: `ETag` and `Last-Modified`, `If-Match`, `If-None-Match`,
//!   `If-Modified-Since`, `If-Unmodified-Since`, `If-Range`.
//! - [`range`]: `Range: bytes=`. [`encoding`]: `Accept-Encoding` and the siblings' suffixes.
//! - [`mime`]: content types by extension. [`date`]: HTTP dates. [`listing`]: directory pages.
//! - [`send`]: the body: sendfile(2) on plain TCP, pieces through the downstream seam otherwise.

pub mod conditional;
pub mod encoding;
pub mod listing;
pub mod mime;
pub mod path;
pub mod range;
pub mod send;
pub mod serve;

pub use serve::{prepare, Body, Prepared, StaticRequest};
