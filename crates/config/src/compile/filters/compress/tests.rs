use rampart_model::filter::compress::{Algorithm, CompressSettings, ContentTypePattern, Tuning};
use rampart_model::filter::Filter;
use rampart_model::ListenerProtocol;

use crate::compile::{compile_toml, LiveState};

/// A config whose only route has `filters = [FILTER]` on line 7.
fn config(filter: &str) -> String {
    format!(
        "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
         [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{filter}]\n\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n"
    )
}

fn compile(filter: &str) -> Result<CompressSettings, Vec<String>> {
    let compiled = compile_toml("gw.toml", &config(filter), &mut LiveState::default())
        .map_err(|e| e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
    let ListenerProtocol::Http(http) = &compiled.snapshot.listeners[0].protocol else {
        panic!("an HTTP listener")
    };
    match &http.routes[0].filters.filters[0].filter {
        Filter::Compress(settings) => Ok(settings.clone()),
        other => panic!("a compress filter, not {}", other.type_name()),
    }
}

/// The one error `filter` gives, which must be at the first occurrence of `at` on line 7.
fn error_at(filter: &str, at: &str) -> String {
    let errors = compile(filter).expect_err("an error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let line = format!("filters = [{filter}]");
    let column = line.find(at).unwrap_or_else(|| panic!("{at} in {line}")) + 1;
    let place = format!("gw.toml:7:{column}: ");
    let message = errors[0]
        .strip_prefix(&place)
        .unwrap_or_else(|| panic!("{:?} is not at {place}", errors[0]));
    message.to_string()
}

#[test]
fn no_keys_means_the_model_defaults() {
    let settings = compile(r#"{ type = "compress" }"#).unwrap();
    assert_eq!(settings, CompressSettings::default());
    assert_eq!(
        settings.algorithms,
        [Algorithm::Zstd, Algorithm::Gzip, Algorithm::Brotli]
    );
}

#[test]
fn every_key_is_read() {
    let settings = compile(
        r#"{ type = "compress", algorithms = ["br", "gzip"], min_length = "2KiB", content_types = ["text/*", "application/*+json", "Application/JSON"], gzip_level = 9, brotli_level = 5, gzip_window = "8KiB", brotli_window = 1048576 }"#,
    )
    .unwrap();
    assert_eq!(settings.algorithms, [Algorithm::Brotli, Algorithm::Gzip]);
    assert_eq!(settings.min_length, 2048);
    assert_eq!(
        settings.content_types,
        [
            ContentTypePattern::AnySubtype("text/".into()),
            ContentTypePattern::Suffix("application/".into(), "+json".into()),
            ContentTypePattern::Exact("application/json".into()),
        ]
    );
    assert_eq!(
        settings.gzip,
        Tuning {
            level: 9,
            window_log: 13
        }
    );
    assert_eq!(
        settings.brotli,
        Tuning {
            level: 5,
            window_log: 20
        }
    );
    // zstd is not offered; its tuning stays the default.
    assert_eq!(settings.zstd, Algorithm::Zstd.default_tuning());
    // A single string is a list of one; levels at both ends of their ranges.
    let settings = compile(r#"{ type = "compress", algorithms = "zstd", zstd_level = -7, min_length = 0 }"#).unwrap();
    assert_eq!(settings.algorithms, [Algorithm::Zstd]);
    assert_eq!((settings.zstd.level, settings.min_length), (-7, 0));
    let settings = compile(r#"{ type = "compress", zstd_level = 8, brotli_level = 0, gzip_level = 1 }"#).unwrap();
    assert_eq!(
        (settings.zstd.level, settings.brotli.level, settings.gzip.level),
        (8, 0, 1)
    );
}

#[test]
fn errors_point_at_the_value() {
    let cases = [
        (
            r#"{ type = "compress", algorithms = ["gzip", "lz4"] }"#,
            "[\"gzip\"",
            "`lz4` is not a coding Rampart produces (known: \"zstd\", \"br\", \"gzip\")",
        ),
        (
            r#"{ type = "compress", algorithms = ["brotli"] }"#,
            "[\"brotli\"",
            "`brotli` is not a coding Rampart produces",
        ),
        (
            r#"{ type = "compress", algorithms = ["gzip", "br", "gzip"] }"#,
            "[\"gzip\"",
            "`algorithms` lists \"gzip\" twice",
        ),
        (
            r#"{ type = "compress", algorithms = [] }"#,
            "[]",
            "`algorithms` needs at least one of",
        ),
        (
            r#"{ type = "compress", algorithms = [1] }"#,
            "[1]",
            "`algorithms` is a list of strings",
        ),
        (
            r#"{ type = "compress", content_types = ["text/html", "html"] }"#,
            "[\"text/html\"",
            "`html` is not a content type pattern",
        ),
        (
            r#"{ type = "compress", content_types = ["text/html; charset=utf-8"] }"#,
            "[\"text/html;",
            "`text/html; charset=utf-8` is not a content type pattern",
        ),
        (
            r#"{ type = "compress", content_types = [] }"#,
            "[]",
            "`content_types` needs at least one pattern",
        ),
        (
            r#"{ type = "compress", min_length = "big" }"#,
            "\"big\"",
            "`big` is not a size",
        ),
        (
            r#"{ type = "compress", gzip_level = 0 }"#,
            "0 }",
            "`gzip_level` = 0 is out of range (1 to 9)",
        ),
        (
            r#"{ type = "compress", brotli_level = 11 }"#,
            "11",
            "`brotli_level` = 11 is out of range (0 to 6; higher levels hold tens of MiB",
        ),
        (
            r#"{ type = "compress", zstd_level = 19 }"#,
            "19",
            "`zstd_level` = 19 is out of range (-7 to 8;",
        ),
        (
            r#"{ type = "compress", zstd_level = "3" }"#,
            "\"3\"",
            "`zstd_level` is a whole number",
        ),
        (
            r#"{ type = "compress", zstd_window = "3MiB" }"#,
            "\"3MiB\"",
            "`zstd_window` is a power of two from 1KiB to 8MiB",
        ),
        (
            r#"{ type = "compress", gzip_window = "64KiB" }"#,
            "\"64KiB\"",
            "`gzip_window` is a power of two from 512B to 32KiB",
        ),
        (
            r#"{ type = "compress", brotli_window = 0 }"#,
            "0 }",
            "`brotli_window` is a power of two from 1KiB to 16MiB",
        ),
        (
            r#"{ type = "compress", algorithms = ["gzip"], brotli_level = 5 }"#,
            "5 }",
            "`brotli_level` is set, but `algorithms` does not list \"br\"",
        ),
        (
            r#"{ type = "compress", algorithms = ["gzip"], zstd_window = "1MiB" }"#,
            "\"1MiB\"",
            "`zstd_window` is set, but `algorithms` does not list \"zstd\"",
        ),
        (
            r#"{ type = "compress", level = 5 }"#,
            "level",
            "`level` is not a key of a `compress` filter",
        ),
    ];
    let mut wrong = Vec::new();
    for (filter, at, want) in cases {
        let got = std::panic::catch_unwind(|| error_at(filter, at));
        match got {
            Ok(message) if message.starts_with(want) => {}
            Ok(message) => wrong.push(format!("{filter}: {message:?}, want {want:?}")),
            Err(_) => wrong.push(format!("{filter}: {:?}", compile(filter).err())),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_type_is_listed_among_the_builtins() {
    let errors = compile(r#"{ type = "gzipper" }"#).unwrap_err();
    assert!(errors[0].contains("cors, compress, rewrite"), "{errors:?}");
    let errors = compile(r#"{ type = "compres" }"#).unwrap_err();
    assert!(errors[0].contains("(did you mean `compress`?)"), "{errors:?}");
}
