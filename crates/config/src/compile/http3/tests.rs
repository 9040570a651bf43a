//! `http3 = true` and its keys: defaults, limits, `Alt-Svc`, and the errors that point at them.

use std::path::Path;
use std::time::Duration;

use rampart_model::http3::Http3Settings;
use rampart_model::{HttpListener, Transport};

use crate::compile::{compile_toml, LiveState};

/// A TLS HTTP listener on port 8443 with `extra` keys, its certificate written into `dir`.
fn config(dir: &Path, extra: &str, tls: bool) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("c.key"), key.serialize_pem()).unwrap();
    let d = dir.display();
    let tls = match tls {
        true => format!("[listeners.web.tls]\ncertificates = [{{ cert = \"{d}/c.pem\", key = \"{d}/c.key\" }}]\n"),
        false => String::new(),
    };
    let text = format!(
        "[listeners.web]\nbind = \"127.0.0.1:8443\"\nprotocol = \"http\"\nupstream = \"app\"\n{extra}\n\
         {tls}\n[upstreams.app]\ntargets = [\"127.0.0.1:3000\"]\n"
    );
    let path = dir.join("rampart.toml");
    std::fs::write(&path, &text).unwrap();
    path.display().to_string()
}

fn compile(path: &str) -> Result<crate::Compiled, Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    compile_toml("test.toml", &text, &mut LiveState::default())
        .map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

fn http(compiled: &crate::Compiled) -> &HttpListener {
    compiled.snapshot.listeners[0].http().unwrap()
}

#[test]
fn http3_is_off_by_default_and_on_binds_udp_beside_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let off = compile(&config(dir.path(), "", true)).unwrap();
    assert_eq!(http(&off).http3, None);
    assert_eq!(http(&off).alt_svc, None);
    assert_eq!(off.snapshot.listeners[0].sockets().count(), 1);
    let on = compile(&config(dir.path(), "http3 = true", true)).unwrap();
    assert_eq!(http(&on).http3, Some(Http3Settings::default()));
    let addr = "127.0.0.1:8443".parse().unwrap();
    let sockets: Vec<_> = on.snapshot.listeners[0].sockets().collect();
    assert_eq!(sockets, vec![(Transport::Tcp, addr), (Transport::Udp, addr)]);
    // Advertised on every route's responses, whatever their status.
    assert_eq!(http(&on).alt_svc.as_deref(), Some("h3=\":8443\"; ma=86400"));
    let edits = &http(&on).routes[0].filters.response_edits;
    for status in [200, 404, 502] {
        assert!(
            edits
                .for_status(status)
                .set
                .iter()
                .any(|(n, v)| n == "alt-svc" && v == "h3=\":8443\"; ma=86400"),
            "{status}"
        );
    }
}

#[test]
fn http3_limits_and_alt_svc_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let tuned = compile(&config(
        dir.path(),
        "http3 = true\nhttp3_max_concurrent_streams = 250\nhttp3_stream_window = \"1MiB\"\n\
         http3_connection_window = \"8MiB\"\nhttp3_idle_timeout = \"5s\"\nhttp3_early_data = true\n\
         http3_max_resets_per_second = 20\nhttp3_retry = \"always\"\nalt_svc = \"h3=\\\":443\\\"; ma=3600\"",
        true,
    ))
    .unwrap();
    assert_eq!(
        http(&tuned).http3,
        Some(Http3Settings {
            max_concurrent_streams: 250,
            stream_window: 1 << 20,
            connection_window: 8 << 20,
            idle_timeout: Duration::from_secs(5),
            early_data: true,
            max_resets_per_second: 20,
            always_retry: true,
        })
    );
    assert_eq!(http(&tuned).alt_svc.as_deref(), Some("h3=\":443\"; ma=3600"));
    let quiet = compile(&config(dir.path(), "http3 = true\nalt_svc = \"off\"", true)).unwrap();
    assert_eq!(http(&quiet).alt_svc, None);
    assert!(http(&quiet).routes[0].filters.response_edits.is_empty());
    // HTTP/3 served elsewhere (another port, a CDN) may be advertised without serving it here.
    let elsewhere = compile(&config(dir.path(), "alt_svc = \"h3=\\\":9443\\\"\"", true)).unwrap();
    assert_eq!(http(&elsewhere).http3, None);
    assert_eq!(http(&elsewhere).alt_svc.as_deref(), Some("h3=\":9443\""));
}

#[test]
fn http3_mistakes_point_at_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, bool, &str)] = &[
        (
            "http3 = true",
            false,
            "test.toml:5:9: `http3` needs TLS on the listener",
        ),
        (
            "http3_idle_timeout = \"5s\"",
            true,
            "test.toml:5:22: `http3_idle_timeout` needs http3 = true",
        ),
        (
            "http3 = true\nhttp3_retry = \"sometimes\"",
            true,
            "test.toml:6:15: unknown http3_retry `sometimes`",
        ),
        (
            "http3 = true\nhttp3_max_concurrent_streams = 0",
            true,
            "test.toml:6:32: http3_max_concurrent_streams = 0 is out of range",
        ),
        (
            "alt_svc = \"auto\"",
            true,
            "test.toml:5:11: alt_svc = \"auto\" advertises this listener's HTTP/3",
        ),
    ];
    for (extra, tls, want) in cases {
        let got = compile(&config(dir.path(), extra, *tls)).unwrap_err();
        assert!(got.iter().any(|e| e.starts_with(want)), "want {want:?}\n got {got:?}");
    }
    // On a TCP listener every HTTP/3 key is an error at its value.
    let tcp = "[listeners.raw]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nhttp3 = true\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let got = compile_toml("test.toml", tcp, &mut LiveState::default()).unwrap_err();
    let got: Vec<String> = got.0.iter().map(ToString::to_string).collect();
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:4:9: `http3` is for HTTP listeners")),
        "{got:?}"
    );
}
