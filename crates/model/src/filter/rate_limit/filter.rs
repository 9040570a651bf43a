//! The `rate_limit` filter as compiled: what it counts per ([`RateLimitKey`]), where its buckets
//! live ([`BucketStore`]: this process, or Redis for a limit shared by several Rampart
//! processes), and what it answers.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use super::{LocalBuckets, RateLimit, RedisArgs};

/// `rate_limit`: a token bucket per key.
#[derive(Debug)]
pub struct RateLimitFilter {
    pub limit: RateLimit,
    pub key: RateLimitKey,
    pub store: BucketStore,
    /// The status a refused request gets (429).
    pub status: u16,
    /// Put the `RateLimit` and `RateLimit-Policy` fields on every response, not only on refusals.
    pub headers: bool,
    /// The policy's name in those fields.
    pub policy: String,
    /// The `RateLimit-Policy` value: `"NAME";q=BURST;w=SECONDS`.
    pub policy_header: String,
    /// Hashes keys for the local table and the per-worker leases (keyed, so that a client cannot
    /// aim its keys at one slot).
    pub hasher: KeyHasher,
    /// Where it sits (`LISTENER/ROUTE#N`): a reload keeps a LOCAL table by it.
    pub scope: String,
}

/// What a request is counted by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateLimitKey {
    /// The client address as filters see it (after PROXY headers and trusted proxies).
    ClientIp,
    /// The route: one bucket for every request of the route.
    Route,
    /// A request header's value (lower-case name); a request without it counts by its client
    /// address.
    Header(String),
    /// A claim of the request's verified JWT (a `jwt` filter before this one); a request without
    /// it counts by its client address.
    Claim(String),
}

/// Where the buckets are.
#[derive(Debug)]
pub enum BucketStore {
    /// In this process, shared by its workers without a lock.
    Local(Arc<LocalBuckets>),
    /// In Redis, shared by every process that uses the same server and key prefix.
    Global(GlobalStore),
}

/// GLOBAL mode: buckets in Redis, taken through [`super::GCRA_TAKE_SCRIPT`].
#[derive(Debug, Clone)]
pub struct GlobalStore {
    pub redis: RedisEndpoint,
    /// Prepended to each key: `rampart:rl:`, the filter's `name` (or, without one, where it sits:
    /// `LISTENER/ROUTE#N`), then `:`.
    pub prefix: String,
    pub args: RedisArgs,
    /// What a request gets while Redis cannot answer.
    pub on_error: RedisFailMode,
    /// The longest a request waits for Redis before the fail mode applies.
    pub timeout: Duration,
    /// The most tokens a worker takes from Redis at once for one key (a lease it then spends
    /// without asking again): 1 makes every request a Redis round trip.
    pub max_lease: u64,
}

/// What a request gets while Redis cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFailMode {
    /// Let it through (the limit is off while Redis is down).
    Allow,
    /// Refuse it with 503.
    Deny,
}

/// A Redis server: `host:port`, or `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedisEndpoint {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
}

