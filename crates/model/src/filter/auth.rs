//! The `basic_auth` and `api_key` filters as compiled ([`BasicAuth`], [`ApiKey`]), and their
//! credentials as read from their files.
//!
//! - [`PasswordFile`]: user name → [`PasswordHash`] (bcrypt or argon2; both slow by design, so
//!   the data plane verifies off its worker threads and caches the outcome).
//! - [`ApiKeySet`]: SHA-256 digest of a key → the key's name. Keys are kept only as digests and
//!   looked up by digest, so the time a lookup takes says nothing about how much of a guessed key
//!   was right, and a key never sits in memory in clear after the load.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};

/// A stored password hash, checked for form at load (cost and salt of bcrypt, PHC string of
/// argon2) so that a bad line fails the load rather than every request.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$2y$`, `$2b$` or `$2a$`: cost, 22 characters of salt, 31 of hash.
    Bcrypt(String),
    /// `$argon2id$`, `$argon2i$` or `$argon2d$`: a PHC string carrying its own parameters.
    Argon2(String),
}

impl PasswordHash {
    /// The hash as written in the file.
    pub fn as_str(&self) -> &str {
        match self {
            PasswordHash::Bcrypt(s) | PasswordHash::Argon2(s) => s,
        }
    }

    /// `bcrypt` or `argon2`.
    pub fn kind(&self) -> &'static str {
        match self {
            PasswordHash::Bcrypt(_) => "bcrypt",
            PasswordHash::Argon2(_) => "argon2",
        }
    }
}

/// Says the kind only: a hash does not belong in a log.
impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PasswordHash::{}(..)", self.kind())
    }
}

/// The users of an htpasswd file.
#[derive(Debug, Clone, Default)]
pub struct PasswordFile {
    users: HashMap<Box<str>, PasswordHash>,
}

impl PasswordFile {
    /// Adds `user`; false (and nothing changes) when the user is already there.
    pub fn insert(&mut self, user: &str, hash: PasswordHash) -> bool {
        if self.users.contains_key(user) {
            return false;
        }
        self.users.insert(user.into(), hash);
        true
    }

