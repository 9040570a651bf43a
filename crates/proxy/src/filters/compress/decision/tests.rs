use super::*;
use rampart_model::filter::compress::ContentTypePattern;
use Algorithm::{Brotli, Gzip, Zstd};

fn settings() -> CompressSettings {
    CompressSettings::default()
}

fn facts<'a>(status: u16, fields: &[(&str, &'a str)]) -> ResponseFacts<'a> {
    let mut facts = ResponseFacts::new(status);
    for (name, value) in fields {
        facts.observe(name.as_bytes(), value.as_bytes());
    }
    facts
}

fn accept(value: &str) -> AcceptEncoding {
    AcceptEncoding::parse([value.as_bytes()])
}

/// The decision for a GET over HTTP/1.1 accepting every coding.
fn decide_for(status: u16, fields: &[(&str, &str)]) -> Decision {
    let settings = settings();
    let offer = offer(&settings, b"GET", Version::HTTP_11, &accept("gzip, deflate, br, zstd"));
    decide(&settings, offer, &facts(status, fields))
}

fn skipped(status: u16, fields: &[(&str, &str)]) -> Skip {
    match decide_for(status, fields) {
        Decision::Skip { reason, vary } => {
            assert_eq!(vary, VaryEdit::Keep, "a response never compressed needs no Vary");
            reason
        }
        other => panic!("expected a skip, got {other:?}"),
    }
}

fn plan(status: u16, fields: &[(&str, &str)]) -> Plan {
    match decide_for(status, fields) {
        Decision::Compress(plan) => plan,
        other => panic!("expected compression, got {other:?}"),
    }
}

const HTML: (&str, &str) = ("content-type", "text/html; charset=utf-8");

#[test]
fn a_plain_html_response_is_compressed() {
    let plan = plan(
        200,
        &[
            HTML,
            ("content-length", "5000"),
            ("etag", "\"abc\""),
            ("accept-ranges", "bytes"),
        ],
    );
    assert_eq!(
        plan,
        Plan {
            algorithm: Zstd,
            size_hint: Some(5000),
            edits: HeaderEdits {
                content_encoding: "zstd",
                vary: VaryEdit::AddAcceptEncoding,
                etag: EtagEdit::Weaken
            },
        }
    );
    assert_eq!(HeaderEdits::REMOVE, ["content-length", "accept-ranges"]);
}

#[test]
fn unknown_length_is_compressed_without_a_hint() {
    let plan = plan(
        200,
        &[("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")],
    );
    assert_eq!(plan.size_hint, None);
    assert_eq!(plan.edits.etag, EtagEdit::Keep);
}

#[test]
fn statuses() {
    for status in [100, 101, 103, 204, 304] {
        assert_eq!(skipped(status, &[HTML]), Skip::NoBody, "{status}");
    }
    assert_eq!(skipped(206, &[HTML, ("content-range", "bytes 0-9/100")]), Skip::Range);
    assert_eq!(skipped(206, &[HTML]), Skip::Range);
    for status in [200, 201, 203, 299, 301, 400, 404, 410, 500, 503] {
        assert_eq!(plan(status, &[HTML]).algorithm, Zstd, "{status}");
    }
}

#[test]
fn content_range_on_any_status_is_left_alone() {
    assert_eq!(skipped(200, &[HTML, ("Content-Range", "bytes 0-9/100")]), Skip::Range);
    assert_eq!(skipped(416, &[HTML, ("content-range", "bytes */100")]), Skip::Range);
}

#[test]
fn encoded_responses_are_left_alone() {
    for coding in ["gzip", "br", "zstd", "deflate", "x-custom", "identity, gzip", "GZIP"] {
        assert_eq!(
            skipped(200, &[HTML, ("content-encoding", coding)]),
            Skip::AlreadyEncoded,
            "{coding}"
        );
    }
    // identity (or nothing) is no encoding.
    for coding in ["identity", "Identity", "", " ", "identity, identity"] {
        let plan = plan(200, &[HTML, ("content-encoding", coding)]);
        assert_eq!(plan.edits.content_encoding, "zstd", "{coding:?}");
    }
    // A second field counts too.
    assert_eq!(
        skipped(
            200,
            &[("content-encoding", "identity"), HTML, ("Content-Encoding", "br")]
        ),
        Skip::AlreadyEncoded
    );
}

