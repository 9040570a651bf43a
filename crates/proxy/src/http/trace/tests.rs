use super::*;

fn head(fields: &[(&str, &str)]) -> RequestHead {
    let mut text = String::from("GET / HTTP/1.1\r\nhost: a\r\n");
    for (n, v) in fields {
        text.push_str(&format!("{n}: {v}\r\n"));
    }
    text.push_str("\r\n");
    let mut head = RequestHead::default();
    let limits = rampart_proto::h1::Limits::default();
    let parsed = rampart_proto::h1::parse_request(text.as_bytes(), &limits, &mut head)
        .unwrap()
        .unwrap();
    head.attach(text.into_bytes(), 0, parsed.len);
    head
}

fn counter() -> impl FnMut() -> u64 {
    let mut n = 0x1234_5678_9abc_def0u64;
    move || {
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        n
    }
}

#[test]
fn a_traceparent_is_continued_with_a_span_of_rampart_own() {
    let h = head(&[
        ("traceparent", "00-12345678901234567890123456789012-1234567890123456-01"),
        ("tracestate", "foo=1,bar=2"),
    ]);
    let t = RequestTrace::of(
        &h,
        &TraceSettings {
            sampling: 0.0,
            ..Default::default()
        },
        counter(),
    );
    assert_eq!(&t.trace_id_hex(), b"12345678901234567890123456789012");
    assert_eq!(t.parent, Some([0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56]));
    assert_ne!(t.outgoing.parent_id, t.parent.unwrap());
    // The caller's decision, not the ratio.
    assert!(t.outgoing.sampled());
    assert_eq!(t.tracestate.as_deref(), Some(&b"foo=1,bar=2"[..]));
    let sent = t.traceparent();
    let sent = std::str::from_utf8(&sent).unwrap();
    assert!(sent.starts_with("00-12345678901234567890123456789012-"), "{sent}");
    assert!(sent.ends_with("-01"), "{sent}");
    // The upstream's parent is the first attempt's client span, under the request's own.
    let mut first = [0u8; 16];
    hex_into(&t.attempt_span(0), &mut first);
    assert_eq!(&sent.as_bytes()[36..52], &first);
    assert_ne!(t.attempt_span(0), t.outgoing.parent_id);
    assert_ne!(t.attempt_span(0), t.attempt_span(1));
    t.attempt_begins(1);
    assert_eq!(&t.traceparent()[36..52], &{
        let mut second = [0u8; 16];
        hex_into(&t.attempt_span(1), &mut second);
        second
    });
}

#[test]
fn without_a_valid_traceparent_a_new_trace_begins_and_tracestate_is_dropped() {
    for fields in [
        &[("tracestate", "foo=1")][..],
        &[
            ("traceparent", "00-00000000000000000000000000000000-1234567890123456-01"),
            ("tracestate", "foo=1"),
        ],
    ] {
        let t = RequestTrace::of(
            &head(fields),
            &TraceSettings {
                sampling: 1.0,
                ..Default::default()
            },
            counter(),
        );
        assert_ne!(t.outgoing.trace_id, [0; 16]);
        assert_eq!(t.parent, None);
        assert_eq!(t.tracestate, None);
        assert!(t.outgoing.sampled(), "ratio 1 samples every new trace");
        assert!(parse_traceparent(std::iter::once(&t.traceparent()[..])).is_some());
    }
    let never = RequestTrace::of(
        &head(&[]),
        &TraceSettings {
            sampling: 0.0,
            ..Default::default()
        },
        counter(),
    );
    assert!(!never.outgoing.sampled());
}

#[test]
fn a_ratio_samples_about_that_share_of_new_traces() {
    let mut random = counter();
    let settings = TraceSettings {
        sampling: 0.25,
        ..Default::default()
    };
    let h = head(&[]);
    let sampled = (0..4000)
        .filter(|_| RequestTrace::of(&h, &settings, &mut random).outgoing.sampled())
        .count();
    assert!((850..1150).contains(&sampled), "{sampled} of 4000");
}
