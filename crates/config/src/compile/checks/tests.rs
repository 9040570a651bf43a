use crate::compile::{compile_toml, LiveState};

fn errors(src: &str) -> Vec<String> {
    match compile_toml("test.toml", src, &mut LiveState::default()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

const TCP: &str = "[listeners.l4]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n";
const UP: &str = "[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";

#[test]
fn http_keys_on_tcp_listeners_are_errors() {
    let cases: &[(&str, &str)] = &[
        ("forwarded_headers = \"off\"\n", "test.toml:4:21: `forwarded_headers`"),
        (
            "client_header_timeout = \"5s\"\n",
            "test.toml:4:25: `client_header_timeout`",
        ),
        ("keepalive_timeout = \"5s\"\n", "test.toml:4:21: `keepalive_timeout`"),
        (
            "access_log = { path = \"/tmp/rampart-never-written.log\" }\n",
            "test.toml:4:14: `access_log`",
        ),
        (
            "protocol = \"tcp\"\nkeepalive_timeout = \"5s\"\n",
            "test.toml:5:21: `keepalive_timeout`",
        ),
    ];
    for (extra, want) in cases {
        let src = format!("{TCP}{extra}{UP}");
        let key = want.split('`').nth(1).unwrap_or_default();
        let want = format!("{want} is for HTTP listeners; listener `l4` is tcp (set protocol = \"http\")");
        assert_eq!(errors(&src), [want], "for {key} in:\n{src}");
    }
}

#[test]
fn http_keys_on_upstreams_of_tcp_listeners_only_are_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "response_header_timeout = \"1s\"",
            "test.toml:6:27: `response_header_timeout`",
        ),
        ("read_timeout = \"1s\"", "test.toml:6:16: `read_timeout`"),
        ("write_timeout = \"1s\"", "test.toml:6:17: `write_timeout`"),
        ("pool_max_idle = 8", "test.toml:6:17: `pool_max_idle`"),
        ("pool_idle_timeout = \"1s\"", "test.toml:6:21: `pool_idle_timeout`"),
        ("retries = 2", "test.toml:6:11: `retries`"),
        ("request_timeout = \"1s\"", "test.toml:6:19: `request_timeout`"),
    ];
    for (extra, want) in cases {
        let src = format!("{TCP}{UP}{extra}\n");
        let want = format!("{want} is for HTTP upstreams; upstream `app` is used only by TCP listener(s) `l4`");
        assert_eq!(errors(&src), [want], "for:\n{src}");
        // An upstream that an HTTP listener or route also uses takes them.
        let http = "[listeners.gw]\nbind = \"127.0.0.1:3\"\nprotocol = \"http\"\nupstream = \"app\"\n";
        assert_eq!(errors(&format!("{TCP}{http}{UP}{extra}\n")), [""; 0]);
        let route = "[listeners.gw]\nbind = \"127.0.0.1:3\"\nprotocol = \"http\"\n\
                     [[listeners.gw.routes]]\nupstream = \"app\"\n";
        assert_eq!(errors(&format!("{TCP}{route}{UP}{extra}\n")), [""; 0]);
    }
}

/// Keys that the data plane is being taught to use for HTTP too stay accepted there.
#[test]
fn connection_keys_stay_accepted_on_http_listeners_and_upstreams() {
    let src = "[listeners.gw]\nbind = \"127.0.0.1:3\"\nprotocol = \"http\"\nupstream = \"app\"\n\
               proxy_protocol_from = [\"10.0.0.0/8\"]\nproxy_header_timeout = \"2s\"\nidle_timeout = \"1m\"\n\
               buffer_size = \"32KiB\"\nmax_connections = 100\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\nsend_proxy_protocol = \"v2\"\n";
    assert_eq!(errors(src), [""; 0]);
}

#[test]
fn overlapping_binds_are_errors_at_the_later_listener() {
    let two = |first: &str, second: &str| {
        format!(
            "[listeners.z]\nbind = \"{first}\"\nupstream = \"app\"\n\
             [listeners.a]\nbind = \"{second}\"\nupstream = \"app\"\n{UP}"
        )
    };
    let cases: &[(&str, &str, &str)] = &[
        (
            "*:8090",
            "127.0.0.1:8090",
            "test.toml:5:8: listener `a` binds 127.0.0.1:8090, which overlaps listener `z` on 0.0.0.0:8090",
        ),
        (
            "127.0.0.1:8090",
            "0.0.0.0:8090",
            "test.toml:5:8: listener `a` binds 0.0.0.0:8090, which overlaps listener `z` on 127.0.0.1:8090",
        ),
        (
            "[::]:8090",
            "8090",
            "test.toml:5:8: listener `a` binds 0.0.0.0:8090, which overlaps listener `z` on [::]:8090",
        ),
        (
            "127.0.0.1:8090",
            "127.0.0.1:8090",
            "test.toml:5:8: listener `a` binds 127.0.0.1:8090 like listener `z`",
        ),
    ];
    for (first, second, want) in cases {
        assert_eq!(errors(&two(first, second)), [*want]);
    }
    for (first, second) in [
        ("127.0.0.1:8090", "127.0.0.2:8090"),
        ("0.0.0.0:8090", "0.0.0.0:8091"),
        ("0.0.0.0:8090", "[::1]:8090"),
    ] {
        assert_eq!(errors(&two(first, second)), [""; 0], "{first} {second}");
    }
}

#[test]
fn log_files_that_cannot_be_opened_are_errors_at_their_path() {
    let dir = std::env::temp_dir().join(format!("rampart-config-checks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-dir").join("x.log");
    let missing = missing.display();
    let reason = "No such file or directory (os error 2)";
    let src = format!("[global]\nsession_log = \"{missing}\"\n{TCP}{UP}");
    assert_eq!(
        errors(&src),
        [format!("test.toml:2:15: cannot open session log {missing}: {reason}")]
    );
    let gw = "[listeners.gw]\nbind = \"127.0.0.1:3\"\nprotocol = \"http\"\nupstream = \"app\"\n";
    let src = format!("{gw}access_log = {{ format = \"json\", path = \"{missing}\" }}\n{UP}");
    assert_eq!(
        errors(&src),
        [format!("test.toml:5:40: cannot open access log {missing}: {reason}")]
    );
    // Paths that can be opened are created, as the writer would.
    let (session, access) = (dir.join("s.jsonl"), dir.join("a.log"));
    let src = format!(
        "[global]\nsession_log = \"{}\"\n{gw}access_log = {{ path = \"{}\" }}\n{UP}",
        session.display(),
        access.display()
    );
    assert_eq!(errors(&src), [""; 0]);
    assert!(session.exists() && access.exists());
    // `-` and `/dev/stdout` are the standard output: no file named `-` is created.
    for stdout in ["-", "/dev/stdout"] {
        let src = format!("[global]\nsession_log = \"{stdout}\"\n{gw}access_log = {{ path = \"{stdout}\" }}\n{UP}");
        assert_eq!(errors(&src), [""; 0], "{stdout}");
    }
    assert!(!std::path::Path::new("-").exists(), "no file named `-`");
    std::fs::remove_dir_all(&dir).unwrap();
}
