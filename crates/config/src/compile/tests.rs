use super::*;
use rampart_model::balance::HashKey;
use rampart_proto::proxy_protocol::ProxyVersion;

pub(super) fn compile(src: &str) -> Result<Compiled, ConfigErrors> {
    compile_toml("test.toml", src, &mut LiveState::default())
}

pub(super) fn errors(src: &str) -> Vec<String> {
    compile(src).unwrap_err().0.iter().map(|e| e.to_string()).collect()
}

pub(super) const GOOD: &str = r#"
[listeners.web]
bind = "127.0.0.1:7777"
upstream = "app"

[upstreams.app]
targets = ["127.0.0.1:9001", { address = "127.0.0.1:9002", weight = 3 }]
"#;

#[test]
fn minimal_config_compiles_with_defaults() {
    let c = compile(GOOD).unwrap();
    let s = &c.snapshot;
    assert_eq!(s.listeners.len(), 1);
    let l = &s.listeners[0];
    assert_eq!(
        (l.name.as_str(), l.bind.unwrap().port(), l.tcp_upstream()),
        ("web", 7777, Some(0))
    );
    assert_eq!(l.max_connections, defaults::MAX_CONNECTIONS);
    assert_eq!(l.idle_timeout, defaults::IDLE_TIMEOUT);
    let u = &s.upstreams[0];
    assert_eq!(u.policy, BalancePolicy::RoundRobin);
    assert_eq!(u.targets.iter().map(|t| t.weight).collect::<Vec<_>>(), [1, 3]);
    assert!(u.health_check.is_none());
    assert!(!c.pin);
}

#[test]
fn examples_compile() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let src = std::fs::read_to_string(&path).unwrap();
            // Certificates named by an example are made for it, beside a copy of it.
            let certs = tempfile::tempdir().unwrap();
            make_named_certificates(&src, certs.path());
            let copy = certs.path().join(path.file_name().unwrap());
            compile_toml(&copy.display().to_string(), &src, &mut LiveState::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert!(seen >= 3, "expected example configs in {dir}");
}

