use rampart_model::tcp_route::TcpAction;
use rampart_model::Snapshot;
use rampart_proto::detect::Protocol;

use super::unescape_bytes;
use crate::compile::{compile_toml, LiveState};

const UPSTREAMS: &str = "[upstreams.a]\ntargets = [\"127.0.0.1:2\"]\n[upstreams.b]\ntargets = [\"127.0.0.1:3\"]\n";

fn config(routes: &str) -> String {
    format!("[listeners.edge]\nbind = \"127.0.0.1:1\"\nupstream = \"a\"\n{routes}\n{UPSTREAMS}")
}

fn compiled(src: &str) -> Snapshot {
    match compile_toml("test.toml", src, &mut LiveState::default()) {
        Ok(c) => c.snapshot,
        Err(e) => panic!("{}", e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")),
    }
}

fn errors(src: &str) -> String {
    match compile_toml("test.toml", src, &mut LiveState::default()) {
        Ok(_) => String::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"),
    }
}

#[test]
fn routes_compile_in_order_with_their_actions() {
    let s = compiled(&format!(
        "{}\n[listeners.web]\nprotocol = \"http\"\nupstream = \"b\"\n",
        config(
            "peek_timeout = \"1s\"\npeek_max = \"4KiB\"\n\
             [[listeners.edge.routes]]\nname = \"a-sni\"\nmatch = { sni = \"A.example\" }\nupstream = \"b\"\n\
             [[listeners.edge.routes]]\nmatch = { sni = \"*.example\", alpn = \"h2\" }\nlistener = \"web\"\n\
             [[listeners.edge.routes]]\nmatch = { protocol = \"ssh\", source = [\"10.0.0.0/8\"] }\nreject = true\n\
             [[listeners.edge.routes]]\nmatch = { prefix = '\\x16\\x03' }\nupstream = \"a\"\nmax_bytes = \"1MiB\"\ndeny_regex = \"evil\"\n"
        )
    ));
    let edge = &s.listeners[0];
    assert_eq!(edge.tcp_upstream(), Some(0));
    let routing = edge.tcp_routing().unwrap();
    assert_eq!(routing.peek_timeout.as_secs(), 1);
    assert_eq!(routing.peek_max, 4096);
    let names: Vec<&str> = routing.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a-sni", "edge#2", "edge#3", "edge#4"]);
    let actions: Vec<TcpAction> = routing.routes.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        [
            TcpAction::Upstream(1),
            TcpAction::Listener(1),
            TcpAction::Reject,
            TcpAction::Upstream(0)
        ]
    );
    assert_eq!(routing.routes[2].matcher.protocol, Some(Protocol::Ssh));
    assert_eq!(routing.routes[3].matcher.prefix.as_deref(), Some(&b"\x16\x03"[..]));
    assert_eq!(routing.routes[3].filters.max_bytes, Some(1 << 20));
    assert!(routing.routes[1].filters.is_empty() && !routing.routes[3].filters.is_empty());
    // The handed-to listener has no bind of its own.
    assert_eq!(s.listeners[1].bind, None);
}

#[test]
fn a_route_that_can_never_match_is_an_error_with_its_place() {
    let e = errors(&config(
        "[[listeners.edge.routes]]\nmatch = { protocol = \"ssh\", sni = \"a.example\" }\nupstream = \"b\"\n",
    ));
    assert!(e.starts_with("test.toml:5:"), "{e}");
    assert!(e.contains("can never match"), "{e}");
    let e = errors(&config(
        "[[listeners.edge.routes]]\nmatch = { sni = \"a.example\", http_host = \"b\" }\nupstream = \"b\"\n",
    ));
    assert!(e.contains("can never match"), "{e}");
    let e = errors(&config(
        "[[listeners.edge.routes]]\nmatch = { protocol = \"proxy\" }\nupstream = \"b\"\n",
    ));
    assert!(e.contains("proxy_protocol_from"), "{e}");
}

#[test]
fn bad_routes_say_what_is_wrong() {
    let cases = [
        (
            "match = { protocol = \"smtp\" }\nupstream = \"b\"",
            "unknown protocol `smtp`",
        ),
        ("match = { sni = \"x\" }", "needs exactly one of"),
        ("upstream = \"b\"\nreject = true", "needs exactly one of"),
        ("reject = false", "does nothing"),
        ("listener = \"nope\"", "unknown listener `nope`"),
        ("listener = \"edge\"", "its own listener"),
        ("upstream = \"zz\"", "unknown upstream `zz`"),
        ("match = { prefix = '\\xZZ' }\nupstream = \"b\"", "not a byte"),
        ("match = { regex = \"(\" }\nupstream = \"b\"", "invalid regex"),
        ("match = { source = [\"nonsense\"] }\nupstream = \"b\"", "nonsense"),
        ("reject = true\nmax_bytes = \"1KiB\"", "need `upstream`"),
        (
            "match = { path = \"/x\" }\nupstream = \"b\"",
            "for routes of HTTP listeners",
        ),
        (
            "upstream = \"b\"\nstrip_prefix = \"/x\"",
            "for routes of HTTP listeners",
        ),
    ];
    for (route, wanted) in cases {
        let e = errors(&config(&format!("[[listeners.edge.routes]]\n{route}\n")));
        assert!(e.contains(wanted), "{route}: {e}");
        assert!(e.starts_with("test.toml:"), "{route}: {e}");
    }
}

#[test]
fn tcp_keys_on_http_routes_and_missing_binds_are_errors() {
    let e = errors(&format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\
         [[listeners.web.routes]]\nmatch = {{ sni = \"a\" }}\nupstream = \"a\"\n{UPSTREAMS}"
    ));
    assert!(e.contains("`match.sni` is for routes of TCP listeners"), "{e}");
    let e = errors(&format!("[listeners.lone]\nupstream = \"a\"\n{UPSTREAMS}"));
    assert!(e.contains("needs `bind`"), "{e}");
    let e = errors(&config("peek_timeout = \"2s\""));
    assert!(e.contains("has no routes"), "{e}");
    // A listener with routes may go without a default upstream.
    let s = compiled(&format!(
        "[listeners.edge]\nbind = \"127.0.0.1:1\"\n[[listeners.edge.routes]]\nmatch = {{ protocol = \"tls\" }}\nupstream = \"a\"\n{UPSTREAMS}"
    ));
    assert_eq!(s.listeners[0].tcp_upstream(), None);
}

#[test]
fn prefixes_unescape() {
    assert_eq!(unescape_bytes("\\x16\\x03").unwrap(), b"\x16\x03");
    assert_eq!(unescape_bytes("SSH-\\r\\n\\\\").unwrap(), b"SSH-\r\n\\");
    assert!(unescape_bytes("\\x1").is_err());
    assert!(unescape_bytes("\\q").is_err());
    assert!(unescape_bytes("a\\").is_err());
}
