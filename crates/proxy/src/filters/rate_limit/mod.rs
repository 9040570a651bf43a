//! `rate_limit`: a token bucket per key (the client address, the route, a header, a JWT claim),
//! with the GCRA arithmetic of `rampart_model::filter::rate_limit`.
//!
//! - **LOCAL mode**: one lock-free table per filter, shared by the process's workers
//!   ([`LocalBuckets`](rampart_model::filter::rate_limit::LocalBuckets)): a request costs a hash
//!   and a compare-and-swap.
//! - **GLOBAL mode**: the buckets live in Redis, so every Rampart process sharing the server and
//!   the filter's scope shares one limit. Each worker takes tokens in leases ([`leases`]) over a
//!   pipelined connection ([`redis`], one per worker and Redis server): a hot key costs a round
//!   trip per lease, and a request waits on Redis at most once. While Redis cannot answer, requests get the filter's
//!   `on_redis_error` mode (let through, or 503) without waiting past `redis_timeout`.
//!
//! A refused request gets 429 (or the configured status) with `Retry-After` (whole seconds,
//! rounded up) and the IETF `RateLimit-Policy` and `RateLimit` fields
//! (draft-ietf-httpapi-ratelimit-headers: `"NAME";q=BURST;w=SECONDS` and `"NAME";r=LEFT;t=SECONDS`);
//! with `headers` on (the default), every response of the route carries the two fields.

pub mod leases;
pub mod redis;

use std::net::IpAddr;

use rampart_model::filter::rate_limit::{
    monotonic_ns, BucketStore, GlobalStore, RateLimitFilter, RateLimitKey, RedisFailMode,
};

use self::leases::{Leases, Quota, Step};
use self::redis::RedisClient;
use crate::filters::auth::jwt::VerifiedToken;
use crate::http::filter::{Answer, FilterCx, FilterWorker, HttpFilter, RequestParts, ResponseParts, Verdict};

/// What the response says of the quota.
#[derive(Default)]
pub struct RateLimitState {
    quota: Option<Quota>,
}

/// A worker's GLOBAL-mode state for one filter: its leases and its connection.
pub struct GlobalWorkerState {
    leases: Leases,
    client: std::rc::Rc<RedisClient>,
}

/// A request's key: the client's address, or some bytes.
enum Key<'a> {
    Ip(IpAddr),
    Text(&'a [u8]),
}

/// How a take ended.
#[derive(Default)]
enum Taken {
    Allowed(Quota),
    Refused {
        retry_after_ns: u64,
        quota: Quota,
    },
    /// Redis could not answer.
    #[default]
    Unavailable,
}

impl HttpFilter for RateLimitFilter {
    type State = RateLimitState;
    /// GLOBAL mode's leases and connection, made on the first request the worker limits.
    type WorkerState = Option<GlobalWorkerState>;

    async fn request_head(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut RateLimitState,
        req: &mut RequestParts<'_>,
    ) -> Verdict {
        let taken = match &self.store {
            BucketStore::Local(buckets) => {
                let hash = key_hash(self, &key(self, cx, req));
                let d = buckets.take(hash, &self.limit, monotonic_ns(), 1);
                let quota = Quota {
                    remaining: d.remaining,
                    reset_ns: d.reset_after,
                };
                if d.is_allowed() {
                    Taken::Allowed(quota)
                } else {
                    Taken::Refused {
                        retry_after_ns: d.retry_after,
                        quota,
                    }
                }
            }
            BucketStore::Global(store) => self.take_global(store, cx, req).await,
        };
        match taken {
            Taken::Allowed(quota) => {
                state.quota = Some(quota);
                Verdict::Continue
            }
            Taken::Refused { retry_after_ns, quota } => {
                let retry = retry_after_ns.div_ceil(1_000_000_000).max(1);
                let answer = Answer::plain(self.status, "rate_limited", "too many requests")
                    .with_header("retry-after", retry.to_string())
                    .with_header("ratelimit-policy", self.policy_header.clone())
                    .with_header("ratelimit", self.quota_field(&quota));
                Verdict::Respond(answer)
            }
            Taken::Unavailable => match self.on_error() {
                RedisFailMode::Allow => Verdict::Continue,
                RedisFailMode::Deny => Verdict::Respond(
                    Answer::plain(503, "rate_limit_unavailable", "rate limit store unavailable")
                        .with_header("retry-after", "1"),
                ),
            },
        }
    }

    fn response_head(&self, _: &mut FilterCx<'_>, state: &mut RateLimitState, resp: &mut ResponseParts<'_>) {
        if let (true, Some(quota)) = (self.headers, &state.quota) {
            resp.set_header("ratelimit-policy", &self.policy_header);
            resp.set_header("ratelimit", &self.quota_field(quota));
        }
    }
}

/// The filter's own steps.
trait Limiter {
    fn on_error(&self) -> RedisFailMode;
    fn quota_field(&self, quota: &Quota) -> String;
    async fn take_global(&self, store: &GlobalStore, cx: &mut FilterCx<'_>, req: &RequestParts<'_>) -> Taken;
}

impl Limiter for RateLimitFilter {
    fn on_error(&self) -> RedisFailMode {
        match &self.store {
            BucketStore::Global(g) => g.on_error,
            BucketStore::Local(_) => RedisFailMode::Allow,
        }
    }

