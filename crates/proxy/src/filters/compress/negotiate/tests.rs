use super::*;
use Algorithm::{Brotli, Gzip, Zstd};

/// A server preference for these tests (not the default one).
const PREFERENCE: &[Algorithm] = &[Zstd, Brotli, Gzip];

fn choose(value: &str) -> Option<Algorithm> {
    negotiate([value.as_bytes()], PREFERENCE)
}

fn weights(value: &str) -> [Weight; 3] {
    let accept = AcceptEncoding::parse([value.as_bytes()]);
    [accept.weight(Zstd), accept.weight(Brotli), accept.weight(Gzip)]
}

#[test]
fn browsers() {
    // Chrome 123+, Firefox 126+: every coding at q=1, so the server's order decides.
    assert_eq!(choose("gzip, deflate, br, zstd"), Some(Zstd));
    // Safari.
    assert_eq!(choose("gzip, deflate, br"), Some(Brotli));
    // curl --compressed built with zlib only.
    assert_eq!(choose("deflate, gzip"), Some(Gzip));
    assert_eq!(
        negotiate([&b"gzip, deflate, br, zstd"[..]], &[Gzip, Brotli]),
        Some(Gzip)
    );
    assert_eq!(
        negotiate([&b"gzip, deflate, br, zstd"[..]], &[Brotli, Zstd, Gzip]),
        Some(Brotli)
    );
}

#[test]
fn the_highest_weight_wins_over_the_server_order() {
    assert_eq!(choose("zstd;q=0.5, br;q=0.9, gzip"), Some(Gzip));
    assert_eq!(choose("zstd;q=0.5, br;q=0.9, gzip;q=0.8"), Some(Brotli));
    assert_eq!(choose("zstd;q=0.001, gzip;q=0"), Some(Zstd));
    // Equal weights: the server's order.
    assert_eq!(choose("gzip;q=0.5, br;q=0.5"), Some(Brotli));
    assert_eq!(choose("gzip;q=0.5, br;q=0.500, zstd;q=0.50"), Some(Zstd));
}

#[test]
fn nothing_acceptable() {
    assert_eq!(choose(""), None);
    assert_eq!(choose("identity"), None);
    assert_eq!(choose("deflate, compress, identity;q=1"), None);
    assert_eq!(choose("gzip;q=0, br;q=0.000, zstd;q=0."), None);
    assert_eq!(choose("*;q=0"), None);
    assert_eq!(choose(" , ,, "), None);
    assert_eq!(negotiate(std::iter::empty(), PREFERENCE), None);
    assert_eq!(negotiate([&b"gzip"[..]], &[]), None);
    assert_eq!(negotiate([&b"gzip"[..]], &[Zstd, Brotli]), None);
}

#[test]
fn star_covers_what_is_not_named() {
    assert_eq!(choose("*"), Some(Zstd));
    assert_eq!(weights("*;q=0.3"), [300, 300, 300]);
    assert_eq!(weights("zstd;q=0, *"), [0, 1000, 1000]);
    assert_eq!(choose("zstd;q=0, *"), Some(Brotli));
    assert_eq!(choose("*, zstd;q=0, br;q=0"), Some(Gzip));
    // A named coding keeps its own weight, above or below that of `*`, in either order.
    assert_eq!(weights("gzip;q=0.9, *;q=0.1"), [100, 100, 900]);
    assert_eq!(choose("*;q=0.1, gzip;q=0.9"), Some(Gzip));
    assert_eq!(weights("*;q=0.8, br;q=0.2"), [800, 200, 800]);
    // Nothing but the named codings.
    assert_eq!(choose("br, *;q=0"), Some(Brotli));
}

#[test]
fn x_gzip_is_gzip() {
    assert_eq!(choose("x-gzip"), Some(Gzip));
    assert_eq!(weights("x-gzip;q=0.4"), [0, 0, 400]);
    // Named twice, through its alias too: the lowest weight.
    assert_eq!(weights("gzip, x-gzip;q=0"), [0, 0, 0]);
}

