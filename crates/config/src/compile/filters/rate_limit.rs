//! The `rate_limit` filter's keys: `rate` (`"100/s"`, `"1000/m"`, `"50/10s"`), `burst`, `key`
//! (`client_ip`, `route`, `header:NAME`, `claim:NAME`), `mode` (`local` or `global`), for GLOBAL
//! mode `redis`, `redis_timeout`, `on_redis_error`, `max_lease`; `name`, `status`, `headers`,
//! and for LOCAL mode `max_keys`.

use std::time::Duration;

use rampart_model::filter::rate_limit::{
    BucketStore, GlobalStore, KeyHasher, RateLimit, RateLimitFilter, RateLimitKey, RedisEndpoint, RedisFailMode,
    MAX_CAPACITY,
};
use rampart_model::filter::Filter;
use toml::Spanned;

use super::basic::is_token;
use super::FilterTable;
use crate::compile::{Checker, LiveState};
use crate::units::parse_duration;

/// Keys a LOCAL table holds by default (16 bytes each: 1 MiB).
const DEFAULT_MAX_KEYS: i64 = 1 << 16;
/// How long a request waits for Redis by default.
const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(100);

/// `N/UNIT` or `N/DURATION`: tokens and the period they come back in.
pub(crate) fn parse_rate(s: &str) -> Result<(u64, Duration), String> {
    let bad = || format!("`{s}` is not a rate; write COUNT/PERIOD, such as \"100/s\", \"1000/m\" or \"50/10s\"");
    let (count, period) = s.split_once('/').ok_or_else(bad)?;
    let count: u64 = count.trim().parse().map_err(|_| bad())?;
    let period = match period.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86_400),
        other => parse_duration(other).map_err(|_| bad())?,
    };
    Ok((count, period))
}