    /// `"NAME";r=LEFT;t=SECONDS`, written by hand: on every response of the route, and
    /// `format!` costs a thousand instructions more (growing its string as it goes).
    fn quota_field(&self, quota: &Quota) -> String {
        let mut out = String::with_capacity(self.policy.len() + 48);
        out.push('"');
        out.push_str(&self.policy);
        out.push_str("\";r=");
        push_decimal(&mut out, quota.remaining);
        out.push_str(";t=");
        push_decimal(&mut out, quota.reset_ns.div_ceil(1_000_000_000));
        out
    }

    /// A token from the worker's lease for the key, or from Redis (waiting at most
    /// `store.timeout` in all).
    async fn take_global(&self, store: &GlobalStore, cx: &mut FilterCx<'_>, req: &RequestParts<'_>) -> Taken {
        let worker = cx.worker;
        let k = key(self, cx, req);
        let hash = key_hash(self, &k);
        let deadline = tokio::time::Instant::now() + store.timeout;
        let mut redis_key: Option<Vec<u8>> = None;
        loop {
            let (step, client) = worker.builtin_state(self, |g| {
                let g = g.get_or_insert_with(|| GlobalWorkerState {
                    leases: Leases::new(store.max_lease),
                    client: worker.redis_client(&store.redis),
                });
                (g.leases.try_take(hash, monotonic_ns()), g.client.clone())
            });
            match step {
                Step::Allowed(quota) => return Taken::Allowed(quota),
                Step::Denied { retry_after_ns, quota } => return Taken::Refused { retry_after_ns, quota },
                Step::Wait(done) => {
                    if tokio::time::timeout_at(deadline, done.notified()).await.is_err() {
                        return Taken::Unavailable;
                    }
                }
                Step::Fetch { wanted } => {
                    let key_text = redis_key
                        .get_or_insert_with(|| redis_key_text(&store.prefix, &k))
                        .clone();
                    let fetch = Fetch {
                        cx,
                        filter: self,
                        hash,
                        done: false,
                    };
                    let reply = tokio::time::timeout_at(deadline, client.take(key_text, store.args, wanted)).await;
                    return fetch.finish(reply);
                }
            }
        }
    }
}

/// A fetch in flight for one key: completes or abandons the key's lease, also when the request
/// goes away mid-fetch (so other requests never wait on a fetch nobody finishes).
struct Fetch<'c, 'f> {
    cx: &'c FilterCx<'f>,
    filter: &'c RateLimitFilter,
    hash: u64,
    done: bool,
}

impl Fetch<'_, '_> {
    fn finish(
        mut self,
        reply: Result<Result<redis::TakeReply, redis::RedisError>, tokio::time::error::Elapsed>,
    ) -> Taken {
        self.done = true;
        let (worker, filter, hash) = (self.cx.worker, self.filter, self.hash);
        match reply {
            Ok(Ok(reply)) => with_leases(worker, filter, |l| match l.complete(hash, reply, monotonic_ns()) {
                Step::Allowed(quota) => Taken::Allowed(quota),
                Step::Denied { retry_after_ns, quota } => Taken::Refused { retry_after_ns, quota },
                Step::Wait(_) | Step::Fetch { .. } => Taken::Unavailable,
            }),
            _ => {
                with_leases(worker, filter, |l| l.abandon(hash));
                Taken::Unavailable
            }
        }
    }
}

impl Drop for Fetch<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            with_leases(self.cx.worker, self.filter, |l| l.abandon(self.hash));
        }
    }
}

/// Runs `f` on the filter's leases, when the worker has them.
fn with_leases<R: Default>(worker: FilterWorker<'_>, filter: &RateLimitFilter, f: impl FnOnce(&mut Leases) -> R) -> R {
    worker
        .existing_builtin_state(filter, |g| g.as_mut().map(|g| f(&mut g.leases)))
        .flatten()
        .unwrap_or_default()
}

/// The request's key.
fn key<'a>(f: &RateLimitFilter, cx: &'a FilterCx<'_>, req: &RequestParts<'a>) -> Key<'a> {
    let text = match &f.key {
        RateLimitKey::ClientIp => None,
        RateLimitKey::Route => Some(cx.route.as_bytes()),
        RateLimitKey::Header(name) => req.header(name).filter(|v| !v.is_empty()),
        RateLimitKey::Claim(name) => cx
            .facts
            .extensions
            .get::<VerifiedToken>()
            .and_then(|t| t.claim(name))
            .map(str::as_bytes),
    };
    match text {
        Some(t) => Key::Text(t),
        None => Key::Ip(cx.facts.client_ip),
    }
}

fn key_hash(f: &RateLimitFilter, key: &Key<'_>) -> u64 {
    match key {
        Key::Ip(ip) => f.hasher.hash(&(0u8, ip)),
        Key::Text(t) => f.hasher.hash(&(1u8, t)),
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[i..].iter().map(|&d| char::from(d)));
}

/// `PREFIX` then `ip:ADDRESS` or `k:TEXT`.
fn redis_key_text(prefix: &str, key: &Key<'_>) -> Vec<u8> {
    let mut out = prefix.as_bytes().to_vec();
    match key {
        Key::Ip(ip) => {
            out.extend_from_slice(b"ip:");
            out.extend_from_slice(ip.to_string().as_bytes());
        }
        Key::Text(t) => {
            out.extend_from_slice(b"k:");
            out.extend_from_slice(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::push_decimal;

    #[test]
    fn decimals_are_written_in_full() {
        for n in [0, 7, 10, 99, 100, 123_456_789, u64::MAX] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }
}
