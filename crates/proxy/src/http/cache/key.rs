//! The key a request is stored under: its scheme, host (lowercase) and target, then the values
//! of the route's `key_fields`, of its `key_cookies`, and (with `authorized = "per_credential"`)
//! of `Authorization`, each on a line of its own. The method is not in it: only `GET` responses
//! are stored, and a `HEAD` is answered from them. What an unsafe request invalidates is found
//! by the key's URL part.

use rampart_cache::policy::FieldSource;
use rampart_model::cache::{Authorized, RouteCache};
use rampart_proto::message::RequestHead;

use super::tiers::Tiers;
use super::variants;

/// The key of `head`, sent for `target` on `host` over `scheme`, on a route with `cache`.
pub(super) fn primary_key(scheme: &str, host: &[u8], target: &[u8], cache: &RouteCache, head: &RequestHead) -> Vec<u8> {
    let mut key = Vec::with_capacity(scheme.len() + host.len() + target.len() + 4);
    key.extend_from_slice(scheme.as_bytes());
    key.extend_from_slice(b"://");
    key.extend(host.iter().map(u8::to_ascii_lowercase));
    key.extend_from_slice(target);
    for name in &cache.key_fields {
        key.push(b'\n');
        key.extend_from_slice(name.as_bytes());
        key.push(b':');
        for (i, value) in head.each(name.as_bytes()).enumerate() {
            if i > 0 {
                key.extend_from_slice(b", ");
            }
            key.extend_from_slice(value);
        }
    }
    for name in &cache.key_cookies {
        key.extend_from_slice(b"\ncookie ");
        key.extend_from_slice(name.as_bytes());
        if let Some(value) = cookie(head, name.as_bytes()) {
            key.push(b'=');
            key.extend_from_slice(value);
        }
    }
    if cache.authorized == Authorized::PerCredential {
        if let Some(credential) = head.value_of(b"authorization") {
            key.extend_from_slice(b"\nauthorization:");
            key.extend_from_slice(credential);
        }
    }
    key
}

/// The value of cookie `name` in the request's `Cookie` fields (RFC 6265 section 5.4: pairs
/// separated by `;`), the first one when it is sent twice.
fn cookie<'a>(head: &'a RequestHead, name: &[u8]) -> Option<&'a [u8]> {
    head.each(b"cookie")
        .flat_map(|line| line.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let eq = pair.iter().position(|&b| b == b'=')?;
            (pair[..eq].trim_ascii() == name).then(|| pair[eq + 1..].trim_ascii())
        })
}

/// The request as the rules see it for storing: with `authorized = "per_credential"`, without its
/// `Authorization` (the key keeps responses for one credential apart, so section 3.5's rule for
/// shared responses does not apply).
pub(super) struct Stored<'a> {
    pub head: &'a RequestHead,
    pub hide_authorization: bool,
}

impl FieldSource for Stored<'_> {
    fn each<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let hidden = self.hide_authorization && name.eq_ignore_ascii_case(b"authorization");
        self.head.each(name).filter(move |_| !hidden)
    }
}

/// Removes what is stored under the request key `key`, every variant included (with key fields,
/// cookies or credentials, every key that begins with its URL part).
pub(super) fn invalidate(cache: &RouteCache, key: &[u8]) {
    let keyed_more =
        !cache.key_fields.is_empty() || !cache.key_cookies.is_empty() || cache.authorized == Authorized::PerCredential;
    if !keyed_more {
        variants::remove(Tiers::of(cache), key);
        return;
    }
    let url = key.split(|&b| b == b'\n').next().unwrap_or(key);
    Tiers::of(cache).remove_keys(|k| k.starts_with(url) && k.get(url.len()).is_none_or(|&b| b == b'\n' || b == 0));
}
