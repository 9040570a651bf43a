//! `[acme]` and `acme` names as the compiler takes and refuses them: host names only (LDH), the
//! order limit, an ACME-only plain listener, and what a missing `[acme]` table is told.

use rampart_model::route::{RedirectTo, RouteAction};
use rampart_model::ListenerProtocol;

use crate::compile::tests::{compile, errors};

/// `[acme]` (with `acme_extra` on line 3) and a TLS listener on 8443 obtaining `names`: the
/// `acme` line is line 8 (with a one-line `acme_extra`), its first name at column 9.
fn with_names(acme_extra: &str, names: &str) -> String {
    format!(
        "[acme]\nstorage = \"/tmp/acme\"\n{acme_extra}\n[listeners.web]\nbind = \"127.0.0.1:8443\"\n\
         protocol = \"http\"\n[listeners.web.tls]\nacme = [{names}]\n\
         [[listeners.web.routes]]\nrespond = {{ status = 200 }}\n"
    )
}

#[test]
fn acme_names_that_are_not_host_names_are_refused_where_they_are() {
    let long_label = "a".repeat(64);
    let long_name = format!("{}.test", ["abcdefghij"; 23].join("."));
    let cases = [
        ("exa_mple.test", "the label `exa_mple` has `_`"),
        ("-a.test", "the label `-a` starts or ends with `-`"),
        ("a-.test", "the label `a-` starts or ends with `-`"),
        ("a..test", "an empty label"),
        (".a.test", "an empty label"),
        (long_label.as_str(), "has 64 characters, more than 63"),
        (long_name.as_str(), "more than 253"),
        ("a.*.test", "`*` may only be the whole first label"),
        ("a b.test", "has ` `"),
    ];
    for (name, why) in cases {
        let src = with_names("", &format!("\"ok.test\", \"{name}\""));
        let got = errors(&src);
        let want = format!("test.toml:8:20: `{name}` is not a host name: ");
        assert!(
            got.iter().any(|e| e.starts_with(&want) && e.contains(why)),
            "{name}: want {want}...{why}\n got {got:?}"
        );
        assert_eq!(got.len(), 1, "{got:?}");
    }
    // Letters, digits, inner hyphens, a final dot, upper case: all fine.
    let good = compile(&with_names("", "\"a-1.Example.test.\", \"xn--bcher-kva.test\"")).unwrap();
    let names = &good.snapshot.listeners[0].tls.as_ref().unwrap().acme_names;
    assert_eq!(names, &["a-1.example.test", "xn--bcher-kva.test"]);
}

#[test]
fn a_wildcard_is_allowed_only_whole_and_first() {
    const DNS01: &str =
        "[acme.dns01]\nserver = \"127.0.0.1:5353\"\nkey_name = \"acme-key\"\nkey_secret = \"c2VjcmV0\"\n";
    compile(&with_names(DNS01, "\"*.b.test\"")).unwrap();
    let bad = with_names(DNS01, "\"*.-b.test\"");
    let got = errors(&bad);
    assert!(
        got.iter()
            .any(|e| e.contains("`*.-b.test` is not a host name: the label `-b`")),
        "{got:?}"
    );
}

#[test]
fn on_demand_patterns_must_be_host_names_too() {
    let src = "[acme]\nstorage = \"/tmp/acme\"\n[listeners.web]\nbind = \"127.0.0.1:8443\"\nprotocol = \"http\"\n\
               [listeners.web.tls]\nacme_on_demand = { allow = [\"*.shop_s.test\"] }\n\
               [[listeners.web.routes]]\nrespond = { status = 200 }\n";
    let got = errors(src);
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:7:29: `*.shop_s.test` is not a host name")),
        "{got:?}"
    );
}

#[test]
fn acme_names_without_an_acme_table_are_told_an_empty_one_will_do() {
    let src = with_names("", "\"a.test\"").replace("[acme]\nstorage = \"/tmp/acme\"\n", "\n\n");
    let got = errors(&src);
    assert!(
        got.iter().any(|e| e.contains("`[acme]` alone will do")
            && e.contains("`email` is optional")
            && !e.contains("and `storage`")),
        "{got:?}"
    );
}

