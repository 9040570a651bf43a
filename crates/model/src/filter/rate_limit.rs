//! Rate limiting by GCRA (the generic cell rate algorithm), the arithmetic of a token bucket
//! kept as one number per key.
//!
//! A bucket holds up to `burst` tokens and gains `rate` tokens per `period`. GCRA stores only its
//! *theoretical arrival time* (TAT): the instant at which the bucket would be full again. Taking
//! `g` tokens moves the TAT `g × interval` later (from now, if it lay in the past); a take is
//! allowed while the TAT stays within `tolerance = burst × interval` of now. So a TAT at or before
//! now is a full bucket, and "how full" is `(tolerance - (TAT - now)) / interval` tokens.
//!
//! - [`RateLimit`]: validated settings and their derived interval and tolerance.
//! - [`gcra_take`]: the pure step, all-or-nothing (a request) or "up to n" (a lease of tokens for
//!   a worker in GLOBAL mode), in integers of any one clock unit, saturating on extreme inputs.
//! - [`LocalBuckets`]: the buckets of one process (LOCAL mode), shared by every worker thread
//!   without a lock.
//! - [`monotonic_ns`]: the clock LOCAL mode runs on.
//! - [`GCRA_TAKE_SCRIPT`]: the same step as a Redis Lua script (GLOBAL mode), in microseconds of
//!   Redis's clock.
//! - [`RateLimitFilter`]: the `rate_limit` filter as compiled (key, store, answers).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod filter;
mod local;

pub use filter::{BucketStore, GlobalStore, KeyHasher, RateLimitFilter, RateLimitKey, RedisEndpoint, RedisFailMode};
pub use local::{LocalBuckets, MAX_CAPACITY, PROBE};

/// The GCRA batch take as a Redis Lua script, for `EVALSHA` after `SCRIPT LOAD`.
///
/// `EVALSHA sha 1 KEY interval_us tolerance_us wanted` (see [`RedisArgs`]) takes up to `wanted`
/// tokens from the bucket at `KEY`, on Redis's own clock (`TIME`), so that every Rampart host
/// sharing the Redis shares one time source. It answers an array of four integers,
/// `[granted, retry_after_us, reset_after_us, remaining]`, with the meanings of [`Decision`]'s
/// fields, and sets the key to expire when the bucket is full again (`SET key TAT PX ms`, the
/// reset rounded up to a millisecond plus one, as expiries run on a millisecond clock), so idle
/// keys disappear. Arguments out of range answer an error reply. Needs Redis >= 5 (effects
/// replication, so a script may write after `TIME`).
pub const GCRA_TAKE_SCRIPT: &str = include_str!("rate_limit/gcra_take.lua");

/// The largest tolerance the script accepts (2^52 µs, about 142 years): with Redis's clock in
/// microseconds since 1970, every number the script computes stays exact in Lua's doubles.
pub const SCRIPT_MAX_TOLERANCE_US: u64 = 1 << 52;

/// Why rate-limit settings were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    #[error("rate limit: the rate must be at least 1 token per period")]
    ZeroRate,
    #[error("rate limit: the period must be longer than zero")]
    ZeroPeriod,
    #[error("rate limit: the burst must be at least 1 token")]
    ZeroBurst,
    #[error("rate limit: more than one token per nanosecond")]
    RateTooHigh,
    #[error("rate limit: the period is longer than 584 years")]
    PeriodTooLong,
    #[error("rate limit: burst × interval (the time to refill an empty bucket) is longer than 584 years")]
    BurstTooLarge,
    #[error("rate limit: burst × interval is longer than 2^52 µs, beyond what the Redis script keeps exact")]
    TooLongForRedis,
    #[error("rate limit: a bucket table of more than {MAX_CAPACITY} slots")]
    CapacityTooLarge,
}

/// Validated rate-limit settings: `rate` tokens per `period`, buckets of `burst` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    rate: u64,
    period: Duration,
    burst: u64,
    interval_ns: u64,
    tolerance_ns: u64,
}

impl RateLimit {
    /// `rate` tokens per `period`, at most `burst` at once.
    ///
    /// The emission interval is `period / rate` rounded *up* to a whole nanosecond, so the
    /// effective rate never exceeds the configured one (it is lower by under one part in
    /// `interval_ns`). Refuses zeros, more than one token per nanosecond, and spans that do not
    /// fit in 64-bit nanoseconds.
    pub fn new(rate: u64, period: Duration, burst: u64) -> Result<RateLimit, RateLimitError> {
        if rate == 0 {
            return Err(RateLimitError::ZeroRate);
        }
        if burst == 0 {
            return Err(RateLimitError::ZeroBurst);
        }
        if period.is_zero() {
            return Err(RateLimitError::ZeroPeriod);
        }
        let period_ns = u64::try_from(period.as_nanos()).map_err(|_| RateLimitError::PeriodTooLong)?;
        if period_ns < rate {
            return Err(RateLimitError::RateTooHigh);
        }
        let interval_ns = period_ns.div_ceil(rate);
        let tolerance_ns = burst.checked_mul(interval_ns).ok_or(RateLimitError::BurstTooLarge)?;
        Ok(RateLimit {
            rate,
            period,
            burst,
            interval_ns,
            tolerance_ns,
        })
    }

