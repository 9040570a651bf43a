//! `[caches.NAME]` and a route's `cache`: the stores (kept across reloads by [`LiveState`]) and
//! how a route keys its requests in one.

use std::collections::BTreeMap;
use std::sync::Arc;

use rampart_model::cache::{CacheInFlight, CacheSettings, CacheStore, RouteCache};
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawCache, RawRouteCache};

/// The default store size when `size` is not given.
const DEFAULT_SIZE: usize = 64 << 20;

/// The compiled `[caches]`: each store and its settings, by name.
#[derive(Default)]
pub(super) struct Caches(BTreeMap<String, (CacheSettings, Arc<CacheStore>, Arc<CacheInFlight>)>);

impl Checker<'_> {
    pub(super) fn caches(&mut self, raw: &BTreeMap<Spanned<String>, RawCache>, live: &mut LiveState) {
        for (name, c) in raw {
            let size = self.size(&c.size, DEFAULT_SIZE, 64 << 10, 1 << 40);
            let mut settings = CacheSettings::new(size);
            settings.max_object_size = self.size(&c.max_object_size, settings.max_object_size, 1, size as u64 / 10);
            settings.heuristic_max = self.duration_or_zero(&c.heuristic_max, settings.heuristic_max);
            settings.coalesce_timeout = self.duration_or_zero(&c.coalesce_timeout, settings.coalesce_timeout);
            let (store, in_flight) = live.cache_store(name.get_ref(), size);
            self.caches
                .0
                .insert(name.get_ref().clone(), (settings, store, in_flight));
        }
    }

    /// A route's `cache` (`proxies`: the route proxies, the only action a cache serves).
    pub(super) fn route_cache(
        &mut self,
        route: &str,
        raw: &Spanned<RawRouteCache>,
        proxies: bool,
    ) -> Option<RouteCache> {
        if !proxies {
            self.error(raw.span(), format!("route `{route}`: `cache` is for routes that proxy"));
            return None;
        }
        let raw = raw.get_ref();
        let Some((settings, store, in_flight)) = self.caches.0.get(raw.store.get_ref()) else {
            let defined: Vec<&str> = self.caches.0.keys().map(String::as_str).collect();
            let known = match defined.is_empty() {
                true => "(no [caches.NAME] table is defined)".to_string(),
                false => format!("(defined: {})", defined.join(", ")),
            };
            self.error(
                raw.store.span(),
                format!("route `{route}`: unknown cache `{}` {known}", raw.store.get_ref()),
            );
            return None;
        };
        let (settings, store, in_flight) = (*settings, store.clone(), in_flight.clone());
        let mut key_fields = Vec::new();
        for field in &raw.key_fields {
            let name = field.get_ref().to_ascii_lowercase();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                self.error(
                    field.span(),
                    format!("route `{route}`: `{}` is not a field name", field.get_ref()),
                );
                return None;
            }
            key_fields.push(name);
        }
        Some(RouteCache {
            store_name: raw.store.get_ref().clone(),
            store,
            in_flight,
            coalesce_timeout: settings.coalesce_timeout,
            key_fields,
            max_object_size: settings.max_object_size,
            heuristic_max: settings.heuristic_max,
        })
    }
}