#[test]
fn case_and_whitespace_are_tolerated() {
    assert_eq!(weights("GZIP ; Q = 0.5 ,\tBr;q=0.25,ZsTd"), [1000, 250, 500]);
    assert_eq!(weights("  gzip  "), [0, 0, 1000]);
    assert_eq!(weights("gzip;q=0.5;Q=0.7"), [0, 0, 500]);
}

#[test]
fn malformed_weights_make_their_coding_not_acceptable() {
    for bad in [
        "gzip;q=",
        "gzip;q",
        "gzip;q=1.5",
        "gzip;q=2",
        "gzip;q=-0",
        "gzip;q=0.1234",
        "gzip;q=.5",
        "gzip;q=1.001",
        "gzip;q=abc",
        "gzip;q=\"0.5\"",
        "gzip;q=0,5",
        "gzip;q=0.5x",
        "gzip;q=+1",
        "gzip;q=1e0",
        "gzip;q=0x1",
        "gzip;q=0.5 0",
    ] {
        assert_eq!(weights(&format!("{bad}, br;q=0.1")), [0, 100, 0], "{bad}");
    }
    // `gzip;q=0,5` is two elements: `gzip;q=0` and `5`.
    assert_eq!(choose("gzip;q=0,5"), None);
}

#[test]
fn other_parameters_are_ignored() {
    assert_eq!(weights("gzip;level=1;q=0.6"), [0, 0, 600]);
    assert_eq!(weights(r#"gzip;x="a,b;q=0";q=0.7"#), [0, 0, 700]);
    assert_eq!(weights("br;foo"), [0, 1000, 0]);
}

#[test]
fn elements_without_a_token_are_skipped() {
    assert_eq!(weights(";q=0.5, gzip"), [0, 0, 1000]);
    assert_eq!(weights("=, gzip"), [0, 0, 1000]);
}

#[test]
fn weights_parse() {
    for (text, weight) in [
        ("0", 0),
        ("0.", 0),
        ("0.0", 0),
        ("0.000", 0),
        ("0.001", 1),
        ("0.01", 10),
        ("0.1", 100),
        ("0.5", 500),
        ("0.999", 999),
        ("0.123", 123),
        ("1", 1000),
        ("1.", 1000),
        ("1.0", 1000),
        ("1.000", 1000),
    ] {
        assert_eq!(parse_weight(text.as_bytes()), Some(weight), "{text}");
    }
    for text in [
        "", ".", "1.1", "1.0000", "0.0000", "01", "00", "2", "-1", " 1", "1 ", "0.a", "a",
    ] {
        assert_eq!(parse_weight(text.as_bytes()), None, "{text}");
    }
}

#[test]
fn several_fields_combine() {
    let fields: [&[u8]; 3] = [b"gzip;q=0.2", b"", b"br;q=0.1, zstd;q=0"];
    let accept = AcceptEncoding::parse(fields);
    assert_eq!(
        [accept.weight(Zstd), accept.weight(Brotli), accept.weight(Gzip)],
        [0, 100, 200]
    );
    assert_eq!(accept.choose(PREFERENCE), Some(Gzip));

    let mut incremental = AcceptEncoding::default();
    for field in fields {
        incremental.add_field(field);
    }
    assert_eq!(incremental, accept);

    // A refusal in a later field stands.
    assert_eq!(negotiate([&b"zstd"[..], b"zstd;q=0"], PREFERENCE), None);
}

#[test]
fn a_hostile_header_keeps_its_meaning() {
    // 100k elements and parameters (one pass over them, by construction): the result is exact.
    let mut value = String::new();
    for i in 0..50_000 {
        value.push_str(if i % 2 == 0 {
            "deflate;q=0.5;a=\"x,y;z\","
        } else {
            "identity;;;=;q,"
        });
    }
    value.push_str("br;q=0.3");
    let many_quotes = "\"".repeat(100_000) + ", gzip";
    assert_eq!(choose(&value), Some(Brotli));
    // Quotes open and close: the last `, gzip` is outside them.
    assert_eq!(choose(&many_quotes), Some(Gzip));
    // An unterminated quote swallows the rest.
    assert_eq!(choose(&format!("x;a=\"{}, gzip", "y".repeat(100_000))), None);
}

/// Random headers from Accept-Encoding's own vocabulary (well-formed elements with random noise
/// mixed in): never a panic, the same weights as a naive reference parser where no quotes are
/// involved, and `choose` picks the best of them.
#[test]
fn random_headers_agree_with_a_naive_reference() {
    const TOKENS: &[&str] = &[
        "gzip", "GZIP", "x-gzip", "br", "Br", "zstd", "*", "identity", "deflate", "", "abc",
    ];
    const QS: &[&str] = &[
        "0", "1", "0.5", "0.25", "0.001", "1.0", "1.000", "0.", "1.5", ".5", "0.1234", "2", "", "x",
    ];
    const NOISE: &[&str] = &[";", ",", "=", " ", "\t", "q", "\"", "\\", "a=b", "q=0.5", ";q=1"];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut fractional, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let mut header = String::new();
        for _ in 0..next(5) {
            header.push_str([" ", "", "\t"][next(3)]);
            header.push_str(TOKENS[next(TOKENS.len())]);
            for _ in 0..next(3) {
                header.push_str([";", " ; ", ";\t"][next(3)]);
                header.push_str(["q", "Q", "level", "q "][next(4)]);
                header.push_str(["=", " = ", ""][next(3)]);
                header.push_str(QS[next(QS.len())]);
            }
            if next(4) == 0 {
                header.push_str(NOISE[next(NOISE.len())]);
            }
            header.push_str([",", ", ", " ,"][next(3)]);
        }
        let accept = AcceptEncoding::parse([header.as_bytes()]);
        let weights = [accept.weight(Zstd), accept.weight(Brotli), accept.weight(Gzip)];
        if !header.contains('"') {
            assert_eq!(weights, reference_weights(&header), "{header:?}");
        }
        fractional += usize::from(weights.iter().any(|&w| w != 0 && w != FULL_WEIGHT));
        refused += usize::from(weights.contains(&0));
        let chosen = accept.choose(PREFERENCE);
        let best = weights.iter().copied().max().unwrap_or(0);
        match chosen {
            None => assert_eq!(best, 0, "{header:?}"),
            Some(algorithm) => {
                let position = PREFERENCE.iter().position(|&a| a == algorithm).unwrap();
                assert_eq!(accept.weight(algorithm), best, "{header:?}");
                assert!(
                    PREFERENCE[..position].iter().all(|&a| accept.weight(a) < best),
                    "{header:?}"
                );
            }
        }
    }
    // The generator reaches the interesting cases.
    assert!(
        fractional > 1_000 && refused > 1_000,
        "{fractional} fractional, {refused} refused"
    );
}

/// Weights for [zstd, br, gzip] by splitting on `,` and `;` (no quoted strings).
fn reference_weights(header: &str) -> [Weight; 3] {
    let mut named: [Option<Weight>; 3] = [None; 3];
    let mut any: Option<Weight> = None;
    for element in header.split(',') {
        let mut parts = element.split(';');
        let token = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut weight = 1000;
        for parameter in parts {
            let parameter = parameter.trim();
            let q = match parameter.split_once('=') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("q") => reference_q(value.trim()),
                None if parameter.eq_ignore_ascii_case("q") => 0,
                _ => continue,
            };
            weight = weight.min(q);
        }
        let slot = match token.as_str() {
            "zstd" => &mut named[0],
            "br" => &mut named[1],
            "gzip" | "x-gzip" => &mut named[2],
            "*" => &mut any,
            _ => continue,
        };
        *slot = Some(slot.map_or(weight, |w: Weight| w.min(weight)));
    }
    named.map(|w| w.or(any).unwrap_or(0))
}

fn reference_q(value: &str) -> Weight {
    let valid = match value.split_once('.') {
        None => value == "0" || value == "1",
        Some((whole, fraction)) => {
            fraction.len() <= 3
                && fraction.chars().all(|c| c.is_ascii_digit())
                && (whole == "0" || (whole == "1" && fraction.chars().all(|c| c == '0')))
        }
    };
    if !valid {
        return 0;
    }
    let padded = format!("{value}000");
    let (whole, fraction) = padded.split_once('.').unwrap_or((value, "000"));
    let fraction = if value.contains('.') { &fraction[..3] } else { "000" };
    whole.parse::<Weight>().unwrap() * 1000 + fraction.parse::<Weight>().unwrap()
}
