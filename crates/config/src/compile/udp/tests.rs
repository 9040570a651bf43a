//! UDP listeners: what compiles, the keys refused on them and on their upstreams, and which
//! addresses overlap.

use std::time::Duration;

use rampart_model::{ListenerProtocol, Transport};

use crate::compile::{compile_toml, LiveState};

fn compile(src: &str) -> Result<crate::Compiled, Vec<String>> {
    compile_toml("test.toml", src, &mut LiveState::default()).map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

fn udp(extra_listener: &str, extra_upstream: &str) -> String {
    format!(
        "[listeners.dns]\nbind = \"127.0.0.1:5353\"\nprotocol = \"udp\"\nupstream = \"resolvers\"\n{extra_listener}\n\
         [upstreams.resolvers]\ntargets = [\"127.0.0.1:5301\", \"127.0.0.1:5302\"]\n{extra_upstream}\n"
    )
}

#[test]
fn a_udp_listener_binds_udp_and_its_upstream_is_checked_with_a_dns_query() {
    let compiled = compile(&udp(
        "",
        "[upstreams.resolvers.health_check]\ndns_query = \"health.example.\"\ninterval = \"1s\"",
    ))
    .unwrap();
    let listener = &compiled.snapshot.listeners[0];
    assert!(matches!(
        listener.protocol,
        ListenerProtocol::Udp {
            upstream: 0,
            responses: None
        }
    ));
    assert_eq!(listener.udp_upstream(), Some(0));
    assert_eq!(listener.idle_timeout, Duration::from_secs(30), "UDP's own default");
    let sockets: Vec<_> = listener.sockets().collect();
    assert_eq!(sockets, vec![(Transport::Udp, "127.0.0.1:5353".parse().unwrap())]);
    let check = compiled.snapshot.upstreams[0].health_check.as_ref().unwrap();
    assert_eq!(check.dns.as_deref(), Some("health.example"));
    assert!(check.http.is_none());
    // Its own idle timeout and session limit.
    let tuned = compile(&udp(
        "idle_timeout = \"5s\"\nmax_connections = 50\nsession_responses = 1",
        "",
    ))
    .unwrap();
    assert_eq!(tuned.snapshot.listeners[0].idle_timeout, Duration::from_secs(5));
    assert_eq!(tuned.snapshot.listeners[0].max_connections, 50);
    assert_eq!(tuned.snapshot.listeners[0].udp_responses(), Some(1));
    // Not on a TCP listener.
    let tcp = "[listeners.raw]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nsession_responses = 1\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let got = compile(tcp).unwrap_err();
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:4:21: `session_responses` is for UDP listeners")),
        "{got:?}"
    );
}

#[test]
fn keys_that_mean_nothing_for_datagrams_point_at_their_values() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "proxy_protocol_from = [\"10.0.0.0/8\"]",
            "",
            "test.toml:5:24: `proxy_protocol_from` has no meaning on UDP listener `dns`",
        ),
        (
            "buffer_size = \"64KiB\"",
            "",
            "test.toml:5:15: `buffer_size` has no meaning on UDP listener `dns`",
        ),
        (
            "",
            "protocol = \"h2c\"",
            "test.toml:8:12: `protocol` is for HTTP upstreams; upstream `resolvers` is used by UDP listener `dns`",
        ),
        (
            "",
            "[upstreams.resolvers.health_check]\nhttp_path = \"/health\"",
            "test.toml:9:13: upstream `resolvers` is used by UDP listener `dns`: check it with `dns_query",
        ),
        (
            "",
            "send_proxy_protocol = \"v1\"",
            "test.toml:8:23: upstream `resolvers` is used by UDP listener `dns`: PROXY v1 cannot say UDP",
        ),
        (
            "",
            "[upstreams.resolvers.health_check]\ndns_query = \"a..b\"",
            "test.toml:9:13: `a..b` is not a DNS name",
        ),
        (
            "",
            "[upstreams.resolvers.health_check]\ndns_query = \"a.example\"\nhttp_path = \"/\"",
            "test.toml:9:13: `dns_query` and `http_path` are two kinds of check",
        ),
    ];
    for (l, u, want) in cases {
        let got = compile(&udp(l, u)).unwrap_err();
        assert!(got.iter().any(|e| e.starts_with(want)), "want {want:?}\n got {got:?}");
    }
    let bare = "[listeners.dns]\nbind = \"127.0.0.1:5353\"\nprotocol = \"udp\"\n";
    let got = compile(bare).unwrap_err();
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:3:12: UDP listener `dns` needs `upstream`")),
        "{got:?}"
    );
}

#[test]
fn tcp_and_udp_share_an_address_but_two_udp_listeners_do_not() {
    let both = format!(
        "{}[listeners.dns-tcp]\nbind = \"127.0.0.1:5353\"\nupstream = \"resolvers\"\n",
        udp("", "")
    );
    compile(&both).unwrap();
    let twice = format!(
        "{}[listeners.again]\nbind = \"0.0.0.0:5353\"\nprotocol = \"udp\"\nupstream = \"resolvers\"\n",
        udp("", "")
    );
    let got = compile(&twice).unwrap_err();
    assert!(
        got.iter().any(|e| e
            .contains("listener `again` binds 0.0.0.0:5353 (udp), which overlaps listener `dns` on 127.0.0.1:5353")),
        "{got:?}"
    );
}
