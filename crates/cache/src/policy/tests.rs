//! The rules, each checked on the examples RFC 9111 (and RFC 9110, 5861) give where they give
//! one, and on the edges the RFC names.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::control::{delta_seconds, Directives, FieldScope, MaxStale, DELTA_MAX};
use super::freshness::{http_date, lifetime, Lifetime, Timing};
use super::reuse::{freshens, invalidated_paths, invalidates, reuse, validators, Reuse, Variant};
use super::storable::{may_store, stores_field, NotStored};
use super::FieldSource;

type Fields<'a> = [(&'a [u8], &'a [u8])];

fn cc(lines: &[&str]) -> Directives {
    let fields: Vec<(&[u8], &[u8])> = lines.iter().map(|l| (&b"Cache-Control"[..], l.as_bytes())).collect();
    Directives::of(fields.as_slice())
}

const DAY: Duration = Duration::from_secs(86_400);

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// 1994-11-06 08:49:37 GMT, RFC 9110's example date, in seconds since the epoch.
const SUNDAY: u64 = 784_111_777;

#[test]
fn the_three_date_forms_of_rfc_9110_read_as_the_same_time() {
    for form in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(http_date(form.as_bytes()), Some(at(SUNDAY)), "{form}");
    }
    assert_eq!(http_date(b"0"), None);
}

