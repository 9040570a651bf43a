use super::*;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn limit(rate: u64, period: Duration, burst: u64) -> RateLimit {
    RateLimit::new(rate, period, burst).unwrap()
}

#[test]
fn derives_interval_and_tolerance() {
    let l = limit(10, Duration::from_secs(1), 5);
    assert_eq!((l.rate(), l.period(), l.burst()), (10, Duration::from_secs(1), 5));
    assert_eq!(l.interval_ns(), 100 * MS);
    assert_eq!(l.tolerance_ns(), 500 * MS);
    // 3 a second: the interval rounds up, so the rate is never exceeded.
    assert_eq!(limit(3, Duration::from_secs(1), 1).interval_ns(), 333_333_334);
    // 100 a minute.
    assert_eq!(limit(100, Duration::from_secs(60), 1).interval_ns(), 600 * MS);
}

#[test]
fn refuses_degenerate_settings() {
    let s = Duration::from_secs(1);
    assert_eq!(RateLimit::new(0, s, 1), Err(RateLimitError::ZeroRate));
    assert_eq!(RateLimit::new(1, s, 0), Err(RateLimitError::ZeroBurst));
    assert_eq!(RateLimit::new(1, Duration::ZERO, 1), Err(RateLimitError::ZeroPeriod));
    assert_eq!(RateLimit::new(SEC + 1, s, 1), Err(RateLimitError::RateTooHigh));
    assert_eq!(
        RateLimit::new(u64::MAX, Duration::from_nanos(1), 1),
        Err(RateLimitError::RateTooHigh)
    );
    assert_eq!(RateLimit::new(1, Duration::MAX, 1), Err(RateLimitError::PeriodTooLong));
    assert_eq!(RateLimit::new(1, s, u64::MAX), Err(RateLimitError::BurstTooLarge));
    // The edges that are allowed.
    assert_eq!(limit(SEC, s, 1).interval_ns(), 1);
    assert_eq!(limit(1, Duration::from_nanos(u64::MAX), 1).tolerance_ns(), u64::MAX);
    assert_eq!(limit(1, Duration::from_nanos(1), u64::MAX).tolerance_ns(), u64::MAX);
}

#[test]
fn a_full_bucket_allows_burst_then_one_per_interval() {
    let l = limit(10, Duration::from_secs(1), 5);
    let mut tat = 0;
    let now = 7 * SEC;
    for left in (0..5).rev() {
        let d = l.take(tat, now, 1);
        assert_eq!((d.granted, d.remaining), (1, left));
        assert_eq!(d.reset_after, (5 - left) * 100 * MS);
        assert_eq!(d.retry_after, if left > 0 { 0 } else { 100 * MS });
        tat = d.tat;
    }
    assert_eq!(tat, now + 500 * MS);
    // Empty: denied, the TAT unchanged, the next token in one interval.
    let d = l.take(tat, now, 1);
    assert!(!d.is_allowed());
    assert_eq!(
        d,
        Decision {
            granted: 0,
            tat,
            remaining: 0,
            retry_after: 100 * MS,
            reset_after: 500 * MS
        }
    );
    // 30 ms later: 70 ms to wait.
    let d = l.take(tat, now + 30 * MS, 1);
    assert_eq!((d.granted, d.retry_after, d.reset_after), (0, 70 * MS, 470 * MS));
    // One interval later: exactly one more.
    let d = l.take(tat, now + 100 * MS, 1);
    assert_eq!((d.granted, d.remaining, d.retry_after), (1, 0, 100 * MS));
    tat = d.tat;
    assert!(!l.take(tat, now + 100 * MS, 1).is_allowed());
    // After the whole tolerance (and more), full again: burst, not more.
    let later = tat + 10 * SEC;
    let d = l.take(tat, later, 5);
    assert_eq!((d.granted, d.remaining, d.reset_after), (5, 0, 500 * MS));
    assert_eq!(d.tat, later + 500 * MS);
}

#[test]
fn counts_over_a_long_run_match_the_rate() {
    // 10 a second, burst 5, a request every millisecond for 10 seconds: the burst at 0, then
    // one each 100 ms from 0.1 s to 9.9 s.
    let l = limit(10, Duration::from_secs(1), 5);
    let (mut tat, mut allowed) = (0, 0);
    for ms in 0..10_000 {
        let d = l.take(tat, ms * MS, 1);
        tat = d.tat;
        allowed += d.granted;
    }
    assert_eq!(allowed, 5 + 99);
}

#[test]
fn all_or_nothing_and_up_to() {
    let l = limit(1, Duration::from_secs(1), 10);
    let d = l.take(0, SEC, 4);
    assert_eq!((d.granted, d.remaining), (4, 6));
    let tat = d.tat;
    // 7 wanted, 6 left: all or nothing denies and leaves the bucket alone, up-to grants 6.
    let denied = l.take(tat, SEC, 7);
    assert_eq!(
        (denied.granted, denied.tat, denied.remaining, denied.retry_after),
        (0, tat, 6, 0)
    );
    let lease = l.take_up_to(tat, SEC, 7);
    assert_eq!((lease.granted, lease.remaining, lease.retry_after), (6, 0, SEC));
    assert_eq!(lease.tat, SEC + 10 * SEC);
    // More than the burst is never granted whole.
    assert_eq!(l.take(0, SEC, 11).granted, 0);
    assert_eq!(l.take_up_to(0, SEC, 11).granted, 10);
    // Nothing wanted, nothing granted, nothing changed.
    assert_eq!(
        l.take(tat, SEC, 0),
        Decision {
            granted: 0,
            tat,
            remaining: 6,
            retry_after: 0,
            reset_after: 4 * SEC
        }
    );
}