    /// The hash stored for `user` (the bytes a client sent; a name that is not UTF-8 is no user).
    pub fn get(&self, user: &[u8]) -> Option<&PasswordHash> {
        self.users.get(std::str::from_utf8(user).ok()?)
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// A stored hash that a user the file does not list is checked against (the outcome is
    /// thrown away), so that a request for an unknown user costs as long as a wrong password
    /// and the time of an answer does not tell which users exist. The first user's by name.
    pub fn decoy(&self) -> Option<&PasswordHash> {
        self.users.iter().min_by(|a, b| a.0.cmp(b.0)).map(|(_, hash)| hash)
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The SHA-256 digest of an API key.
pub type ApiKeyDigest = [u8; 32];

/// The keys of an API key file, by digest, each with the name that is logged (and may be
/// forwarded upstream) in its place.
#[derive(Clone, Default)]
pub struct ApiKeySet {
    names: HashMap<ApiKeyDigest, Box<str>>,
}

impl ApiKeySet {
    /// The digest a key is stored and looked up by.
    pub fn digest(key: &[u8]) -> ApiKeyDigest {
        Sha256::digest(key).into()
    }

    /// The name of a key listed without one: `sha256:` and the first 8 hex digits of its digest.
    /// It gives nothing of the key away, stays the same when lines move, and an operator can
    /// find it with `printf %s KEY | sha256sum`.
    pub fn label(digest: &ApiKeyDigest) -> String {
        let mut label = String::from("sha256:");
        for b in &digest[..4] {
            label.push_str(&format!("{b:02x}"));
        }
        label
    }

    /// Adds the key with this digest; false (and nothing changes) when it is already there.
    pub fn insert(&mut self, digest: ApiKeyDigest, name: &str) -> bool {
        if self.names.contains_key(&digest) {
            return false;
        }
        self.names.insert(digest, name.into());
        true
    }

    /// The name of `key`, if it is one of the set.
    pub fn lookup(&self, key: &[u8]) -> Option<&str> {
        self.names.get(&Self::digest(key)).map(|n| &**n)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Lists the names only.
impl fmt::Debug for ApiKeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names.values()).finish()
    }
}

/// `basic_auth`: HTTP Basic authentication against the users of an htpasswd file.
#[derive(Debug)]
pub struct BasicAuth {
    pub users: PasswordFile,
    /// The `WWW-Authenticate` value of every 401 ([`BasicAuth::challenge_for`]).
    pub challenge: String,
    /// A request header that carries the user's name upstream (lower-case); a field of that name
    /// from the client is replaced.
    pub forward_user_header: Option<String>,
    /// Remove `Authorization` from the request sent upstream.
    pub hide_credentials: bool,
    /// Password checks one worker may have queued or running at once; past it, 503.
    pub max_pending_checks: usize,
}

impl BasicAuth {
    /// `Basic realm="REALM", charset="UTF-8"` (RFC 7617), `"` and `\` in the realm escaped.
    pub fn challenge_for(realm: &str) -> String {
        let mut out = String::from("Basic realm=\"");
        for c in realm.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push_str("\", charset=\"UTF-8\"");
        out
    }
}

/// `api_key`: a key from a key file, in a request header, a query parameter or an
/// `Authorization: Bearer` field.
#[derive(Debug)]
pub struct ApiKey {
    pub keys: ApiKeySet,
    /// The request header the key is read from (lower-case).
    pub header: Option<String>,
    /// The query parameter the key is read from.
    pub query: Option<String>,
    /// Read the key from `Authorization: Bearer KEY` too.
    pub bearer: bool,
    /// Remove the key (the header, the query parameter, `Authorization`) from the request sent
    /// upstream.
    pub hide_credentials: bool,
    /// A request header that carries the key's name upstream (lower-case); a field of that name
    /// from the client is replaced.
    pub forward_name_header: Option<String>,
}

impl ApiKey {
    /// The `WWW-Authenticate` value of a 401: `Bearer` when the key may come that way, else
    /// `Key` (as Kong's key-auth says).
    pub fn challenge(&self) -> &'static str {
        if self.bearer {
            "Bearer"
        } else {
            "Key"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_once_each() {
        let mut file = PasswordFile::default();
        assert!(file.insert("alice", PasswordHash::Bcrypt("$2y$05$x".into())));
        assert!(!file.insert("alice", PasswordHash::Argon2("$argon2id$x".into())));
        assert_eq!(file.len(), 1);
        assert_eq!(file.get(b"alice").map(PasswordHash::kind), Some("bcrypt"));
        assert!(file.get(b"bob").is_none());
        assert!(file.get(b"\xffalice").is_none());
        assert_eq!(format!("{:?}", file.get(b"alice").unwrap()), "PasswordHash::bcrypt(..)");
        assert!(file.insert("aaron", PasswordHash::Argon2("$argon2id$y".into())));
        assert_eq!(file.decoy().map(PasswordHash::kind), Some("argon2"));
        assert!(PasswordFile::default().decoy().is_none());
    }

    #[test]
    fn challenges_quote_the_realm() {
        assert_eq!(
            BasicAuth::challenge_for("Staff \"only\" \\ area"),
            r#"Basic realm="Staff \"only\" \\ area", charset="UTF-8""#
        );
    }

    #[test]
    fn keys_are_found_by_digest_and_labelled_without_giving_them_away() {
        let mut keys = ApiKeySet::default();
        let digest = ApiKeySet::digest(b"s3cret-key");
        assert!(keys.insert(digest, "ci"));
        assert!(!keys.insert(digest, "other"));
        assert_eq!(keys.lookup(b"s3cret-key"), Some("ci"));
        assert_eq!(keys.lookup(b"s3cret-ke"), None);
        assert_eq!(keys.lookup(b""), None);
        // printf %s abc | sha256sum → ba7816bf...
        assert_eq!(ApiKeySet::label(&ApiKeySet::digest(b"abc")), "sha256:ba7816bf");
        assert!(!format!("{keys:?}").contains("s3cret"));
    }
}
