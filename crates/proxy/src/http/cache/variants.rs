//! Responses that vary (`Vary`, RFC 9111 section 4.1) by key: each is stored under its URL's key
//! (the latest one for the URL, whose `Vary` names the fields responses for it vary on) and under
//! a key of its own that adds the values of those fields, so several variants of one URL are
//! kept side by side. A lookup reads the URL's key and, when the response there is another
//! variant, the key of the request's own variant. A response stored under both keys is one
//! value, counted under each (the store evicts a little early for varying responses, never
//! late).

use std::sync::Arc;

use rampart_cache::entry::Entry;
use rampart_cache::policy::reuse::Variant;
use rampart_proto::message::RequestHead;

use super::tiers::Tiers;

/// Separates a URL's key from its variant's part.
const VARIANT: u8 = 0;

/// The key of `variant` of the responses stored under `key`.
fn variant_key(key: &[u8], variant: &Variant) -> Vec<u8> {
    let mut out = key.to_vec();
    for (name, value) in variant.names.iter().zip(&variant.values) {
        out.push(VARIANT);
        out.extend_from_slice(name);
        match value {
            Some(v) => {
                out.push(b'=');
                out.extend_from_slice(v);
            }
            None => out.push(b'!'),
        }
    }
    out
}

/// What is stored for `head` under URL key `key`: whether anything is stored for the URL at
/// all, and the response for the request's variant, if one is.
pub(super) async fn lookup(tiers: Tiers<'_>, key: &[u8], head: &RequestHead) -> (bool, Option<Arc<Entry>>) {
    let Some(latest) = tiers.get(key).await else {
        return (false, None);
    };
    if latest.variant.matches(head) {
        return (true, Some(latest));
    }
    if latest.variant.names.is_empty() {
        return (true, None);
    }
    let own = variant_key(key, &Variant::for_request(&latest.variant.names, head));
    (true, tiers.get(&own).await.filter(|e| e.variant.matches(head)))
}

/// Stores `entry` under URL key `key`, and under its variant's key when it varies.
pub(super) fn store(tiers: Tiers<'_>, key: Arc<[u8]>, entry: Arc<Entry>) {
    if !entry.variant.names.is_empty() {
        tiers.put(Arc::from(variant_key(&key, &entry.variant)), entry.clone());
    }
    tiers.put(key, entry);
}

/// Removes what is stored under URL key `key`, every variant included.
pub(super) fn remove(tiers: Tiers<'_>, key: &[u8]) {
    let varies = tiers.varies(key);
    tiers.remove(key);
    if varies {
        tiers.remove_keys(|k| k.len() > key.len() && k.starts_with(key) && k[key.len()] == VARIANT);
    }
}