    /// Tokens gained per [`period`](Self::period).
    pub fn rate(&self) -> u64 {
        self.rate
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// The most tokens a bucket holds (and so the most requests allowed at one instant).
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Nanoseconds one token stands for: `ceil(period / rate)`.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// `burst × interval`: how far a TAT may run ahead of now, the time to refill an empty bucket.
    pub fn tolerance_ns(&self) -> u64 {
        self.tolerance_ns
    }

    /// One request for `wanted` tokens at `now` (nanoseconds of [`monotonic_ns`]) against a
    /// bucket whose TAT is `tat`: all or nothing.
    #[inline]
    pub fn take(&self, tat: u64, now: u64, wanted: u64) -> Decision {
        gcra_take(
            tat,
            now,
            self.interval_ns,
            self.tolerance_ns,
            wanted,
            Take::AllOrNothing,
        )
    }

    /// Up to `wanted` tokens at `now`: as many as the bucket holds (a lease).
    #[inline]
    pub fn take_up_to(&self, tat: u64, now: u64, wanted: u64) -> Decision {
        gcra_take(tat, now, self.interval_ns, self.tolerance_ns, wanted, Take::UpTo)
    }

    /// The interval and tolerance in microseconds, as [`GCRA_TAKE_SCRIPT`] takes them.
    ///
    /// The interval is rounded up to a whole microsecond (so GLOBAL mode allows at most 10^6
    /// tokens a second per key, and a rate whose interval is not a whole number of microseconds
    /// runs slightly slower than in LOCAL mode) and the tolerance is `burst ×` that interval.
    /// Refuses a tolerance beyond [`SCRIPT_MAX_TOLERANCE_US`].
    pub fn redis_args(&self) -> Result<RedisArgs, RateLimitError> {
        let interval_us = self.interval_ns.div_ceil(1000);
        match self.burst.checked_mul(interval_us) {
            Some(tolerance_us) if tolerance_us <= SCRIPT_MAX_TOLERANCE_US => Ok(RedisArgs {
                interval_us,
                tolerance_us,
            }),
            _ => Err(RateLimitError::TooLongForRedis),
        }
    }
}

/// `ARGV[1]` and `ARGV[2]` of [`GCRA_TAKE_SCRIPT`] for one [`RateLimit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisArgs {
    pub interval_us: u64,
    pub tolerance_us: u64,
}

/// How many of the wanted tokens a take may grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// All of them or none (a request costing `wanted` tokens).
    AllOrNothing,
    /// As many as the bucket holds, up to `wanted` (a lease of tokens).
    UpTo,
}

/// The outcome of one take. Times are in the unit of the clock the take was given (nanoseconds
/// for [`RateLimit::take`]), relative to its `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Tokens granted: `wanted` or 0 for [`Take::AllOrNothing`], `0..=wanted` for [`Take::UpTo`].
    /// A take of 0 tokens grants nothing.
    pub granted: u64,
    /// The bucket's TAT after the take (unchanged when nothing was granted): store it.
    pub tat: u64,
    /// Whole tokens left after the take.
    pub remaining: u64,
    /// 0 when a whole token is left, else the time until the next one (`Retry-After`).
    pub retry_after: u64,
    /// The time until the bucket is full again (the reset of the `RateLimit` header).
    pub reset_after: u64,
}

impl Decision {
    /// Whether anything was granted.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.granted > 0
    }

    /// [`retry_after`](Self::retry_after) of a nanosecond take in whole seconds, rounded up (a
    /// client told 0 while still limited would retry at once).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.div_ceil(1_000_000_000)
    }

    /// [`reset_after`](Self::reset_after) of a nanosecond take in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after.div_ceil(1_000_000_000)
    }
}

/// One GCRA step: take `wanted` tokens (all or nothing, or up to `wanted`) at `now` from the
/// bucket whose TAT is `tat`, where one token stands for `interval` and a full bucket for
/// `tolerance` (`burst × interval`). All four times are in one clock unit (nanoseconds locally;
/// the Lua script does the same in microseconds).
///
/// Integer arithmetic only; nothing overflows: `ahead = TAT - now` (0 if the TAT is past) is at
/// most `tolerance` after a grant, and the new TAT saturates at `u64::MAX`. An `interval` of 0 is
/// taken as 1. A TAT further ahead than `tolerance` (left by a larger burst before a reload)
/// grants nothing until time catches up.
#[inline]
pub fn gcra_take(tat: u64, now: u64, interval: u64, tolerance: u64, wanted: u64, take: Take) -> Decision {
    let interval = interval.max(1);
    let ahead = tat.saturating_sub(now);
    let available = tolerance.saturating_sub(ahead) / interval;
    let granted = match take {
        Take::AllOrNothing if wanted <= available => wanted,
        Take::AllOrNothing => 0,
        Take::UpTo => wanted.min(available),
    };
    // granted <= available, so granted × interval <= tolerance - ahead: no overflow.
    let new_ahead = ahead + granted * interval;
    let remaining = tolerance.saturating_sub(new_ahead) / interval;
    Decision {
        granted,
        tat: if granted == 0 {
            tat
        } else {
            now.saturating_add(new_ahead)
        },
        remaining,
        retry_after: if remaining > 0 {
            0
        } else {
            new_ahead.saturating_add(interval).saturating_sub(tolerance)
        },
        reset_after: new_ahead,
    }
}

/// Nanoseconds since the first call in this process, on the monotonic clock: the `now` of LOCAL
/// buckets (their TATs are on this clock, so they mean nothing to another process). One atomic
/// load and one `clock_gettime` (vDSO) per call. Saturates after 584 years.
#[inline]
pub fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