impl Checker<'_> {
    pub(super) fn rate_limit_filter(&mut self, t: &mut FilterTable<'_>, live: &mut LiveState) -> Option<Filter> {
        let rate = self.filter_string(t, "rate");
        let rate = self.filter_required(t, "rate", rate);
        let parsed = rate.as_ref().and_then(|r| match parse_rate(r.get_ref()) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(r.span(), e);
                None
            }
        });
        let default_burst = parsed.map_or(1, |(count, _)| count.clamp(1, i64::MAX as u64) as i64);
        let burst_given = t.entries_has("burst");
        let burst = self.filter_int(t, "burst", default_burst, 1, i64::MAX) as u64;
        let key = self.rate_limit_key(t);
        let name = self.filter_string(t, "name");
        if let Some(n) = &name {
            if !is_token(n.get_ref()) {
                self.error(
                    n.span(),
                    "`name` is letters, digits and -._~ (it is quoted in response headers)",
                );
            }
        }
        let status = self.filter_int(t, "status", 429, 400, 599) as u16;
        let headers = self.filter_bool(t, "headers", true);
        let mode = self.filter_string(t, "mode");
        let global = match mode.as_ref().map(|m| m.get_ref().as_str()) {
            None | Some("local") => false,
            Some("global") => true,
            Some(other) => {
                self.error(
                    mode.as_ref().map_or(t.span.clone(), |m| m.span()),
                    format!("`mode` is \"local\" or \"global\", not `{other}`"),
                );
                false
            }
        };
        let redis = self.filter_string(t, "redis");
        let redis_timeout = self.filter_duration(t, "redis_timeout");
        let on_error = self.filter_string(t, "on_redis_error");
        let max_lease = t
            .entries_has("max_lease")
            .then(|| self.filter_int(t, "max_lease", 1, 1, 1 << 30) as u64);
        let max_keys = self.filter_int(t, "max_keys", DEFAULT_MAX_KEYS, 1, MAX_CAPACITY as i64) as usize;
        let (rate, (count, period)) = (rate?, parsed?);
        let limit = match RateLimit::new(count, period, burst) {
            Ok(l) => l,
            Err(e) => {
                let at = if burst_given { t.span.clone() } else { rate.span() };
                self.error(at, e.to_string());
                return None;
            }
        };
        // Where the filter sits keeps its LOCAL table across reloads; its `name` (or that place)
        // names its GLOBAL buckets, so same-named filters share them.
        let scope = self.filter_scope.clone();
        let shared_name = name.as_ref().map_or(scope.as_str(), |n| n.get_ref().as_str());
        let store = if global {
            let Some(redis) = redis else {
                self.error(
                    t.span.clone(),
                    "a `rate_limit` with mode = \"global\" needs `redis` (HOST:PORT or a redis:// URL)",
                );
                return None;
            };
            let endpoint = match RedisEndpoint::parse(redis.get_ref()) {
                Ok(e) => e,
                Err(e) => {
                    self.error(redis.span(), e);
                    return None;
                }
            };
            let args = match limit.redis_args() {
                Ok(a) => a,
                Err(e) => {
                    self.error(rate.span(), e.to_string());
                    return None;
                }
            };
            let on_error = match on_error.as_ref().map(|o| o.get_ref().as_str()) {
                None | Some("allow") => RedisFailMode::Allow,
                Some("deny") => RedisFailMode::Deny,
                Some(other) => {
                    let at = on_error.as_ref().map_or(t.span.clone(), |o| o.span());
                    self.error(at, format!("`on_redis_error` is \"allow\" or \"deny\", not `{other}`"));
                    return None;
                }
            };
            BucketStore::Global(GlobalStore {
                redis: endpoint,
                prefix: format!("rampart:rl:{shared_name}:"),
                args,
                on_error,
                timeout: redis_timeout.unwrap_or(DEFAULT_REDIS_TIMEOUT),
                max_lease: max_lease.unwrap_or((burst / 10).max(1)),
            })
        } else {
            for (key, given) in [
                ("redis", redis.is_some()),
                ("redis_timeout", redis_timeout.is_some()),
                ("on_redis_error", on_error.is_some()),
                ("max_lease", max_lease.is_some()),
            ] {
                if given {
                    self.error(t.span.clone(), format!("`{key}` is for mode = \"global\""));
                }
            }
            match live.rate_limit_buckets(&scope, max_keys) {
                Ok(buckets) => BucketStore::Local(buckets),
                Err(e) => {
                    self.error(t.span.clone(), e.to_string());
                    return None;
                }
            }
        };
        let policy = name.map_or_else(|| "default".to_string(), Spanned::into_inner);
        let policy_header = format!(
            "\"{policy}\";q={};w={}",
            limit.burst(),
            Duration::from_nanos(limit.tolerance_ns()).as_secs().max(1)
        );
        Some(Filter::RateLimit(RateLimitFilter {
            limit,
            key: key?,
            store,
            status,
            headers,
            policy,
            policy_header,
            hasher: KeyHasher::default(),
            scope,
        }))
    }

    /// `key`: what requests are counted by.
    fn rate_limit_key(&mut self, t: &mut FilterTable<'_>) -> Option<RateLimitKey> {
        let Some(key) = self.filter_string(t, "key") else {
            return Some(RateLimitKey::ClientIp);
        };
        let parsed = match key.get_ref().as_str() {
            "client_ip" => Some(RateLimitKey::ClientIp),
            "route" => Some(RateLimitKey::Route),
            k => match k.split_once(':') {
                Some(("header", name)) if is_token(name) => Some(RateLimitKey::Header(name.to_ascii_lowercase())),
                Some(("claim", name)) if !name.is_empty() => Some(RateLimitKey::Claim(name.to_string())),
                _ => None,
            },
        };
        if parsed.is_none() {
            self.error(
                key.span(),
                format!(
                    "`key` = `{}`: write \"client_ip\", \"route\", \"header:NAME\" or \"claim:NAME\"",
                    key.get_ref()
                ),
            );
        }
        parsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_units_and_durations() {
        assert_eq!(parse_rate("100/s"), Ok((100, Duration::from_secs(1))));
        assert_eq!(parse_rate("1000/m"), Ok((1000, Duration::from_secs(60))));
        assert_eq!(parse_rate("5/h"), Ok((5, Duration::from_secs(3600))));
        assert_eq!(parse_rate("50/10s"), Ok((50, Duration::from_secs(10))));
        assert_eq!(parse_rate(" 7 / 500ms "), Ok((7, Duration::from_millis(500))));
        for bad in ["100", "x/s", "100/fortnight", "-1/s", "/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