#[test]
fn no_transform() {
    for value in [
        "no-transform",
        "public, No-Transform",
        "max-age=60,no-transform",
        "NO-TRANSFORM",
    ] {
        assert_eq!(
            skipped(200, &[HTML, ("cache-control", value)]),
            Skip::NoTransform,
            "{value}"
        );
    }
    assert_eq!(
        skipped(
            200,
            &[HTML, ("cache-control", "public"), ("cache-control", "no-transform")]
        ),
        Skip::NoTransform
    );
    for value in [
        "public, max-age=60",
        "no-transformer",
        r#"private="no-transform""#,
        "no-cache, no-store",
    ] {
        assert_eq!(plan(200, &[HTML, ("cache-control", value)]).algorithm, Zstd, "{value}");
    }
}

#[test]
fn digests() {
    for name in ["content-digest", "Repr-Digest", "digest", "Content-MD5"] {
        assert_eq!(skipped(200, &[HTML, (name, "sha-256=:AAAA:")]), Skip::Digest, "{name}");
    }
    assert_eq!(plan(200, &[HTML, ("want-digest", "sha-256")]).algorithm, Zstd);
}

#[test]
fn content_types() {
    assert_eq!(skipped(200, &[]), Skip::ContentType);
    assert_eq!(skipped(200, &[("content-type", "image/png")]), Skip::ContentType);
    assert_eq!(skipped(200, &[("content-type", "")]), Skip::ContentType);
    assert_eq!(
        skipped(200, &[("content-type", "text/event-stream")]),
        Skip::ContentType
    );
    // Two content types: which one holds is unclear.
    assert_eq!(skipped(200, &[HTML, ("content-type", "text/html")]), Skip::ContentType);
    assert_eq!(
        plan(200, &[("CONTENT-TYPE", "Application/Problem+JSON")]).algorithm,
        Zstd
    );

    let mut only_text = settings();
    only_text.content_types = vec![ContentTypePattern::parse("text/*").unwrap()];
    let offer = Ok(Gzip);
    assert!(matches!(
        decide(&only_text, offer, &facts(200, &[("content-type", "text/event-stream")])),
        Decision::Compress(Plan { algorithm: Gzip, .. })
    ));
    assert_eq!(
        decide(&only_text, offer, &facts(200, &[("content-type", "application/json")])),
        Decision::Skip {
            reason: Skip::ContentType,
            vary: VaryEdit::Keep
        }
    );
}

#[test]
fn minimum_length() {
    assert_eq!(skipped(200, &[HTML, ("content-length", "1023")]), Skip::TooSmall);
    assert_eq!(skipped(200, &[HTML, ("content-length", "0")]), Skip::TooSmall);
    assert_eq!(plan(200, &[HTML, ("content-length", "1024")]).size_hint, Some(1024));
    assert_eq!(
        plan(200, &[HTML, ("content-length", "1024, 1024")]).size_hint,
        Some(1024)
    );
    assert_eq!(
        plan(200, &[HTML, ("content-length", "1024"), ("content-length", "1024")]).size_hint,
        Some(1024)
    );
    assert_eq!(
        plan(200, &[HTML, ("content-length", "18446744073709551615")]).size_hint,
        Some(u64::MAX)
    );
    // An unclear length is an unknown one: compressed, no hint.
    for unclear in ["12, 13", "abc", "", "-1", "18446744073709551616", "1 2"] {
        assert_eq!(
            plan(200, &[HTML, ("content-length", unclear)]).size_hint,
            None,
            "{unclear:?}"
        );
    }
    assert_eq!(
        plan(200, &[HTML, ("content-length", "12"), ("content-length", "13")]).size_hint,
        None
    );
    assert_eq!(
        plan(200, &[HTML, ("content-length", "x"), ("content-length", "13")]).size_hint,
        None
    );

    let mut no_minimum = settings();
    no_minimum.min_length = 0;
    assert!(matches!(
        decide(&no_minimum, Ok(Brotli), &facts(200, &[HTML, ("content-length", "0")])),
        Decision::Compress(Plan {
            algorithm: Brotli,
            size_hint: Some(0),
            ..
        })
    ));
}

