use rampart_model::{Http2Settings, ListenerProtocol, UpstreamProtocol};

use crate::compile::{compile_toml, LiveState};

fn listener(extra_listener: &str, extra_upstream: &str) -> String {
    format!(
        "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n{extra_listener}\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n{extra_upstream}\n"
    )
}

fn errors(src: &str) -> Vec<String> {
    match compile_toml("test.toml", src, &mut LiveState::default()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

fn http2_of(src: &str) -> Option<Http2Settings> {
    let compiled = compile_toml("test.toml", src, &mut LiveState::default()).unwrap();
    match &compiled.snapshot.listeners[0].protocol {
        ListenerProtocol::Http(h) => h.http2,
        _ => panic!("an HTTP listener"),
    }
}

#[test]
fn http2_is_on_by_default_and_its_limits_are_read() {
    assert_eq!(http2_of(&listener("", "")), Some(Http2Settings::default()));
    assert_eq!(http2_of(&listener("http2 = false", "")), None);
    let tuned = http2_of(&listener(
        "http2_max_concurrent_streams = 250\nhttp2_max_header_list_size = \"32KiB\"\n\
         http2_stream_window = \"8MiB\"\nhttp2_connection_window = \"16MiB\"\nhttp2_max_resets_per_second = 50",
        "",
    ))
    .unwrap();
    assert_eq!(
        tuned,
        Http2Settings {
            max_concurrent_streams: 250,
            max_header_list_size: 32 << 10,
            stream_window: 8 << 20,
            connection_window: 16 << 20,
            max_resets_per_second: 50,
            prior_knowledge_only: false,
        }
    );
    let only = http2_of(&listener("http2 = \"only\"", "")).unwrap();
    assert!(only.prior_knowledge_only);
    assert!(!http2_of(&listener("http2 = true", "")).unwrap().prior_knowledge_only);
}

#[test]
fn bad_http2_keys_and_upstream_protocols_point_at_their_values() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "http2_max_concurrent_streams = 0",
            "",
            "test.toml:5:32: http2_max_concurrent_streams = 0 is out of range",
        ),
        (
            "http2_stream_window = \"1KiB\"",
            "",
            "test.toml:5:23: size 1024 is out of range",
        ),
        ("", "protocol = \"h3\"", "test.toml:8:12: unknown protocol `h3`"),
        (
            "http2 = \"sometimes\"",
            "",
            "test.toml:5:9: http2 must be true, false or \"only\", not \"sometimes\"",
        ),
        (
            "",
            "protocol = \"h2\"",
            "test.toml:8:12: upstream `app`: protocol \"h2\" is HTTP/2 over TLS",
        ),
    ];
    for (l, u, want) in cases {
        let got = errors(&listener(l, u));
        assert!(got.iter().any(|e| e.starts_with(want)), "want {want:?}\n got {got:?}");
    }
    let tcp = "[listeners.l4]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nhttp2 = false\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\nprotocol = \"h2c\"\n";
    let got = errors(tcp);
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:4:9: `http2` is for HTTP listeners")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:7:12: `protocol` is for HTTP upstreams")),
        "{got:?}"
    );
    let compiled = compile_toml(
        "test.toml",
        &listener("", "protocol = \"h2c\""),
        &mut LiveState::default(),
    )
    .unwrap();
    assert_eq!(compiled.snapshot.upstreams[0].http.protocol, UpstreamProtocol::H2c);
}
