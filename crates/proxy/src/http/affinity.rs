//! The consistent-hashing key of a request: a header's value, a cookie's value, or the client
//! address (also the fallback when the header or cookie is missing).

use std::net::IpAddr;

use rampart_proto::h1::Field;

use crate::balance::{client_hash, hash_bytes, BalancePolicy, HashKey};
use rampart_model::Upstream;

/// The key `upstream` hashes for this request (0 when it does not hash).
pub fn request_key(upstream: &Upstream, client: IpAddr, buf: &[u8], fields: &[Field]) -> u64 {
    if upstream.policy != BalancePolicy::ConsistentHash {
        return 0;
    }
    let value = match &upstream.hash_key {
        HashKey::ClientAddress => None,
        HashKey::Header(name) => fields
            .iter()
            .find(|f| f.name(buf).eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| f.value(buf)),
        HashKey::Cookie(name) => fields
            .iter()
            .filter(|f| f.name(buf).eq_ignore_ascii_case(b"cookie"))
            .find_map(|f| cookie_value(f.value(buf), name.as_bytes())),
    };
    match value {
        Some(v) if !v.is_empty() => hash_bytes(v),
        _ => client_hash(client),
    }
}

/// The value of cookie `name` in a `Cookie` header (`a=1; b=2`).
fn cookie_value<'a>(header: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    header.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        (pair[..eq].trim_ascii() == name).then(|| pair[eq + 1..].trim_ascii())
    })
}

#[cfg(test)]
mod tests {
    use super::cookie_value;

    #[test]
    fn cookies_are_found_by_exact_name() {
        let h = b"theme=dark; session=abc123;  lang = en";
        assert_eq!(cookie_value(h, b"session"), Some(&b"abc123"[..]));
        assert_eq!(cookie_value(h, b"lang"), Some(&b"en"[..]));
        assert_eq!(cookie_value(h, b"sess"), None);
        assert_eq!(cookie_value(b"flag; a=1", b"flag"), None);
    }
}