#[test]
fn etags() {
    let etag = |value: &str| plan(200, &[HTML, ("ETag", value)]).edits.etag;
    assert_eq!(etag("\"v1\""), EtagEdit::Weaken);
    assert_eq!(etag(" \"\" "), EtagEdit::Weaken);
    assert_eq!(etag("W/\"v1\""), EtagEdit::Keep);
    assert_eq!(etag("v1"), EtagEdit::Remove);
    assert_eq!(etag("\""), EtagEdit::Remove);
    assert_eq!(etag("w/\"v1\""), EtagEdit::Remove);
    assert_eq!(plan(200, &[HTML]).edits.etag, EtagEdit::Keep);
    assert_eq!(
        plan(200, &[HTML, ("etag", "\"a\""), ("etag", "W/\"b\"")]).edits.etag,
        EtagEdit::Remove
    );

    assert_eq!(weakened_etag(b"\"v1\""), b"W/\"v1\"");
    assert_eq!(weakened_etag(b" \"v1\" "), b"W/\"v1\"");
}

#[test]
fn vary() {
    let vary = |fields: &[(&str, &str)]| {
        let mut all = vec![HTML];
        all.extend_from_slice(fields);
        plan(200, &all).edits.vary
    };
    assert_eq!(vary(&[]), VaryEdit::AddAcceptEncoding);
    assert_eq!(vary(&[("vary", "origin")]), VaryEdit::AddAcceptEncoding);
    assert_eq!(vary(&[("vary", "")]), VaryEdit::AddAcceptEncoding);
    assert_eq!(vary(&[("vary", "accept-encoding-x")]), VaryEdit::AddAcceptEncoding);
    assert_eq!(vary(&[("vary", "Accept-Encoding")]), VaryEdit::Keep);
    assert_eq!(vary(&[("vary", "origin, ACCEPT-ENCODING")]), VaryEdit::Keep);
    assert_eq!(vary(&[("vary", "origin"), ("Vary", "accept-encoding")]), VaryEdit::Keep);
    assert_eq!(vary(&[("vary", "*")]), VaryEdit::Keep);
    assert_eq!(vary(&[("vary", "origin, *")]), VaryEdit::Keep);
    assert_eq!(vary(&[("vary", "*"), ("vary", "accept-encoding")]), VaryEdit::Keep);

    assert_eq!(vary_with_accept_encoding(None), b"accept-encoding");
    assert_eq!(vary_with_accept_encoding(Some(b"")), b"accept-encoding");
    assert_eq!(
        vary_with_accept_encoding(Some(b" Origin, Cookie ")),
        b"Origin, Cookie, accept-encoding"
    );
}

#[test]
fn request_side() {
    let settings = settings();
    let all = accept("gzip, br, zstd");
    assert_eq!(offer(&settings, b"GET", Version::HTTP_11, &all), Ok(Zstd));
    assert_eq!(offer(&settings, b"POST", Version::HTTP_2, &all), Ok(Zstd));
    assert_eq!(offer(&settings, b"GET", Version::HTTP_3, &all), Ok(Zstd));
    assert_eq!(offer(&settings, b"HEAD", Version::HTTP_11, &all), Err(Skip::Method));
    assert_eq!(offer(&settings, b"CONNECT", Version::HTTP_2, &all), Err(Skip::Method));
    assert_eq!(offer(&settings, b"GET", Version::HTTP_10, &all), Err(Skip::HttpVersion));
    assert_eq!(offer(&settings, b"GET", Version::HTTP_09, &all), Err(Skip::HttpVersion));
    assert_eq!(
        offer(&settings, b"GET", Version::HTTP_11, &AcceptEncoding::default()),
        Err(Skip::NotAccepted)
    );
    assert_eq!(
        offer(&settings, b"GET", Version::HTTP_11, &accept("deflate")),
        Err(Skip::NotAccepted)
    );

    let mut gzip_only = settings.clone();
    gzip_only.algorithms = vec![Gzip];
    assert_eq!(offer(&gzip_only, b"GET", Version::HTTP_11, &all), Ok(Gzip));
    assert_eq!(
        offer(&gzip_only, b"GET", Version::HTTP_11, &accept("br, zstd")),
        Err(Skip::NotAccepted)
    );
}

