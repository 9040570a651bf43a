//! Sticky sessions by an inserted cookie (HAProxy's `cookie ... insert`): the first response to a
//! client sets a cookie naming the target that answered, and later requests carrying it go to
//! that target while it is available. The cookie names the target opaquely, by a hash of the
//! upstream's name and the target's address, so it stays valid across reloads, restarts and the
//! instances of a fleet.

use std::fmt::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// An upstream's `sticky_cookie`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyCookie {
    pub name: String,
    /// `Max-Age`; `None`: a session cookie.
    pub max_age: Option<Duration>,
    /// `Secure`: sent back over HTTPS only.
    pub secure: bool,
}

impl StickyCookie {
    /// The id a cookie names `addr` of `upstream` by. Computed for each target a request's
    /// cookie is checked against, so it writes the address into the hash without a `String`.
    pub fn id(upstream: &str, addr: SocketAddr) -> u64 {
        let mut hash = Fnv1a::default();
        hash.eat(upstream.as_bytes());
        hash.eat(&[0]);
        // Writing to the hash cannot fail.
        let _ = write!(hash, "{addr}");
        hash.0
    }

    /// The id a cookie value names (16 hex digits), if it is one.
    pub fn parse(value: &[u8]) -> Option<u64> {
        if value.len() != 16 {
            return None;
        }
        u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
    }

    /// The `Set-Cookie` value that names target `id`.
    pub fn set_cookie(&self, id: u64) -> String {
        let mut line = format!("{}={id:016x}; Path=/; HttpOnly", self.name);
        if let Some(age) = self.max_age {
            line.push_str(&format!("; Max-Age={}", age.as_secs()));
        }
        if self.secure {
            line.push_str("; Secure");
        }
        line
    }
}

/// FNV-1a: stable across builds and machines, unlike std's keyed hasher.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn eat(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Write for Fnv1a {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.eat(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_opaque_and_round_trip_through_the_cookie() {
        let addr: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        // The same hash as over the text `app\0 10.0.0.1:8080`, written out.
        let mut text = Fnv1a::default();
        text.eat(b"app\x0010.0.0.1:8080");
        assert_eq!(StickyCookie::id("app", addr), text.0);
        let id = StickyCookie::id("app", addr);
        assert_eq!(id, StickyCookie::id("app", addr));
        assert_ne!(id, StickyCookie::id("other", addr));
        let cookie = StickyCookie {
            name: "srv".into(),
            max_age: Some(Duration::from_secs(3600)),
            secure: true,
        };
        let line = cookie.set_cookie(id);
        assert!(!line.contains("10.0.0.1"), "{line}");
        let value = line.split(';').next().unwrap().strip_prefix("srv=").unwrap();
        assert_eq!(StickyCookie::parse(value.as_bytes()), Some(id));
        assert!(line.ends_with("; Path=/; HttpOnly; Max-Age=3600; Secure"), "{line}");
        assert_eq!(StickyCookie::parse(b"nothex!!nothex!!"), None);
        assert_eq!(StickyCookie::parse(b"abc"), None);
    }
}