#[test]
fn orders_run_eight_at_a_time_unless_the_table_says() {
    let limit = |extra: &str| {
        compile(&with_names(extra, "\"a.test\""))
            .unwrap()
            .snapshot
            .acme
            .unwrap()
            .max_concurrent_orders
    };
    assert_eq!(limit(""), 8);
    assert_eq!(limit("max_concurrent_orders = 2"), 2);
    let got = errors(&with_names("max_concurrent_orders = 0", "\"a.test\""));
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:3:25: max_concurrent_orders = 0 is out of range")),
        "{got:?}"
    );
}

/// The redirect of the plain listener `plain` in `src`'s snapshot: the route names and where the
/// redirect goes.
fn plain_routes(src: &str) -> (Vec<String>, Option<(String, Option<u16>)>) {
    let compiled = compile(src).unwrap();
    let plain = compiled.snapshot.listeners.iter().find(|l| l.name == "plain").unwrap();
    let ListenerProtocol::Http(http) = &plain.protocol else {
        panic!("an HTTP listener")
    };
    let names = http.routes.iter().map(|r| r.name.clone()).collect();
    let to = http.routes.iter().find_map(|r| match &r.action {
        RouteAction::Redirect {
            status: 301,
            to: RedirectTo::Scheme { scheme, port },
        } => Some((scheme.clone(), *port)),
        _ => None,
    });
    (names, to)
}

#[test]
fn a_plain_listener_with_no_routes_answers_acme_and_redirects_the_rest_to_https() {
    // docs/tls.md's HTTP-01 example, as it stands.
    let docs = "[acme]\nemail = \"ops@example.com\"\nstorage = \"/var/lib/rampart/acme\"\n\n\
                [listeners.plain]\nbind = \"0.0.0.0:80\"\nprotocol = \"http\"\n\n\
                [listeners.https]\nbind = \"0.0.0.0:443\"\nprotocol = \"http\"\nupstream = \"app\"\n\n\
                [listeners.https.tls]\nacme = [\"example.com\", \"www.example.com\"]\n\n\
                [upstreams.app]\ntargets = [\"127.0.0.1:3000\"]\n";
    let (names, to) = plain_routes(docs);
    assert_eq!(names, ["acme-http-01", "acme-https-redirect"]);
    assert_eq!(to, Some(("https".to_string(), None)), "443 goes unsaid");
    // An HTTPS listener elsewhere than 443: the redirect keeps its port.
    let (_, to) = plain_routes(&docs.replace("0.0.0.0:443", "0.0.0.0:8443"));
    assert_eq!(to, Some(("https".to_string(), Some(8443))));
    // Without [acme], a listener with nothing to do is still refused.
    let bare = "[listeners.plain]\nbind = \"0.0.0.0:80\"\nprotocol = \"http\"\n";
    let got = errors(bare);
    assert!(
        got.iter()
            .any(|e| e.starts_with("test.toml:2:8: HTTP listener `plain` has no routes and no upstream")),
        "{got:?}"
    );
}

#[test]
fn a_scheme_redirect_may_name_its_port() {
    let src = "[listeners.plain]\nbind = \"0.0.0.0:80\"\nprotocol = \"http\"\n\
               [[listeners.plain.routes]]\nredirect = { scheme = \"https\", port = 8443 }\n";
    assert_eq!(plain_routes(src).1, Some(("https".to_string(), Some(8443))));
    let bad = src.replace("scheme = \"https\", ", "to = \"/x\", ");
    let got = errors(&bad);
    assert!(
        got.iter().any(|e| e.contains("a redirect's `port` goes with `scheme`")),
        "{got:?}"
    );
    let got = errors(&src.replace("8443", "70000"));
    assert!(
        got.iter().any(|e| e.contains("redirect port = 70000 is out of range")),
        "{got:?}"
    );
}