#[test]
fn a_request_that_gets_no_compression_still_gets_vary_when_another_would() {
    let settings = settings();
    let response = facts(200, &[HTML, ("content-length", "4096")]);
    for offer in [Err(Skip::NotAccepted), Err(Skip::HttpVersion), Err(Skip::Method)] {
        let reason = offer.unwrap_err();
        assert_eq!(
            decide(&settings, offer, &response),
            Decision::Skip {
                reason,
                vary: VaryEdit::AddAcceptEncoding
            }
        );
    }
    let varied = facts(200, &[HTML, ("vary", "accept-encoding")]);
    assert_eq!(
        decide(&settings, Err(Skip::NotAccepted), &varied),
        Decision::Skip {
            reason: Skip::NotAccepted,
            vary: VaryEdit::Keep
        }
    );
    // A response that no request gets compressed: its own reason, no Vary.
    let image = facts(200, &[("content-type", "image/png")]);
    assert_eq!(
        decide(&settings, Err(Skip::NotAccepted), &image),
        Decision::Skip {
            reason: Skip::ContentType,
            vary: VaryEdit::Keep
        }
    );
}

#[test]
fn browsers_with_the_default_order() {
    let settings = settings();
    let chrome = accept("gzip, deflate, br, zstd");
    let safari = accept("gzip, deflate, br");
    assert_eq!(offer(&settings, b"GET", Version::HTTP_2, &chrome), Ok(Zstd));
    assert_eq!(offer(&settings, b"GET", Version::HTTP_2, &safari), Ok(Gzip));
    assert_eq!(offer(&settings, b"GET", Version::HTTP_2, &accept("br")), Ok(Brotli));
}

#[test]
fn the_offer_names_the_coding() {
    let settings = settings();
    let response = facts(200, &[HTML]);
    for (value, algorithm) in [
        ("gzip", Gzip),
        ("x-gzip", Gzip),
        ("br", Brotli),
        ("zstd;q=1, br;q=0.9", Zstd),
    ] {
        let offer = offer(&settings, b"GET", Version::HTTP_2, &accept(value));
        let Decision::Compress(plan) = decide(&settings, offer, &response) else {
            panic!("{value}")
        };
        assert_eq!(plan.algorithm, algorithm, "{value}");
        assert_eq!(plan.edits.content_encoding, algorithm.token(), "{value}");
    }
}

#[test]
fn other_fields_are_ignored() {
    let mut facts = ResponseFacts::new(200);
    facts.observe(b"content-type", b"text/plain");
    let before = facts;
    for (name, value) in [
        ("server", "x"),
        ("content-types", "image/png"),
        ("x-content-encoding", "gzip"),
        ("", ""),
    ] {
        facts.observe(name.as_bytes(), value.as_bytes());
    }
    assert_eq!(facts, before);
    assert_eq!(facts.content_length(), None);
}

#[test]
fn random_fields_never_panic() {
    const NAMES: &[&str] = &[
        "content-type",
        "content-length",
        "content-encoding",
        "cache-control",
        "etag",
        "vary",
        "content-range",
        "x",
    ];
    const VALUES: &[&str] = &[
        "",
        " ",
        ",",
        ";",
        "\"",
        "\\",
        "=",
        "*",
        "W/",
        "identity",
        "gzip",
        "no-transform",
        "9",
        "text/html",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let settings = settings();
    let mut values = Vec::new();
    for _ in 0..200 {
        let value: String = (0..next(8)).map(|_| VALUES[next(VALUES.len())]).collect();
        values.push((NAMES[next(NAMES.len())], value));
    }
    for round in 0..2_000 {
        let mut facts = ResponseFacts::new([200, 206, 304, 404, 101][round % 5]);
        for _ in 0..next(6) {
            let (name, value) = &values[next(values.len())];
            facts.observe(name.as_bytes(), value.as_bytes());
        }
        // Whatever the fields, a decision comes out and a compressed one names its coding.
        if let Decision::Compress(plan) = decide(&settings, Ok(Gzip), &facts) {
            assert_eq!(plan.edits.content_encoding, "gzip");
        }
    }
}