/// For every `"….pem"` path in `src`, a certificate (for `example.com` and `*.example.net`) and
/// for `"….key"` its key, under `dir`.
fn make_named_certificates(src: &str, dir: &std::path::Path) {
    let quoted = regex::Regex::new(r#""([^"]+)\.(pem|key)""#).unwrap();
    for stem in quoted.captures_iter(src).map(|c| c[1].to_string()) {
        let (pem, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        if pem.exists() {
            continue;
        }
        std::fs::create_dir_all(pem.parent().unwrap()).unwrap();
        let pair = rcgen::KeyPair::generate().unwrap();
        let names = vec!["example.com".to_string(), "*.example.net".to_string()];
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&pair)
            .unwrap();
        std::fs::write(pem, cert.pem()).unwrap();
        std::fs::write(key, pair.serialize_pem()).unwrap();
    }
}

#[test]
fn the_worker_count_is_fixed_by_the_first_load() {
    let with = |n: usize| {
        format!("[global]\nworkers = {n}\n\n[listeners.a]\nbind = \"127.0.0.1:1\"\nupstream = \"u\"\n\n[upstreams.u]\ntargets = [\"127.0.0.1:2\"]\n")
    };
    let mut live = LiveState::default();
    compile_toml("a.toml", &with(2), &mut live).unwrap();
    compile_toml("a.toml", &with(3), &mut live).unwrap();
    assert_eq!(live.workers(), 2, "a reload keeps the first count");
    let mut from_cli = LiveState::new(Some(4));
    let c = compile_toml("a.toml", &with(2), &mut from_cli).unwrap();
    assert_eq!(from_cli.workers(), 4, "the command line wins");
    assert_eq!(
        c.snapshot.listeners[0].metrics.workers(),
        5,
        "metric cells per worker, and one for the control plane"
    );
    assert_eq!(from_cli.control_plane_id(), 4);
    let mut unset = LiveState::default();
    compile_toml("a.toml", &with(1).replace("workers = 1\n", ""), &mut unset).unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(unset.workers(), cpus, "one per CPU by default");
}

#[test]
fn full_example_values_arrive() {
    let src = include_str!("../../../../examples/l4-full.toml");
    let mut live = LiveState::default();
    let c = compile_toml("l4-full.toml", src, &mut live).unwrap();
    assert_eq!((live.workers(), c.pin), (2, false));
    let s = &c.snapshot;
    assert_eq!(s.drain_timeout, Duration::from_secs(20));
    let edge = s.listeners.iter().find(|l| l.name == "edge").unwrap();
    assert_eq!(edge.buffer_size, 32 * 1024);
    assert!(edge.expects_proxy_header("10.3.4.5".parse().unwrap()));
    assert!(!edge.expects_proxy_header("192.0.2.1".parse().unwrap()));
    let tls = &s.upstreams[edge.tcp_upstream().unwrap()];
    assert_eq!(tls.policy, BalancePolicy::WeightedRoundRobin);
    assert_eq!(tls.send_proxy_protocol, Some(ProxyVersion::V2));
    assert_eq!(tls.passive_health.base_backoff, Duration::from_millis(500));
    let hc = tls.health_check.clone().unwrap();
    assert_eq!(
        (hc.interval, hc.timeout, hc.rise, hc.fall),
        (Duration::from_secs(2), Duration::from_secs(1), 2, 3)
    );
    let pg = s.upstreams.iter().find(|u| u.name == "postgres").unwrap();
    assert!(pg.maglev.is_some());
}

/// Each kind of bad config and the exact place and message it gets.
#[test]
fn bad_configs_name_file_line_and_column() {
    let cases: &[(&str, &str)] = &[
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nbogus = 1\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:1: unknown key `bogus` (no key of this table is close to it; docs/config.md lists them)"),
        ("[listeners.web]\nbind = \"127.0.0.1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:2:8: `127.0.0.1` is not a listen address"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"ap\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:3:12: listener `web` refers to unknown upstream `ap` (did you mean `app`? defined: app)"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = []\n",
         "test.toml:5:11: upstream `app` has no targets"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nidle_timeout = \"5 minutes\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:16: `5 minutes` is not a duration"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nbuffer_size = \"lots\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:15: `lots` is not a size"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nprotocol = \"sctp\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:12: unsupported protocol `sctp` (expected \"tcp\", \"http\" or \"udp\")"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\nbalance = \"fastest\"\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:5:11: unknown balance policy `fastest`"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"127.0.0.1\"]\n",
         "test.toml:5:12: `127.0.0.1` is not host:port"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"http://127.0.0.1:8080/\"]\n",
         "test.toml:5:12: `http://127.0.0.1:8080/`: a target has no scheme; write `127.0.0.1:8080` (an upstream's `protocol` and `tls` say how to speak to it)"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"https://api.internal\"]\n",
         "test.toml:5:12: `https://api.internal`: a target has no scheme; write `api.internal:443` (an upstream's `protocol` and `tls` say how to speak to it)"),
        ("[listeners.web]\nlisten = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:2:1: unknown key `listen` (did you mean `bind`? `listen` is nginx's word for it)"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [{ address = \"127.0.0.1:2\", weight = 0 }]\n",
         "test.toml:5:12: weight 0 is out of range"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [{ addr = \"127.0.0.1:2\" }]\n",
         "test.toml:5:11: a target is \"host:port\" or { address = \"host:port\", weight = N, backup = true }"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nproxy_protocol_from = [\"10.0.0.0/40\"]\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:24: `10.0.0.0/40` is not an IP network"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nmax_connections = 0\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:4:19: max_connections = 0 is out of range"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\nsend_proxy_protocol = \"v3\"\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:5:23: unknown PROXY protocol version `v3`"),
        ("[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:1:1: no listeners defined"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n[upstreams.app.health_check]\nrise = 0\n",
         "test.toml:7:8: rise = 0 is out of range"),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\nconnect_timeout = \"0s\"\n",
         "test.toml:6:19: duration must be greater than zero"),
        ("[listeners.web\nbind = 1\n", "test.toml:1:15: "),
        ("[listeners.web]\nbind = \"127.0.0.1:1\"\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
         "test.toml:1:12: listener `web` needs `upstream`"),
    ];
    for (src, want) in cases {
        let got = errors(src);
        assert!(
            got.iter().any(|e| e.starts_with(want)),
            "want {want:?}\n got {got:?}\nfor:\n{src}"
        );
    }
}

#[test]
fn log_settings_compile_and_bad_values_point_at_the_value() {
    assert_eq!(compile(GOOD).unwrap().log, LogSettings::default());
    assert_eq!(
        (LogSettings::default().level, LogSettings::default().format),
        (LogLevel::Info, LogFormat::Text)
    );
    let c = compile(&format!(
        "[global]\nlog_level = \"debug\"\nlog_format = \"json\"\n{GOOD}"
    ))
    .unwrap();
    assert_eq!(
        c.log,
        LogSettings {
            level: LogLevel::Debug,
            format: LogFormat::Json
        }
    );
    let got = errors(&format!("[global]\nlog_level = \"loud\"\nlog_format = \"xml\"\n{GOOD}"));
    assert_eq!(
        got,
        [
            "test.toml:2:13: unknown log_level `loud` (expected one of: error, warn, info, debug, trace)",
            "test.toml:3:14: unknown log_format `xml` (expected one of: text, json)",
        ]
    );
    // A near miss names the word it is near.
    let got = errors(&format!("[global]\nlog_level = \"warning\"\n{GOOD}"));
    assert_eq!(
        got,
        ["test.toml:2:13: unknown log_level `warning` (did you mean `warn`?)"]
    );
    let got = errors(&format!("{GOOD}balance = \"leastconn\"\n"));
    assert_eq!(
        got,
        ["test.toml:8:11: unknown balance policy `leastconn` (did you mean `least_connections`?)"]
    );
    let got = errors(&GOOD.replace("upstream = \"app\"", "upstrem = \"app\""));
    assert_eq!(got, ["test.toml:4:1: unknown key `upstrem` (did you mean `upstream`?)"]);
    let got = errors(&format!("[global]\nlog_level = 3\n{GOOD}"));
    assert!(got[0].starts_with("test.toml:2:13: expected a string"), "{got:?}");
}

#[test]
fn every_error_of_a_file_is_reported() {
    let src = "[listeners.a]\nbind = \"nope\"\nupstream = \"x\"\n[upstreams.b]\ntargets = []\nbalance = \"?\"\n";
    let got = errors(src);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].starts_with("test.toml:2:8:"));
    assert!(got[1].starts_with("test.toml:3:12:"));
}

#[test]
fn duplicate_binds_are_rejected() {
    let src = "[listeners.a]\nbind = \"127.0.0.1:1\"\nupstream = \"u\"\n[listeners.b]\nbind = \"127.0.0.1:1\"\nupstream = \"u\"\n[upstreams.u]\ntargets = [\"127.0.0.1:2\"]\n";
    let got = errors(src);
    assert_eq!(got, ["test.toml:5:8: listener `b` binds 127.0.0.1:1 like listener `a`"]);
}

#[test]
fn reload_keeps_health_and_connection_counts_of_unchanged_parts() {
    let mut live = LiveState::default();
    let a = compile_toml("t", GOOD, &mut live).unwrap().snapshot;
    let b = compile_toml("t", &GOOD.replace("9002", "9003"), &mut live)
        .unwrap()
        .snapshot;
    assert!(b.generation > a.generation);
    assert!(Arc::ptr_eq(
        &a.upstreams[0].targets[0].health,
        &b.upstreams[0].targets[0].health
    ));
    assert!(!Arc::ptr_eq(
        &a.upstreams[0].targets[1].health,
        &b.upstreams[0].targets[1].health
    ));
    assert!(Arc::ptr_eq(
        &a.listeners[0].open_connections,
        &b.listeners[0].open_connections
    ));
}

#[test]
fn bind_forms() {
    assert_eq!(parse_bind("7777").unwrap(), "0.0.0.0:7777".parse().unwrap());
    assert_eq!(parse_bind("*:80").unwrap(), "0.0.0.0:80".parse().unwrap());
    assert_eq!(parse_bind("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
    assert_eq!(parse_bind("localhost:8080").unwrap(), "127.0.0.1:8080".parse().unwrap());
    assert_eq!(parse_bind("LOCALHOST:1").unwrap(), "127.0.0.1:1".parse().unwrap());
    assert!(parse_bind("localhost:x").is_err() && parse_bind("example.com:80").is_err());
    assert!(parse_bind("localhost").is_err());
}

#[test]
fn bad_http_configs_name_their_place() {
    let base = "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n";
    let up = "[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let cases: &[(&str, &str)] = &[
        (
            "[[listeners.gw.routes]]\nupstream = \"app\"\nrespond = { body = \"x\" }\n",
            "test.toml:4:1: route `gw#1` needs exactly one of",
        ),
        (
            "[[listeners.gw.routes]]\nupstream = \"nope\"\n",
            "test.toml:5:12: route `gw#1` refers to unknown upstream `nope` (defined: app)",
        ),
        (
            "[[listeners.gw.routes]]\nmatch = { path_regex = \"(\" }\nupstream = \"app\"\n",
            "test.toml:5:24: invalid regex `(`",
        ),
        (
            "[[listeners.gw.routes]]\nmatch = { path = \"x\" }\nupstream = \"app\"\n",
            "test.toml:5:18: path `x` must start with /",
        ),
        (
            "[[listeners.gw.routes]]\nmatch = { path = \"/a\", path_prefix = \"/b\" }\nupstream = \"app\"\n",
            "test.toml:5:38: use only one of",
        ),
        (
            "[[listeners.gw.routes]]\nmatch = { methods = [\"G E T\"] }\nupstream = \"app\"\n",
            "test.toml:5:22: `G E T` is not an HTTP method",
        ),
        (
            "[[listeners.gw.routes]]\nrespond = { status = 700 }\n",
            "test.toml:5:22: status 700 is out of range",
        ),
        (
            "[[listeners.gw.routes]]\nredirect = { to = \"/x\", status = 200 }\n",
            "test.toml:5:34: status 200 is out of range (300 to 399)",
        ),
        (
            "[[listeners.gw.routes]]\nupstream = \"app\"\nmax_body_size = \"big\"\n",
            "test.toml:6:17: `big` is not a size",
        ),
        (
            "[[listeners.gw.routes]]\nupstream = \"app\"\nbogus = 1\n",
            "test.toml:6:1: unknown key `bogus` (no key of this table is close to it; docs/config.md lists them)",
        ),
        (
            "forwarded_headers = \"sometimes\"\nupstream = \"app\"\n",
            "test.toml:4:21: unknown forwarded_headers `sometimes`",
        ),
        (
            "access_log = { path = \"/tmp/a\", format = \"xml\" }\nupstream = \"app\"\n",
            "test.toml:4:42: unknown access log format `xml`",
        ),
        ("", "test.toml:2:8: HTTP listener `gw` has no routes and no upstream"),
    ];
    for (listener_rest, want) in cases {
        let src = format!("{base}{listener_rest}{up}");
        let got = errors(&src);
        assert!(
            got.iter().any(|e| e.starts_with(want)),
            "want {want:?}\n got {got:?}\nfor:\n{src}"
        );
    }
}

#[test]
fn http_health_check_and_upstream_settings_arrive() {
    let src = "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\nresponse_header_timeout = \"2s\"\npool_max_idle = 8\nretries = 2\n\
               [upstreams.app.health_check]\nhttp_path = \"/healthz\"\nexpect_status = \"204\"\n";
    let c = compile(src).unwrap();
    let u = &c.snapshot.upstreams[0];
    assert_eq!(
        (u.http.response_header_timeout, u.http.pool_max_idle, u.http.retries),
        (Duration::from_secs(2), 8, 2)
    );
    let http = u.health_check.as_ref().unwrap().http.as_ref().unwrap();
    assert_eq!((http.path.as_str(), http.expect_status), ("/healthz", (204, 204)));
    let bad = src.replace("\"204\"", "\"2xx\"");
    assert!(errors(&bad)[0].contains("`2xx` is not a status range"));
}

#[test]
fn hash_keys_and_request_timeouts() {
    let http = |extra: &str| {
        format!(
            "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\
             [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n{extra}\n"
        )
    };
    let c = compile(&http(
        "balance = \"consistent_hash\"\nhash_key = \"header:X-User\"\nrequest_timeout = \"5s\"",
    ))
    .unwrap();
    let u = &c.snapshot.upstreams[0];
    assert_eq!(u.hash_key, HashKey::Header("x-user".into()));
    assert_eq!(u.http.request_timeout, Some(Duration::from_secs(5)));
    let c = compile(&http("balance = \"consistent_hash\"\nhash_key = \"cookie:sid\"")).unwrap();
    assert_eq!(c.snapshot.upstreams[0].hash_key, HashKey::Cookie("sid".into()));
    let c = compile(&http("balance = \"p2c_ewma\"")).unwrap();
    assert_eq!(c.snapshot.upstreams[0].policy, BalancePolicy::P2cEwma);
    assert_eq!(c.snapshot.upstreams[0].http.request_timeout, None);

    let cases: &[(&str, &str)] = &[
        (
            "hash_key = \"header:a\"",
            "test.toml:7:12: hash_key needs balance = \"consistent_hash\"",
        ),
        (
            "balance = \"consistent_hash\"\nhash_key = \"path\"",
            "test.toml:8:12: `path` is not a hash key",
        ),
        (
            "balance = \"consistent_hash\"\nhash_key = \"cookie:\"",
            "test.toml:8:12: `cookie:` is not a hash key",
        ),
        (
            "request_timeout = \"0s\"",
            "test.toml:7:19: duration must be greater than zero",
        ),
    ];
    for (extra, want) in cases {
        let got = errors(&http(extra));
        assert!(got.iter().any(|e| e.starts_with(want)), "want {want:?}\n got {got:?}");
    }
    // A TCP listener has no headers or cookies to hash.
    let tcp = "[listeners.l4]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n\
               [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\nbalance = \"consistent_hash\"\nhash_key = \"header:x\"\n";
    let got = errors(tcp);
    assert!(
        got[0].starts_with("test.toml:3:12: TCP listener `l4` uses upstream `app`, which hashes on a request header"),
        "{got:?}"
    );
}

/// Values of the wrong type are told what the key takes, in the config's terms.
#[test]
fn type_errors_say_what_the_key_takes() {
    let l = "[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n";
    let u = "[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let cases: &[(String, &str)] = &[
        (
            format!("[global]\nworkers = \"2\"\n{l}{u}"),
            "test.toml:2:11: expected a whole number, not the string \"2\"",
        ),
        (
            format!("{l}max_connections = 1.5\n{u}"),
            "test.toml:4:19: expected a whole number, not the number 1.5",
        ),
        (
            format!("{l}idle_timeout = 30\n{u}"),
            "test.toml:4:16: expected a duration such as \"5s\", not the number 30",
        ),
        (
            format!("{l}{u}[upstreams.app.health_check]\ninterval = true\n"),
            "test.toml:7:12: expected a duration such as \"5s\", not true",
        ),
        (
            format!("{l}buffer_size = 65536\n{u}"),
            "test.toml:4:15: expected a size such as \"64KiB\", not the number 65536",
        ),
        (
            format!("[global]\npin = \"yes\"\n{l}{u}"),
            "test.toml:2:7: expected true or false, not the string \"yes\"",
        ),
        (
            "[listeners.web]\nbind = 7777\nupstream = \"app\"\n".to_string() + u,
            "test.toml:2:8: expected a string, not the number 7777",
        ),
        (
            format!("{l}[upstreams.app]\ntargets = \"127.0.0.1:2\"\n"),
            "test.toml:5:11: expected a list, not the string \"127.0.0.1:2\"",
        ),
        (
            format!("{l}proxy_protocol_from = \"10.0.0.0/8\"\n{u}"),
            "test.toml:4:23: expected a list, not the string \"10.0.0.0/8\"",
        ),
        (
            format!("{l}access_log = \"/tmp/a.log\"\n{u}"),
            "test.toml:4:14: expected a table, not the string \"/tmp/a.log\"",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(errors(src), [*want], "for:\n{src}");
    }
}

#[test]
fn the_command_line_modes_go_through_the_config_compiler() {
    let spec = SimpleL4 {
        http: true,
        udp: false,
        bind: "127.0.0.1:8080".parse().unwrap(),
        targets: vec!["app.invalid:3000".to_string(), "127.0.0.1:3001".to_string()],
        policy: BalancePolicy::ConsistentHash,
        session_log: None,
        tls: vec![("certs/a b.pem".into(), "certs/a.key".into())],
        access_log: Some(("/tmp/rampart-access.log".into(), "combined".into())),
        upstream_protocol: Some("h2c".into()),
        http3: false,
        sni: Vec::new(),
        acme: None,
        tracing: None,
    };
    let text = spec.to_toml();
    assert!(
        text.contains("access_log = { path = \"/tmp/rampart-access.log\", format = \"combined\" }\n"),
        "{text}"
    );
    assert!(
        text.contains("[listeners.default.tls]\ncertificates = [{ cert = \"certs/a b.pem\", key = \"certs/a.key\" }]"),
        "{text}"
    );
    assert!(
        text.contains("targets = [\"app.invalid:3000\", \"127.0.0.1:3001\"]"),
        "{text}"
    );
    // A name that cannot resolve is the compiler's error, said as the flag that named it.
    let errors = simple_l4(&spec, &mut LiveState::default()).unwrap_err().to_string();
    assert!(
        errors
            .lines()
            .any(|l| l.starts_with("--to app.invalid:3000: cannot resolve")),
        "{errors}"
    );
    assert!(errors.lines().all(|l| l.starts_with("--")), "{errors}");

    let spec = SimpleL4 {
        targets: vec!["127.0.0.1:3001".to_string()],
        tls: Vec::new(),
        access_log: None,
        ..spec
    };
    let snapshot = simple_l4(&spec, &mut LiveState::default()).unwrap().snapshot;
    let ListenerProtocol::Http(http) = &snapshot.listeners[0].protocol else {
        panic!("an HTTP listener");
    };
    assert_eq!(http.routes.len(), 1);
    assert_eq!(snapshot.upstreams[0].policy, BalancePolicy::ConsistentHash);
    assert!(snapshot.upstreams[0].maglev.is_some());
    assert_eq!(snapshot.listeners[0].max_connections, defaults::MAX_CONNECTIONS);
    assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
}

#[test]
fn backup_targets_compile_and_cannot_be_all() {
    let c = compile(&GOOD.replace(
        "{ address = \"127.0.0.1:9002\", weight = 3 }",
        "{ address = \"127.0.0.1:9002\", backup = true }",
    ))
    .unwrap();
    let backups: Vec<bool> = c.snapshot.upstreams[0].targets.iter().map(|t| t.backup).collect();
    assert_eq!(backups, [false, true]);
    let got = errors("[listeners.web]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\n[upstreams.app]\ntargets = [{ address = \"127.0.0.1:2\", backup = true }]\n");
    assert_eq!(
        got,
        ["test.toml:5:11: every target of upstream `app` is a backup: backups stand in for primary targets, so at least one must not be"]
    );
}