#[test]
fn partial_tokens_round_down() {
    let l = limit(1, Duration::from_secs(1), 2);
    // Empty at 0 (TAT 2 s); at 1.5 s one and a half tokens are back: one is granted.
    let d = l.take_up_to(2 * SEC, 1500 * MS, 5);
    assert_eq!((d.granted, d.remaining, d.retry_after), (1, 0, 500 * MS));
}

#[test]
fn a_tat_beyond_the_tolerance_waits() {
    // A TAT left by a larger burst before a reload: nothing until it is back within tolerance.
    let l = limit(1, Duration::from_secs(1), 2);
    let d = l.take(10 * SEC, 0, 1);
    assert_eq!(
        (d.granted, d.remaining, d.retry_after, d.reset_after),
        (0, 0, 9 * SEC, 10 * SEC)
    );
    assert_eq!(l.take(10 * SEC, 9 * SEC, 1).granted, 1);
}

#[test]
fn seconds_round_up() {
    let d = Decision {
        granted: 0,
        tat: 0,
        remaining: 0,
        retry_after: 1,
        reset_after: 2 * SEC + 1,
    };
    assert_eq!((d.retry_after_secs(), d.reset_after_secs()), (1, 3));
    let d = Decision {
        retry_after: 0,
        reset_after: SEC,
        ..d
    };
    assert_eq!((d.retry_after_secs(), d.reset_after_secs()), (0, 1));
}

#[test]
fn extreme_inputs_do_not_overflow() {
    let values = [0, 1, 2, 999, SEC, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    for &tat in &values {
        for &now in &values {
            for &interval in &values {
                for &tolerance in &values {
                    for &wanted in &values {
                        for take in [Take::AllOrNothing, Take::UpTo] {
                            let d = gcra_take(tat, now, interval, tolerance, wanted, take);
                            assert!(d.granted <= wanted);
                            if take == Take::AllOrNothing {
                                assert!(d.granted == 0 || d.granted == wanted);
                            }
                            assert!(d.remaining <= tolerance / interval.max(1));
                            if d.granted == 0 {
                                assert_eq!(d.tat, tat);
                            } else {
                                assert!(d.tat >= now);
                                assert!(d.reset_after <= tolerance);
                            }
                        }
                    }
                }
            }
        }
    }
    // Valid settings at their extremes, at the end of time.
    for l in [
        limit(SEC, Duration::from_secs(1), u64::MAX / 2),
        limit(1, Duration::from_nanos(u64::MAX), 1),
        limit(1, Duration::from_nanos(1), u64::MAX),
    ] {
        let d = l.take(0, u64::MAX, 1);
        assert_eq!((d.granted, d.tat), (1, u64::MAX));
        let d = l.take_up_to(u64::MAX, u64::MAX - 1, u64::MAX);
        assert!(d.granted <= l.burst());
    }
}

#[test]
fn redis_args_are_microseconds_rounded_up() {
    let l = limit(10, Duration::from_secs(1), 5);
    assert_eq!(
        l.redis_args(),
        Ok(RedisArgs {
            interval_us: 100_000,
            tolerance_us: 500_000
        })
    );
    // 3 a second: 333 333.334 µs rounds up to 333 334.
    let l = limit(3, Duration::from_secs(1), 2);
    assert_eq!(
        l.redis_args(),
        Ok(RedisArgs {
            interval_us: 333_334,
            tolerance_us: 666_668
        })
    );
    // Faster than a token a microsecond: one a microsecond.
    let l = limit(SEC, Duration::from_secs(1), 3);
    assert_eq!(
        l.redis_args(),
        Ok(RedisArgs {
            interval_us: 1,
            tolerance_us: 3
        })
    );
    // Too long for the script's exact arithmetic.
    let l = limit(1, Duration::from_secs(3600), 2_000_000);
    assert_eq!(l.redis_args(), Err(RateLimitError::TooLongForRedis));
    let l = limit(1, Duration::from_micros(SCRIPT_MAX_TOLERANCE_US), 1);
    assert!(l.redis_args().is_ok());
}

#[test]
fn the_script_takes_the_documented_arguments() {
    for needle in ["KEYS[1]", "ARGV[1]", "ARGV[2]", "ARGV[3]", "redis.call('TIME')", "'PX'"] {
        assert!(GCRA_TAKE_SCRIPT.contains(needle), "{needle}");
    }
}

#[test]
fn the_monotonic_clock_moves_forward() {
    let a = monotonic_ns();
    let b = monotonic_ns();
    assert!(b >= a);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2) {}
    assert!(monotonic_ns() >= b + 2 * MS);
}
