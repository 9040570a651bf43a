//! Files that built-in filters read at config load.
//!
//! The filter compiler that calls these comes with the filter model; until then they are used by
//! their tests only.
#![allow(dead_code)]

pub(crate) mod auth_files;
pub(crate) mod jwt_key_files;
