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
use rampart_model::cache::CacheStore;
use rampart_proto::message::RequestHead;

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
pub(super) fn lookup(store: &CacheStore, key: &[u8], head: &RequestHead) -> (bool, Option<Arc<Entry>>) {
    let Some(latest) = store.get(&key.to_vec()) else {
        return (false, None);
    };
    if latest.variant.matches(head) {
        return (true, Some(latest));
    }
    if latest.variant.names.is_empty() {
        return (true, None);
    }
    let own = variant_key(key, &Variant::for_request(&latest.variant.names, head));
    (true, store.get(&own).filter(|e| e.variant.matches(head)))
}

/// Stores `entry` under URL key `key`, and under its variant's key when it varies.
pub(super) fn store(store: &CacheStore, key: Vec<u8>, entry: Arc<Entry>) {
    if !entry.variant.names.is_empty() {
        store.insert_arc(variant_key(&key, &entry.variant), entry.clone());
    }
    store.insert_arc(key, entry);
}

/// Removes what is stored under URL key `key`, every variant included.
pub(super) fn remove(store: &CacheStore, key: &[u8]) {
    let varies = store.peek(&key.to_vec()).is_some_and(|e| !e.variant.names.is_empty());
    store.remove(&key.to_vec());
    if varies {
        store.remove_where(|k, _| k.len() > key.len() && k.starts_with(key) && k[key.len()] == VARIANT);
    }
}
