use super::*;

fn pattern(s: &str) -> ContentTypePattern {
    ContentTypePattern::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn tokens_round_trip_and_x_gzip_is_gzip() {
    for algorithm in Algorithm::ALL {
        assert_eq!(Algorithm::from_token(algorithm.token().as_bytes()), Some(algorithm));
        assert_eq!(algorithm.to_string(), algorithm.token());
    }
    assert_eq!(Algorithm::from_token(b"X-GZIP"), Some(Algorithm::Gzip));
    assert_eq!(Algorithm::from_token(b"Br"), Some(Algorithm::Brotli));
    assert_eq!(Algorithm::from_token(b"ZSTD"), Some(Algorithm::Zstd));
    for other in [&b"deflate"[..], b"identity", b"*", b"", b"gzip ", b"brotli", b"x-zstd"] {
        assert_eq!(
            Algorithm::from_token(other),
            None,
            "{:?}",
            String::from_utf8_lossy(other)
        );
    }
}

#[test]
fn default_tunings_are_within_their_ranges() {
    let settings = CompressSettings::default();
    for algorithm in Algorithm::ALL {
        let tuning = settings.tuning(algorithm);
        assert_eq!(tuning, algorithm.default_tuning());
        assert!(algorithm.levels().contains(&tuning.level), "{algorithm} level");
        assert!(
            algorithm.window_logs().contains(&tuning.window_log),
            "{algorithm} window"
        );
    }
    assert_eq!(
        settings.algorithms,
        [Algorithm::Zstd, Algorithm::Gzip, Algorithm::Brotli]
    );
    assert_eq!(settings.min_length, 1024);
}

#[test]
fn every_default_content_type_parses() {
    let settings = CompressSettings::default();
    assert_eq!(settings.content_types.len(), CONTENT_TYPES.len());
    for (parsed, source) in settings.content_types.iter().zip(CONTENT_TYPES) {
        assert_eq!(parsed.to_string(), *source);
    }
}

#[test]
fn default_content_types() {
    let settings = CompressSettings::default();
    for yes in [
        "text/html",
        "text/html; charset=utf-8",
        "Text/HTML;charset=UTF-8",
        "  text/css  ",
        "text/plain",
        "text/xml",
        "text/javascript",
        "text/csv",
        "application/javascript",
        "application/x-javascript",
        "application/json",
        "application/json;charset=utf-8",
        "application/xml",
        "application/wasm",
        "image/svg+xml",
        "application/rss+xml",
        "application/atom+xml",
        "application/ld+json",
        "application/manifest+json",
        "application/vnd.api+json",
        "application/problem+json",
        "application/xhtml+xml",
        "APPLICATION/VND.GITHUB.V3+JSON",
        "font/ttf",
        "font/otf",
    ] {
        assert!(settings.compresses_type(yes.as_bytes()), "{yes} should be compressed");
    }
    for no in [
        "",
        ";charset=utf-8",
        "text",
        "text/event-stream",
        "image/png",
        "image/jpeg",
        "image/webp",
        "video/mp4",
        "application/octet-stream",
        "application/zip",
        "application/gzip",
        "application/pdf",
        "font/woff",
        "font/woff2",
        "application/+json",
        "application/jsonx",
        "xtext/html",
        "text/htmlx",
        "application/json+zip",
    ] {
        assert!(
            !settings.compresses_type(no.as_bytes()),
            "{no} should not be compressed"
        );
    }
}

#[test]
fn wildcards() {
    let text = pattern("text/*");
    assert_eq!(text, ContentTypePattern::AnySubtype("text/".into()));
    assert!(text.matches(b"text/html"));
    assert!(text.matches(b"TEXT/anything"));
    assert!(!text.matches(b"text/"));
    assert!(!text.matches(b"texts/html"));
    assert!(!text.matches(b"application/text"));

    let json = pattern("Application/*+JSON");
    assert_eq!(json, ContentTypePattern::Suffix("application/".into(), "+json".into()));
    assert!(json.matches(b"application/ld+json"));
    assert!(json.matches(b"application/a+b+json"));
    assert!(!json.matches(b"application/json"));
    assert!(!json.matches(b"application/+json"));
    assert!(!json.matches(b"text/ld+json"));
    assert!(!json.matches(b"application/ld+jsonx"));

    let any = pattern("*/*");
    assert_eq!(any, ContentTypePattern::Any);
    assert!(any.matches(b"image/png"));
    assert!(!any.matches(b"nonsense"));

    assert_eq!(pattern(" TEXT/Html "), ContentTypePattern::Exact("text/html".into()));
}

#[test]
fn bad_patterns_are_refused() {
    for bad in [
        "",
        "text",
        "/html",
        "text/",
        "*/html",
        "*",
        "te*t/html",
        "text/ht*ml",
        "text/*+",
        "text/*+*",
        "text/html; charset=utf-8",
        "text/html/x",
        "text /html",
        "application/*json",
        "application/**",
    ] {
        let error = ContentTypePattern::parse(bad).expect_err(bad);
        assert!(error.to_string().contains(&format!("`{bad}`")), "{error}");
    }
}

#[test]
fn essence_strips_parameters_and_whitespace() {
    assert_eq!(media_type_essence(b" text/html ; charset=utf-8"), b"text/html");
    assert_eq!(media_type_essence(b"text/html"), b"text/html");
    assert_eq!(media_type_essence(b"\ttext/html\t"), b"text/html");
    assert_eq!(media_type_essence(b";x"), b"");
    assert_eq!(media_type_essence(b""), b"");
}