impl RedisEndpoint {
    /// The commands a new connection sends before anything else, each with its name: `AUTH`
    /// when the address has a password, `SELECT` when it names a database other than 0.
    pub fn setup_commands(&self) -> Vec<(&'static str, Vec<u8>)> {
        use rampart_proto::resp::encode_command;
        let mut commands = Vec::new();
        if let Some(password) = &self.password {
            let mut out = Vec::new();
            match &self.username {
                Some(user) => encode_command(&mut out, &[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => encode_command(&mut out, &[b"AUTH", password.as_bytes()]),
            }
            commands.push(("AUTH", out));
        }
        if self.db != 0 {
            let mut out = Vec::new();
            encode_command(&mut out, &[b"SELECT", self.db.to_string().as_bytes()]);
            commands.push(("SELECT", out));
        }
        commands
    }

    /// Reads `host:port` or a `redis://` URL (port 6379 by default).
    pub fn parse(s: &str) -> Result<RedisEndpoint, String> {
        let bad = |why: &str| {
            format!(
                "`{}` is not a Redis address ({why}); write HOST:PORT or redis://[:PASSWORD@]HOST[:PORT][/DB]",
                redact(s)
            )
        };
        let (rest, url) = match s.strip_prefix("redis://") {
            Some(rest) => (rest, true),
            None if s.contains("://") => return Err(bad("only redis:// is supported")),
            None => (s, false),
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) if url => (Some(auth), rest),
            Some(_) => return Err(bad("a password needs the redis:// form")),
            None => (None, rest),
        };
        let (authority, db) = match rest.split_once('/') {
            Some((a, "")) => (a, 0),
            Some((a, db)) => (a, db.parse().map_err(|_| bad("the database is a number"))?),
            None => (rest, 0),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h, p.parse::<u16>().map_err(|_| bad("bad port"))?)
            }
            _ if url => (authority, 6379),
            _ => return Err(bad("no port")),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port == 0 {
            return Err(bad("no host or port"));
        }
        let (username, password) = match auth {
            None => (None, None),
            Some(a) => match a.split_once(':') {
                Some((u, p)) => ((!u.is_empty()).then(|| u.to_string()), Some(p.to_string())),
                None => (None, Some(a.to_string())),
            },
        };
        Ok(RedisEndpoint {
            host: host.to_string(),
            port,
            username,
            password,
            db,
        })
    }
}

/// The address without the password.
fn redact(s: &str) -> String {
    match (s.find("://"), s.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}***{}", &s[..scheme + 3], &s[at..]),
        _ => s.to_string(),
    }
}

/// `host:port/db`, never the password.
impl fmt::Display for RedisEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        if self.db != 0 {
            write!(f, "/{}", self.db)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RedisEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisEndpoint({self})")
    }
}

/// A keyed hash of rate-limit keys, fixed for the filter's life.
#[derive(Clone, Default)]
pub struct KeyHasher(std::collections::hash_map::RandomState);

impl KeyHasher {
    /// The 64-bit hash of `key`.
    #[inline]
    pub fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.0.hash_one(key)
    }
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_addresses_in_both_forms() {
        let e = RedisEndpoint::parse("127.0.0.1:6380").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.db, e.password.as_deref()),
            ("127.0.0.1", 6380, 0, None)
        );
        assert!(RedisEndpoint::parse("127.0.0.1:6380")
            .unwrap()
            .setup_commands()
            .is_empty());
        let e = RedisEndpoint::parse("redis://:s3cret@cache.internal/2").unwrap();
        let setup: Vec<(&str, String)> = e
            .setup_commands()
            .into_iter()
            .map(|(name, bytes)| (name, String::from_utf8(bytes).unwrap()))
            .collect();
        assert_eq!(
            setup,
            [
                ("AUTH", "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n".to_string()),
                ("SELECT", "*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n".to_string())
            ]
        );
        assert_eq!((e.host.as_str(), e.port, e.db), ("cache.internal", 6379, 2));
        assert_eq!(e.password.as_deref(), Some("s3cret"));
        assert_eq!(e.username, None);
        let e = RedisEndpoint::parse("redis://app:pw@[::1]:7000").unwrap();
        assert_eq!(
            e.setup_commands()[0].1,
            b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$2\r\npw\r\n"
        );
        assert_eq!(
            (e.host.as_str(), e.port, e.username.as_deref()),
            ("::1", 7000, Some("app"))
        );
        assert_eq!(e.to_string(), "[::1]:7000");
        assert!(!format!("{e:?}").contains("pw"));
        for bad in ["cache", "http://x:1", "x:0", "redis://x:1/db", "pw@x:1", ":1"] {
            assert!(RedisEndpoint::parse(bad).is_err(), "{bad}");
        }
        let err = RedisEndpoint::parse("redis://:hunter2@x:99999").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn keys_hash_alike_within_a_hasher() {
        let h = KeyHasher::default();
        assert_eq!(h.hash(b"10.0.0.1".as_slice()), h.hash(b"10.0.0.1".as_slice()));
        assert_ne!(h.hash(b"10.0.0.1".as_slice()), h.hash(b"10.0.0.2".as_slice()));
    }
}
