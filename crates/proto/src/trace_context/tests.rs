//! The cases of the W3C Trace Context test suite (its `test/test.py`, strict level 2), as the
//! parser sees them: which `traceparent` values continue a trace, which `tracestate` lists are
//! inherited and which dropped.

use super::*;

const VALID: &str = "00-12345678901234567890123456789012-1234567890123456-01";

fn parent(values: &[&str]) -> Option<TraceParent> {
    parse_traceparent(values.iter().map(|v| v.as_bytes()))
}

fn state(values: &[&str]) -> Option<TraceState> {
    TraceState::parse(values.iter().map(|v| v.as_bytes()))
}

#[test]
fn a_valid_traceparent_is_read_and_written_back() {
    let p = parent(&[VALID]).unwrap();
    assert_eq!(p.trace_id[..4], [0x12, 0x34, 0x56, 0x78]);
    assert_eq!(p.parent_id[7], 0x56);
    assert!(p.sampled());
    assert_eq!(&p.to_bytes()[..], VALID.as_bytes());
    let unsampled = parent(&["00-12345678901234567890123456789012-1234567890123456-00"]).unwrap();
    assert!(!unsampled.sampled());
    // Other flag bits are kept.
    assert_eq!(
        parent(&["00-12345678901234567890123456789012-1234567890123456-ff"])
            .unwrap()
            .flags,
        0xff
    );
}

#[test]
fn spaces_and_tabs_around_a_traceparent_are_allowed() {
    for v in [
        " 00-12345678901234567890123456789012-1234567890123456-01",
        "\t00-12345678901234567890123456789012-1234567890123456-01",
        "00-12345678901234567890123456789012-1234567890123456-01 ",
        "00-12345678901234567890123456789012-1234567890123456-01\t",
        "\t 00-12345678901234567890123456789012-1234567890123456-01 \t",
    ] {
        assert!(parent(&[v]).is_some(), "{v:?}");
    }
}

#[test]
fn future_versions_are_read_by_their_first_fields() {
    assert!(parent(&["cc-12345678901234567890123456789012-1234567890123456-01"]).is_some());
    assert!(
        parent(&["cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like"]).is_some()
    );
    let future = parent(&["cc-12345678901234567890123456789012-1234567890123456-01-x"]).unwrap();
    // Written back as version 00, without what the future added.
    assert_eq!(&future.to_bytes()[..], VALID.as_bytes());
}

#[test]
fn invalid_traceparents_start_a_new_trace() {
    let invalid = [
        // Empty.
        "",
        // Version 00 with more after it.
        "00-12345678901234567890123456789012-1234567890123456-01.",
        "00-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        "cc-12345678901234567890123456789012-1234567890123456-01.what-the-future-will-be-like",
        "ff-12345678901234567890123456789012-1234567890123456-01",
        ".0-12345678901234567890123456789012-1234567890123456-01",
        "0.-12345678901234567890123456789012-1234567890123456-01",
        "000-12345678901234567890123456789012-1234567890123456-01",
        "0000-12345678901234567890123456789012-1234567890123456-01",
        "0-12345678901234567890123456789012-1234567890123456-01",
        "00-00000000000000000000000000000000-1234567890123456-01",
        "00-.2345678901234567890123456789012-1234567890123456-01",
        "00-1234567890123456789012345678901.-1234567890123456-01",
        "00-123456789012345678901234567890123-1234567890123456-01",
        "00-1234567890123456789012345678901-1234567890123456-01",
        "00-12345678901234567890123456789012-0000000000000000-01",
        "00-12345678901234567890123456789012-.234567890123456-01",
        "00-12345678901234567890123456789012-123456789012345.-01",
        "00-12345678901234567890123456789012-12345678901234567-01",
        "00-12345678901234567890123456789012-123456789012345-01",
        "00-12345678901234567890123456789012-1234567890123456-.0",
        "00-12345678901234567890123456789012-1234567890123456-0.",
        "00-12345678901234567890123456789012-1234567890123456-001",
        "00-12345678901234567890123456789012-1234567890123456-1",
        // Uppercase hex.
        "00-1234567890ABCDEF1234567890123456-1234567890123456-01",
    ];
    for v in invalid {
        assert_eq!(parent(&[v]), None, "{v:?}");
    }
    // Two traceparent fields: neither is believed.
    assert_eq!(parent(&[VALID, VALID]), None);
    assert_eq!(parent(&[]), None);
}

