//! `[caches.NAME]` and a route's `cache`: the stores (kept across reloads by [`LiveState`]) and
//! how a route keys its requests in one.

use std::collections::BTreeMap;
use std::sync::Arc;

use rampart_model::cache::{Authorized, CacheInFlight, CacheSettings, CacheStore, DiskStore, RouteCache, Targets};
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawCache, RawRouteCache};

/// The default store size when `size` is not given.
const DEFAULT_SIZE: usize = 64 << 20;
/// The default disk store size when `disk_size` is not given.
const DEFAULT_DISK_SIZE: usize = 1 << 30;

/// The compiled `[caches]`: each store and its settings, by name.
#[derive(Default)]
pub(super) struct Caches(BTreeMap<String, Compiled>);

/// One `[caches.NAME]`: its settings, its stores and its misses in flight.
type Compiled = (
    CacheSettings,
    Arc<CacheStore>,
    Option<Arc<DiskStore>>,
    Arc<CacheInFlight>,
);

impl Checker<'_> {
    pub(super) fn caches(&mut self, raw: &BTreeMap<Spanned<String>, RawCache>, live: &mut LiveState) {
        for (name, c) in raw {
            let size = self.size(&c.size, DEFAULT_SIZE, 64 << 10, 1 << 40);
            let mut settings = CacheSettings::new(size);
            let mut largest = size as u64 / 10;
            if let Some(dir) = &c.disk {
                let disk_size = self.size(&c.disk_size, DEFAULT_DISK_SIZE, 1 << 20, 1 << 50);
                let path = self.relative_path(dir);
                let path = std::path::absolute(&path).unwrap_or(path);
                settings = settings.with_disk(path, disk_size);
                largest = disk_size as u64 / 10;
            } else if let Some(s) = &c.disk_size {
                self.error(
                    s.span(),
                    format!(
                        "cache `{name}`: `disk_size` without `disk` (a directory)",
                        name = name.get_ref()
                    ),
                );
            }
            settings.max_object_size = self.size(&c.max_object_size, settings.max_object_size, 1, largest);
            let cache_name = name;
            if let Some(names) = &c.targeted_fields {
                for n in names {
                    let name = n.get_ref();
                    let token = !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !token || name.eq_ignore_ascii_case("cache-control") {
                        self.error(
                            n.span(),
                            format!(
                                "cache `{}`: `{name}` is not a targeted field name (Cache-Control is always the last one followed)",
                                cache_name.get_ref()
                            ),
                        );
                    }
                }
                settings.targets = Targets::new(names.iter().map(|n| n.get_ref().as_str()));
            }
            settings.heuristic_max = self.duration_or_zero(&c.heuristic_max, settings.heuristic_max);
            settings.coalesce_timeout = self.duration_or_zero(&c.coalesce_timeout, settings.coalesce_timeout);
            let (store, in_flight) = live.cache_store(name.get_ref(), size);
            let disk = match (&settings.disk, &c.disk) {
                (Some((path, disk_size)), Some(at)) => {
                    match live.cache_disk(name.get_ref(), path, *disk_size, &settings.targets) {
                        Ok(disk) => Some(disk),
                        Err(e) => {
                            self.error(at.span(), format!("cache `{}`: disk store: {e}", name.get_ref()));
                            None
                        }
                    }
                }
                _ => None,
            };
            self.caches
                .0
                .insert(name.get_ref().clone(), (settings, store, disk, in_flight));
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
        let Some((settings, store, disk, in_flight)) = self.caches.0.get(raw.store.get_ref()) else {
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
        let (settings, store, disk, in_flight) = (settings.clone(), store.clone(), disk.clone(), in_flight.clone());
        let token = |name: &str| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        let mut key_fields = Vec::new();
        for field in &raw.key_fields {
            let name = field.get_ref().to_ascii_lowercase();
            if !token(&name) {
                self.error(
                    field.span(),
                    format!("route `{route}`: `{}` is not a field name", field.get_ref()),
                );
                return None;
            }
            key_fields.push(name);
        }
        let mut key_cookies = Vec::new();
        for cookie in &raw.key_cookies {
            if !token(cookie.get_ref()) {
                self.error(
                    cookie.span(),
                    format!("route `{route}`: `{}` is not a cookie name", cookie.get_ref()),
                );
                return None;
            }
            key_cookies.push(cookie.get_ref().clone());
        }
        let authorized = match raw.authorized.as_ref().map(|a| (a, a.get_ref().as_str())) {
            None | Some((_, "rfc")) => Authorized::Rfc,
            Some((_, "bypass")) => Authorized::Bypass,
            Some((_, "per_credential")) => Authorized::PerCredential,
            Some((at, other)) => {
                self.error(
                    at.span(),
                    format!("route `{route}`: `authorized = \"{other}\"`: expected \"rfc\", \"bypass\" or \"per_credential\""),
                );
                return None;
            }
        };
        let max_object_size = self.size(
            &raw.max_object_size,
            settings.max_object_size,
            1,
            settings.max_object_size as u64,
        );
        Some(RouteCache {
            store_name: raw.store.get_ref().clone(),
            store,
            disk,
            in_flight,
            coalesce_timeout: settings.coalesce_timeout,
            key_fields,
            key_cookies,
            authorized,
            targets: settings.targets.clone(),
            max_object_size,
            heuristic_max: settings.heuristic_max,
        })
    }
}