#[test]
fn the_fast_imf_fixdate_reading_agrees_with_the_general_parser() {
    // Every day of 1970-2105 at a time that moves through the day, and a leap day.
    for day in 0..50_000u64 {
        let t = at(day * 86_400 + (day * 7_919) % 86_400);
        let text = httpdate::fmt_http_date(t);
        assert_eq!(http_date(text.as_bytes()), Some(t), "{text}");
    }
    assert_eq!(
        http_date(b"Tue, 29 Feb 2028 23:59:59 GMT"),
        httpdate::parse_http_date("Tue, 29 Feb 2028 23:59:59 GMT").ok()
    );
    for bad in [
        "Sun, 06 Xyz 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:49:37 GMT",
        "Sun, 0a Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(http_date(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn directives_read_as_section_5_2_says() {
    let d = cc(&["max-age=3600, must-revalidate", "Public"]);
    assert_eq!(d.max_age, Some(3600));
    assert!(d.must_revalidate && d.public);
    // Section 5.2.2.4's example: a qualified no-cache names fields, across the list's commas.
    let d = cc(&[r#"no-cache="Set-Cookie, X-A", private"#]);
    assert_eq!(
        d.no_cache,
        FieldScope::Fields(vec![b"set-cookie".to_vec(), b"x-a".to_vec()])
    );
    assert_eq!(d.private, FieldScope::All);
    // The first occurrence counts; an invalid number is stale; past 2^31 is 2^31.
    assert_eq!(cc(&["max-age=5", "max-age=100"]).max_age, Some(5));
    assert_eq!(cc(&["max-age=abc"]).max_age, Some(0));
    assert_eq!(cc(&["max-age=-1"]).max_age, Some(0));
    assert_eq!(cc(&["s-maxage=99999999999999999999"]).s_maxage, Some(DELTA_MAX));
    assert_eq!(cc(&[r#"max-age="5""#]).max_age, Some(5));
    // Request directives; max-stale without a value accepts any staleness.
    let d = cc(&["max-stale, min-fresh=10, only-if-cached, no-store"]);
    assert_eq!(d.max_stale, Some(MaxStale::Any));
    assert_eq!(d.min_fresh, Some(10));
    assert!(d.only_if_cached && d.no_store);
    assert_eq!(cc(&["max-stale=30"]).max_stale, Some(MaxStale::Seconds(30)));
    // RFC 5861's directives; unknown ones are ignored, and so are empty list elements.
    let d = cc(&[" , stale-while-revalidate=60,, stale-if-error=600, community=\"UCI\""]);
    assert_eq!((d.stale_while_revalidate, d.stale_if_error), (Some(60), Some(600)));
    assert!(!cc(&["community=\"UCI\""]).any());
    assert_eq!(delta_seconds(b""), 0);
}

#[test]
fn a_targeted_field_reads_like_cache_control() {
    let fields: &Fields = &[(b"CDN-Cache-Control", b"max-age=60"), (b"cache-control", b"max-age=5")];
    assert_eq!(Directives::of_field(fields, b"cdn-cache-control").max_age, Some(60));
    assert_eq!(Directives::of(fields).max_age, Some(5));
    // RFC 9213: a shared cache follows the targeted field, and Cache-Control only without one.
    assert_eq!(Directives::for_shared_cache(fields).max_age, Some(60));
    let plain: &Fields = &[(b"cache-control", b"max-age=5"), (b"cdn-cache-control", b"")];
    assert_eq!(Directives::for_shared_cache(plain).max_age, Some(5));
    // A configured list (section 2.2): the first one present with directives wins.
    let both: &Fields = &[
        (b"cache-control", b"max-age=5"),
        (b"CDN-Cache-Control", b"max-age=60"),
        (b"Rampart-Cache-Control", b"max-age=600"),
    ];
    let own = super::control::Targets::new(["Rampart-Cache-Control", "CDN-Cache-Control"]);
    assert_eq!(Directives::for_targets(both, &own).max_age, Some(600));
    assert_eq!(Directives::for_targets(fields, &own).max_age, Some(60));
    assert_eq!(
        Directives::for_targets(both, &super::control::Targets::new([])).max_age,
        Some(5)
    );
    let no_store: &Fields = &[(b"cache-control", b"max-age=5"), (b"cdn-cache-control", b"no-store")];
    assert!(Directives::for_shared_cache(no_store).no_store);
}

#[test]
fn the_lifetime_comes_from_s_maxage_then_max_age_then_expires_then_the_heuristic() {
    let now = at(SUNDAY);
    let date: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    let life = |fields: &Fields, status: u16| {
        let fields_cc = Directives::of(fields);
        lifetime(status, fields, &fields_cc, now, DAY)
    };
    let explicit = |seconds| Lifetime {
        seconds,
        explicit: true,
    };
    assert_eq!(
        life(&[(b"cache-control", b"max-age=10, s-maxage=20")], 200),
        explicit(20)
    );
    let with_expires: &Fields = &[
        (b"cache-control", b"max-age=10"),
        (b"date", date),
        (b"expires", b"Sun, 06 Nov 1994 09:49:37 GMT"),
    ];
    assert_eq!(life(with_expires, 200), explicit(10));
    assert_eq!(life(&with_expires[1..], 200), explicit(3600));
    // An invalid Expires, "0" above all, is in the past; so is one given twice.
    assert_eq!(life(&[(b"date", date), (b"expires", b"0")], 200), explicit(0));
    let twice: &Fields = &[
        (b"expires", b"Sun, 06 Nov 1994 09:49:37 GMT"),
        (b"expires", b"Sun, 06 Nov 1994 10:49:37 GMT"),
    ];
    assert_eq!(life(twice, 200), explicit(0));
    // The heuristic: a tenth of the time since Last-Modified (100 days ago: 10 days), at most the
    // limit (a day), for a heuristically cacheable status or a public response only.
    let modified = httpdate::fmt_http_date(now - 100 * DAY);
    let heuristic: &Fields = &[(b"date", date), (b"last-modified", modified.as_bytes())];
    let by_heuristic = |seconds| Lifetime {
        seconds,
        explicit: false,
    };
    assert_eq!(life(heuristic, 200), by_heuristic(86_400));
    assert_eq!(
        lifetime(200, heuristic, &Directives::default(), now, 30 * DAY),
        by_heuristic(864_000)
    );
    assert_eq!(life(heuristic, 302), by_heuristic(0));
    let public: &Fields = &[
        (b"date", date),
        (b"last-modified", modified.as_bytes()),
        (b"cache-control", b"public"),
    ];
    assert_eq!(life(public, 302), by_heuristic(86_400));
}

#[test]
fn the_age_is_the_larger_of_the_apparent_and_the_corrected_age_plus_the_time_stored() {
    // Asked at t, answered at t + 2 with a Date of t + 1 and Age 10: the corrected age (10 + the
    // 2 s the request took) beats the apparent one (1 s); 30 s later it is 42.
    let t = SUNDAY;
    let date = httpdate::fmt_http_date(at(t + 1));
    let fields: &Fields = &[(b"date", date.as_bytes()), (b"age", b"10")];
    let timing = Timing::of(fields, at(t), at(t + 2));
    assert_eq!(timing.current_age(at(t + 2)), 12);
    assert_eq!(timing.current_age(at(t + 32)), 42);
    // A Date far in the past (a clock behind, or a response held upstream) makes it older.
    let old = httpdate::fmt_http_date(at(t - 100));
    let fields: &Fields = &[(b"date", old.as_bytes())];
    assert_eq!(Timing::of(fields, at(t), at(t)).current_age(at(t)), 100);
    // A Date ahead of the clock counts as no age at all.
    let ahead = httpdate::fmt_http_date(at(t + 100));
    let fields: &Fields = &[(b"date", ahead.as_bytes())];
    assert_eq!(Timing::of(fields, at(t), at(t)).current_age(at(t)), 0);
}

#[test]
fn an_age_that_is_not_one_non_negative_integer_makes_the_response_stale() {
    let t = SUNDAY;
    let age = |lines: &[&str]| {
        let fields: Vec<(&[u8], &[u8])> = lines.iter().map(|v| (&b"Age"[..], v.as_bytes())).collect();
        Timing::of(fields.as_slice(), at(t), at(t)).current_age(at(t))
    };
    assert_eq!(age(&[]), 0);
    assert_eq!(age(&[" 30 "]), 30);
    assert_eq!(age(&["99999999999999999999"]), DELTA_MAX);
    for invalid in [
        &["abc"][..],
        &["-7200"],
        &["7200.0"],
        &["0, 0"],
        &["0,7200"],
        &["0", "0"],
        &["7200;foo=1"],
        &[""],
    ] {
        assert_eq!(age(invalid), super::freshness::AGE_INVALID, "{invalid:?}");
    }
    let stale = reuse(&Directives::default(), &cc(&["max-age=3600"]), 3600, age(&["0", "0"]));
    assert_eq!(stale, Reuse::Validate { stale_if_error: false });
}

fn store(method: &str, request: &Fields, status: u16, response: &Fields) -> Result<(), NotStored> {
    may_store(
        method.as_bytes(),
        request,
        &Directives::of(request),
        status,
        response,
        &Directives::of(response),
    )
}

#[test]
fn what_a_shared_cache_may_store_follows_section_3() {
    let fresh: &Fields = &[(b"cache-control", b"max-age=60")];
    assert_eq!(store("GET", &[], 200, fresh), Ok(()));
    assert_eq!(store("POST", &[], 200, fresh), Err(NotStored::Method));
    assert_eq!(store("GET", &[], 206, fresh), Err(NotStored::Status));
    assert_eq!(
        store("GET", &[], 200, &[(b"cache-control", b"max-age=60, no-store")]),
        Err(NotStored::NoStore)
    );
    assert_eq!(
        store("GET", &[(b"cache-control", b"no-store")], 200, fresh),
        Err(NotStored::NoStore)
    );
    assert_eq!(
        store("GET", &[], 200, &[(b"cache-control", b"private, max-age=60")]),
        Err(NotStored::Private)
    );
    // A qualified private leaves the response storable, without the named fields.
    assert_eq!(
        store(
            "GET",
            &[],
            200,
            &[(b"cache-control", b"private=\"x-user\", max-age=60")]
        ),
        Ok(())
    );
    // Credentials (section 3.5): only with public, s-maxage or must-revalidate.
    let auth: &Fields = &[(b"authorization", b"Basic YTpi")];
    assert_eq!(store("GET", auth, 200, fresh), Err(NotStored::Authorization));
    for allows in ["public, max-age=60", "s-maxage=60", "must-revalidate, max-age=60"] {
        assert_eq!(
            store("GET", auth, 200, &[(b"cache-control", allows.as_bytes())]),
            Ok(()),
            "{allows}"
        );
    }
    assert_eq!(
        store(
            "GET",
            &[],
            200,
            &[(b"cache-control", b"max-age=60"), (b"vary", b"accept, *")]
        ),
        Err(NotStored::VaryAll)
    );
    // Without explicit freshness: only heuristically cacheable statuses, or public.
    assert_eq!(store("GET", &[], 200, &[]), Ok(()));
    assert_eq!(store("GET", &[], 302, &[]), Err(NotStored::NoFreshness));
    assert_eq!(store("GET", &[], 302, &[(b"cache-control", b"public")]), Ok(()));
    assert_eq!(
        store("GET", &[], 302, &[(b"expires", b"Sun, 06 Nov 1994 08:49:37 GMT")]),
        Ok(())
    );
    // must-understand (section 5.2.2.3): a known status sets no-store aside, an unknown one is
    // not stored.
    let understand: &Fields = &[(b"cache-control", b"must-understand, no-store, max-age=60")];
    assert_eq!(store("GET", &[], 200, understand), Ok(()));
    assert_eq!(store("GET", &[], 299, understand), Err(NotStored::Status));
}

#[test]
fn hop_by_hop_fields_and_those_named_by_connection_or_qualified_directives_are_not_stored() {
    let response: &Fields = &[
        (b"connection", b"close, X-Hop"),
        (b"cache-control", b"no-cache=\"set-cookie\", private=\"x-user\""),
    ];
    let d = Directives::of(response);
    for dropped in [
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "x-hop",
        "Set-Cookie",
        "X-User",
    ] {
        assert!(!stores_field(dropped.as_bytes(), response, &d), "{dropped}");
    }
    for kept in ["ETag", "Content-Type", "Cache-Control", "Content-Length"] {
        assert!(stores_field(kept.as_bytes(), response, &d), "{kept}");
    }
    // `Connection` on two lines names fields on both.
    let two: &Fields = &[(b"Connection", b"x-one"), (b"connection", b" X-Two ,")];
    let none = Directives::default();
    assert!(!stores_field(b"X-One", two, &none) && !stores_field(b"x-two", two, &none));
    assert!(stores_field(b"X-Three", two, &none));
}

#[test]
fn a_stored_response_is_reused_fresh_stale_or_after_validation() {
    let none = Directives::default();
    let stored = cc(&["max-age=100"]);
    assert_eq!(reuse(&none, &stored, 100, 99), Reuse::Fresh);
    assert_eq!(
        reuse(&none, &stored, 100, 100),
        Reuse::Validate { stale_if_error: false }
    );
    // The request's directives (section 5.2.1).
    assert_eq!(
        reuse(&cc(&["no-cache"]), &stored, 100, 1),
        Reuse::Validate { stale_if_error: false }
    );
    assert_eq!(
        reuse(&cc(&["max-age=10"]), &stored, 100, 11),
        Reuse::Validate { stale_if_error: false }
    );
    assert_eq!(reuse(&cc(&["max-age=10"]), &stored, 100, 10), Reuse::Fresh);
    assert_eq!(
        reuse(&cc(&["min-fresh=20"]), &stored, 100, 81),
        Reuse::Validate { stale_if_error: false }
    );
    assert_eq!(reuse(&cc(&["min-fresh=20"]), &stored, 100, 80), Reuse::Fresh);
    assert_eq!(reuse(&cc(&["max-stale"]), &stored, 100, 5000), Reuse::StaleAccepted);
    assert_eq!(reuse(&cc(&["max-stale=50"]), &stored, 100, 150), Reuse::StaleAccepted);
    assert_eq!(
        reuse(&cc(&["max-stale=50"]), &stored, 100, 151),
        Reuse::Validate { stale_if_error: false }
    );
    // The response's: no-cache validates even while fresh; must-revalidate, proxy-revalidate and
    // s-maxage refuse any stale use.
    assert_eq!(
        reuse(&none, &cc(&["no-cache, max-age=100"]), 100, 1),
        Reuse::Validate { stale_if_error: false }
    );
    for strict in ["must-revalidate", "proxy-revalidate", "s-maxage=100"] {
        let d = cc(&[strict, "max-age=100, stale-if-error=999, stale-while-revalidate=999"]);
        assert_eq!(
            reuse(&cc(&["max-stale"]), &d, 100, 101),
            Reuse::Validate { stale_if_error: false },
            "{strict}"
        );
    }
    // RFC 5861: stale-while-revalidate, then stale-if-error, each within its window.
    let d = cc(&["max-age=100, stale-while-revalidate=30, stale-if-error=60"]);
    assert_eq!(reuse(&none, &d, 100, 130), Reuse::StaleWhileRevalidate);
    assert_eq!(reuse(&none, &d, 100, 131), Reuse::Validate { stale_if_error: true });
    assert_eq!(reuse(&none, &d, 100, 160), Reuse::Validate { stale_if_error: true });
    assert_eq!(reuse(&none, &d, 100, 161), Reuse::Validate { stale_if_error: false });
    assert_eq!(
        reuse(&cc(&["stale-if-error=100"]), &stored, 100, 190),
        Reuse::Validate { stale_if_error: true }
    );
    // Stale from the start (max-age=0) is stale by 0 seconds: within any stale-if-error.
    let at_once = cc(&["max-age=0, stale-if-error=60"]);
    assert_eq!(reuse(&none, &at_once, 0, 0), Reuse::Validate { stale_if_error: true });
}

#[test]
fn vary_selects_by_the_named_request_fields_normalized() {
    // RFC 9110 section 12.5.5's example.
    let response: &Fields = &[(b"vary", b"accept-encoding, accept-language")];
    let first: &Fields = &[(b"Accept-Encoding", b"gzip,  br"), (b"accept-language", b"fr")];
    let variant = Variant::of(response, first).unwrap();
    assert!(variant.matches(first));
    let same: &Fields = &[
        (b"accept-encoding", b"gzip"),
        (b"accept-encoding", b"br"),
        (b"Accept-Language", b"fr"),
    ];
    assert!(variant.matches(same));
    let other: &Fields = &[(b"accept-encoding", b"gzip, br"), (b"accept-language", b"en")];
    assert!(!variant.matches(other));
    let absent: &Fields = &[(b"accept-encoding", b"gzip, br")];
    assert!(!variant.matches(absent));
    // No Vary: every request matches; Vary: * matches none.
    assert!(Variant::of(&[] as &Fields, first).unwrap().matches(other));
    assert_eq!(Variant::of(&[(&b"vary"[..], &b"*"[..])] as &Fields, first), None);
}

#[test]
fn validation_uses_the_stored_validators_and_a_304_updates_the_response_it_names() {
    let stored: &Fields = &[
        (b"etag", b"\"v1\""),
        (b"last-modified", b"Sun, 06 Nov 1994 08:49:37 GMT"),
    ];
    assert_eq!(
        validators(stored),
        vec![
            (&b"if-none-match"[..], b"\"v1\"".to_vec()),
            (&b"if-modified-since"[..], b"Sun, 06 Nov 1994 08:49:37 GMT".to_vec())
        ]
    );
    assert!(freshens(stored, &[(&b"etag"[..], &b"\"v1\""[..])] as &Fields));
    assert!(!freshens(stored, &[(&b"etag"[..], &b"\"v2\""[..])] as &Fields));
    // A weak tag does not select a response to update (section 4.3.4).
    assert!(!freshens(stored, &[(&b"etag"[..], &b"W/\"v1\""[..])] as &Fields));
    assert!(freshens(
        stored,
        &[(&b"last-modified"[..], &b"Sun, 06 Nov 1994 08:49:37 GMT"[..])] as &Fields
    ));
    assert!(freshens(stored, &[] as &Fields));
    assert!(super::reuse::updates_field(b"Cache-Control"));
    assert!(!super::reuse::updates_field(b"Content-Length"));
    for kept in ["content-encoding", "Content-Range", "content-md5", "ETag"] {
        assert!(!super::reuse::updates_field(kept.as_bytes()), "{kept}");
    }
}

#[test]
fn unsafe_requests_invalidate_their_target_and_same_origin_locations() {
    assert!(invalidates(b"POST", 200) && invalidates(b"DELETE", 302) && invalidates(b"PATCH", 204));
    assert!(!invalidates(b"POST", 500) && !invalidates(b"GET", 200) && !invalidates(b"OPTIONS", 200));
    let response: &Fields = &[
        (b"location", b"/new?x=1"),
        (b"content-location", b"https://Example.com/item"),
    ];
    assert_eq!(
        invalidated_paths(response, b"example.com"),
        vec![b"/new?x=1".to_vec(), b"/item".to_vec()]
    );
    let elsewhere: &Fields = &[
        (b"location", b"https://other.example/x"),
        (b"content-location", b"//other/x"),
    ];
    assert!(invalidated_paths(elsewhere, b"example.com").is_empty());
}

#[test]
fn field_sources_match_names_without_regard_to_case() {
    let fields: &Fields = &[(b"ETag", b"\"a\""), (b"etag", b"\"b\"")];
    assert_eq!(fields.each(b"etag").count(), 2);
    assert_eq!(fields.value_of(b"etag"), Some(&b"\"a\""[..]));
}