#[test]
fn tracestate_lists_are_joined_in_order_with_spaces_around_members() {
    let s = state(&["foo=1,bar=2", "rojo=1,congo=2", "baz=3"]).unwrap();
    assert_eq!(s.as_bytes(), b"foo=1,bar=2,rojo=1,congo=2,baz=3");
    assert_eq!(s.len(), 5);
    assert_eq!(s.get(b"congo"), Some(&b"2"[..]));
    for v in ["foo=1 \t , \t bar=2, \t baz=3", "foo=1\t \t,\t \tbar=2,\t \tbaz=3"] {
        let s = state(&[v]).unwrap();
        assert_eq!(s.as_bytes(), b"foo=1,bar=2,baz=3", "{v:?}");
    }
    for v in [" foo=1", "\tfoo=1", "foo=1 ", "foo=1\t", "\t foo=1 \t"] {
        assert_eq!(state(&[v]).unwrap().get(b"foo"), Some(&b"1"[..]), "{v:?}");
    }
    // Empty fields add nothing.
    assert!(state(&[""]).unwrap().is_empty());
    assert_eq!(state(&["foo=1", ""]).unwrap().as_bytes(), b"foo=1");
    assert_eq!(state(&["", "foo=1"]).unwrap().as_bytes(), b"foo=1");
}

#[test]
fn every_character_the_grammar_allows_is_kept() {
    let key: String = ('a'..='z').chain('0'..='9').chain("_-*/".chars()).collect();
    let vendor = format!("{key}@a-z0-9_-*/");
    let value: String = (0x20u8..=0x2b)
        .chain(0x2d..=0x3c)
        .chain(0x3e..=0x7e)
        .map(char::from)
        .collect();
    for k in [&key, &vendor] {
        let s = state(&[&format!("{k}={value}")]).unwrap();
        assert_eq!(s.get(k.as_bytes()), Some(value.as_bytes()), "{k}");
    }
}

#[test]
fn a_bad_tracestate_is_dropped_whole() {
    let invalid: &[&[&str]] = &[
        &["foo=1,foo=1"],
        &["foo=1,foo=2"],
        &["foo=1", "foo=1"],
        &["foo=1", "foo=2"],
        &["foo =1"],
        &["FOO=1"],
        &["foo.bar=1"],
        &["foo@=1,bar=2"],
        &["@foo=1,bar=2"],
        &["foo@@bar=1,bar=2"],
        &["foo@bar@baz=1,bar=2"],
        &["foo=1,bar"],
        &["foo=bar=baz"],
        &["foo="],
    ];
    for values in invalid {
        assert_eq!(state(values), None, "{values:?}");
    }
}

#[test]
fn thirty_two_members_are_kept_and_thirty_three_dropped() {
    let members = |n: usize| (0..n).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
    assert_eq!(state(&[&members(32)]).unwrap().len(), 32);
    assert_eq!(state(&[&members(33)]), None);
    // Across fields too.
    assert_eq!(
        state(&[
            &members(20),
            &(20..33).map(|i| format!("x{i}=v")).collect::<Vec<_>>().join(",")
        ]),
        None
    );
    // Key and value lengths at their limits.
    let long_key = format!("a{}", "b".repeat(255));
    assert!(state(&[&format!("{long_key}=1")]).is_some());
    assert!(state(&[&format!("{long_key}b=1")]).is_none());
    assert!(state(&[&format!("k={}", "v".repeat(256))]).is_some());
    assert!(state(&[&format!("k={}", "v".repeat(257))]).is_none());
}

#[test]
fn hex_is_written_as_the_format_machinery_writes_it() {
    // Every octet value, in strings of every length up to a trace id's and past it.
    let all: Vec<u8> = (0..=255u8)
        .chain((0..=255u8).rev())
        .chain([0x0f, 0xf0, 0x9a, 0xa9])
        .collect();
    for len in 0..=40 {
        for start in 0..all.len() - len {
            let bytes = &all[start..start + len];
            let mut out = vec![b'?'; 2 * len];
            hex_into(bytes, &mut out);
            let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }
    // What does not fit is left out.
    let mut short = [b'?'; 5];
    hex_into(&[0xab, 0xcd, 0xef], &mut short);
    assert_eq!(&short, b"abcd?");
}
