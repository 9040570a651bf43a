use std::path::Path;
use std::sync::Arc;

use rampart_model::filter::Filter;
use rampart_model::route::Route;
use rampart_model::ListenerProtocol;

use crate::compile::{compile_toml, LiveState};

/// A config file `gw.toml` in `dir` with one route running `filters`.
fn config_file(dir: &Path, filters: &str) -> (String, String) {
    let src = format!(
        "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
         [[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [\n{filters}\n]\n\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n"
    );
    (dir.join("gw.toml").display().to_string(), src)
}

fn compile(dir: &Path, filters: &str) -> Result<Vec<Route>, Vec<String>> {
    let (file, src) = config_file(dir, filters);
    let compiled = compile_toml(&file, &src, &mut LiveState::default())
        .map_err(|e| e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>())?;
    let mut listeners = Arc::into_inner(compiled.snapshot.listeners).expect("one owner");
    match listeners.remove(0).protocol {
        ListenerProtocol::Http(h) => Ok(Arc::into_inner(h).expect("one owner").routes),
        _ => panic!("an HTTP listener"),
    }
}

fn errors(dir: &Path, filters: &str) -> Vec<String> {
    match compile(dir, filters) {
        Ok(_) => panic!("no errors for {filters}"),
        Err(errors) => errors,
    }
}

fn only_filter(routes: &[Route]) -> &Filter {
    assert_eq!(routes[0].filters.filters.len(), 1);
    &routes[0].filters.filters[0].filter
}

/// A directory with `users.htpasswd` (alice, bcrypt cost 4) and `keys.txt`.
fn files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("pw", 4).unwrap();
    std::fs::write(dir.path().join("users.htpasswd"), format!("alice:{hash}\n")).unwrap();
    std::fs::write(dir.path().join("keys.txt"), "ci 0123456789abcdef\nfedcba9876543210\n").unwrap();
    dir
}

#[test]
fn basic_auth_reads_its_keys_and_the_users_file_beside_the_config() {
    let dir = files();
    let routes = compile(
        dir.path(),
        r#"{ type = "basic_auth", users_file = "users.htpasswd", realm = "Staff", forward_user_header = "X-User", hide_credentials = true, max_pending_checks = 4 }"#,
    )
    .unwrap();
    let Filter::BasicAuth(b) = only_filter(&routes) else {
        panic!("basic_auth")
    };
    assert_eq!(b.users.len(), 1);
    assert!(b.users.get(b"alice").is_some());
    assert_eq!(b.challenge, r#"Basic realm="Staff", charset="UTF-8""#);
    assert_eq!(b.forward_user_header.as_deref(), Some("x-user"));
    assert!(b.hide_credentials);
    assert_eq!(b.max_pending_checks, 4);
    assert!(only_filter(&routes).edits_request_headers_per_request());

    let routes = compile(dir.path(), r#"{ type = "basic_auth", users_file = "users.htpasswd" }"#).unwrap();
    let Filter::BasicAuth(b) = only_filter(&routes) else {
        panic!("basic_auth")
    };
    assert_eq!(b.challenge, r#"Basic realm="rampart", charset="UTF-8""#);
    assert!(!b.hide_credentials && b.forward_user_header.is_none());
    assert!(!only_filter(&routes).edits_request_headers_per_request());
}

#[test]
fn api_key_defaults_to_the_x_api_key_header_and_hides_the_key() {
    let dir = files();
    let routes = compile(dir.path(), r#"{ type = "api_key", keys_file = "keys.txt" }"#).unwrap();
    let Filter::ApiKey(k) = only_filter(&routes) else {
        panic!("api_key")
    };
    assert_eq!(k.keys.len(), 2);
    assert_eq!(k.keys.lookup(b"0123456789abcdef"), Some("ci"));
    assert_eq!(k.header.as_deref(), Some("x-api-key"));
    assert!(k.query.is_none() && !k.bearer && k.hide_credentials);
    assert!(only_filter(&routes).secret_query_param().is_none());

    // Naming another place drops the default header.
    let routes = compile(
        dir.path(),
        r#"{ type = "api_key", keys_file = "keys.txt", query = "apikey", bearer = true, hide_credentials = false, forward_name_header = "X-Consumer" }"#,
    )
    .unwrap();
    let Filter::ApiKey(k) = only_filter(&routes) else {
        panic!("api_key")
    };
    assert_eq!(
        (k.header.as_deref(), k.query.as_deref(), k.bearer),
        (None, Some("apikey"), true)
    );
    assert!(!k.hide_credentials);
    assert_eq!(k.forward_name_header.as_deref(), Some("x-consumer"));
    assert_eq!(only_filter(&routes).secret_query_param(), Some("apikey"));
}

#[test]
fn forward_auth_reads_its_url_and_header_lists() {
    let dir = files();
    let routes = compile(
        dir.path(),
        r#"{ type = "forward_auth", url = "http://127.0.0.1:9000/verify?x=1", timeout = "750ms", request_headers = ["Cookie", "Authorization"], response_headers = ["X-User", "X-Roles"], user_header = "X-User", max_body = "1KiB" }"#,
    )
    .unwrap();
    let Filter::ForwardAuth(f) = only_filter(&routes) else {
        panic!("forward_auth")
    };
    assert_eq!(f.endpoint.host_header, "127.0.0.1:9000");
    assert_eq!(f.endpoint.path, "/verify?x=1");
    assert!(f.tls.is_none());
    assert_eq!(f.timeout, std::time::Duration::from_millis(750));
    assert_eq!(
        f.request_headers.as_deref(),
        Some(&["cookie".to_string(), "authorization".to_string()][..])
    );
    assert_eq!(f.response_headers, ["x-user", "x-roles"]);
    assert_eq!(f.user_header.as_deref(), Some("x-user"));
    assert_eq!(f.max_body, 1024);

    let routes = compile(
        dir.path(),
        r#"{ type = "forward_auth", url = "https://auth.example.com/check" }"#,
    )
    .unwrap();
    let Filter::ForwardAuth(f) = only_filter(&routes) else {
        panic!("forward_auth")
    };
    assert!(f.tls.is_some(), "https gets a client configuration");
    assert!(f.request_headers.is_none() && f.response_headers.is_empty());
    assert_eq!(f.timeout, rampart_model::defaults::FORWARD_AUTH_TIMEOUT);
    assert!(!only_filter(&routes).edits_request_headers_per_request());
}

#[test]
fn errors_point_at_the_key_or_at_the_line_of_the_file() {
    let dir = files();
    let gw = dir.path().join("gw.toml").display().to_string();
    // The filters list starts on line 7; each case is the only filter, on line 8.
    let one = |filters: &str| errors(dir.path(), filters);

    let e = one(r#"{ type = "basic_auth", users_file = "missing.htpasswd" }"#);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with(&format!("{gw}:8:37: missing.htpasswd: ")), "{e:?}");

    let e = one(r#"{ type = "basic_auth", realm = "x" }"#);
    assert_eq!(e, [format!("{gw}:8:1: a `basic_auth` filter needs `users_file`")]);

    let e = one(r#"{ type = "basic_auth", users_file = "users.htpasswd", colour = "red" }"#);
    assert_eq!(
        e,
        [format!("{gw}:8:55: `colour` is not a key of a `basic_auth` filter")]
    );

    // A bad line of the htpasswd file is reported at its own place.
    std::fs::write(dir.path().join("weak.htpasswd"), "# users\nbob:{SHA}abc=\n").unwrap();
    let e = one(r#"{ type = "basic_auth", users_file = "weak.htpasswd" }"#);
    let weak = dir.path().join("weak.htpasswd").display().to_string();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(&format!("{weak}:2:5: unsupported hash for user \"bob\"")),
        "{e:?}"
    );

    std::fs::write(dir.path().join("short.txt"), "ok 0123456789\nci short\n").unwrap();
    let e = one(r#"{ type = "api_key", keys_file = "short.txt" }"#);
    let short = dir.path().join("short.txt").display().to_string();
    assert!(e[0].starts_with(&format!("{short}:2:4: key too short")), "{e:?}");

    let e = one(r#"{ type = "api_key", keys_file = "keys.txt", query = "a&b" }"#);
    assert_eq!(e, [format!("{gw}:8:53: `a&b` is not a query parameter name")]);
    let e = one(r#"{ type = "api_key", keys_file = "keys.txt", header = "x key" }"#);
    assert_eq!(e, [format!("{gw}:8:54: `x key` is not a header name")]);

    let e = one(r#"{ type = "forward_auth", url = "ftp://auth/" }"#);
    assert_eq!(
        e,
        [format!("{gw}:8:32: `ftp://auth/` is not an http:// or https:// URL")]
    );
    let e = one(r#"{ type = "forward_auth" }"#);
    assert_eq!(e, [format!("{gw}:8:1: a `forward_auth` filter needs `url`")]);
    let e = one(r#"{ type = "forward_auth", url = "http://a/", response_headers = ["x-user", "Transfer-Encoding"] }"#);
    assert_eq!(
        e,
        [format!(
            "{gw}:8:64: `response_headers`: `Transfer-Encoding` cannot be copied onto a request"
        )]
    );
    let e = one(r#"{ type = "forward_auth", url = "http://a/", ca = "ca.pem" }"#);
    assert_eq!(e, [format!("{gw}:8:50: `ca` is for an https:// `url`")]);
    let e = one(r#"{ type = "forward_auth", url = "https://a/", ca = "nothing.pem" }"#);
    assert!(e[0].starts_with(&format!("{gw}:8:51: nothing.pem: ")), "{e:?}");
    let e = one(r#"{ type = "forward_auth", url = "http://a/", timeout = "soon" }"#);
    assert!(e[0].starts_with(&format!("{gw}:8:55: ")), "{e:?}");
}

#[test]
fn a_reload_keeps_a_filters_slot_until_its_keys_or_its_file_change() {
    let dir = files();
    let mut live = LiveState::default();
    let slots = |live: &mut LiveState, filters: &str| {
        let (file, src) = config_file(dir.path(), filters);
        let compiled = compile_toml(&file, &src, live).unwrap();
        let slots: Vec<_> = compiled.snapshot.http_filter_slots().collect();
        slots
    };
    let basic = r#"{ type = "basic_auth", users_file = "users.htpasswd" }"#;
    let keyed = r#"{ type = "api_key", keys_file = "keys.txt" }"#;
    let first = slots(&mut live, &format!("{basic},\n{keyed}"));
    // Unchanged, in another order: each keeps its slot.
    let again = slots(&mut live, &format!("{keyed},\n{basic}"));
    assert_eq!((again[1], again[0]), (first[0], first[1]));
    // Another realm: a new filter (a new owner; the old index is free only from the next load).
    let realm = r#"{ type = "basic_auth", users_file = "users.htpasswd", realm = "x" }"#;
    let changed = slots(&mut live, &format!("{realm},\n{keyed}"));
    assert_eq!(changed[1], first[1]);
    assert_ne!(changed[0].owner, first[0].owner);
    // The users file changed in place: a new filter too.
    let hash = bcrypt::hash("other", 4).unwrap();
    std::fs::write(dir.path().join("users.htpasswd"), format!("alice:{hash}\n")).unwrap();
    let file_changed = slots(&mut live, &format!("{realm},\n{keyed}"));
    assert_eq!(file_changed[1], first[1]);
    assert_ne!(file_changed[0].owner, changed[0].owner);
    // A load that fails hands out nothing: the next one still finds the filters of the last.
    let (file, src) = config_file(dir.path(), r#"{ type = "basic_auth" }"#);
    assert!(compile_toml(&file, &src, &mut live).is_err());
    assert_eq!(slots(&mut live, &format!("{realm},\n{keyed}")), file_changed);
}

/// Each `forward_auth` service becomes an internal upstream after the configured ones: its URL's
/// address as the target, a name as a DNS question, TLS with `h2` offered for `https://`,
/// `protocol = "auto"`; filters naming the same service share it, and no configured upstream may
/// take such a name.
#[test]
fn forward_auth_services_become_internal_upstreams() {
    use rampart_model::UpstreamProtocol;
    let dir = files();
    let (file, src) = config_file(
        dir.path(),
        r#"{ type = "forward_auth", url = "http://127.0.0.1:9000/verify" },
           { type = "forward_auth", url = "http://127.0.0.1:9000/other" },
           { type = "forward_auth", url = "https://auth.example.com/check" }"#,
    );
    let snapshot = compile_toml(&file, &src, &mut LiveState::default()).unwrap().snapshot;
    let names: Vec<&str> = snapshot.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "app",
            "internal:forward_auth:http://127.0.0.1:9000",
            "internal:forward_auth:https://auth.example.com"
        ]
    );
    assert!(!snapshot.upstreams[0].is_internal() && snapshot.upstreams[1].is_internal());
    let plain = &snapshot.upstreams[1];
    assert_eq!(plain.targets[0].addr, "127.0.0.1:9000".parse().unwrap());
    assert!(plain.tls.is_none() && plain.lookups.is_empty());
    assert_eq!(plain.http.protocol, UpstreamProtocol::Auto);
    let named = &snapshot.upstreams[2];
    assert!(named.targets.is_empty());
    assert_eq!(named.lookups[0].query.to_string(), "dns+auth.example.com:443");
    let alpn = &named.tls.as_ref().unwrap().config.alpn_protocols;
    assert_eq!(alpn, &[b"h2".to_vec(), b"http/1.1".to_vec()]);
    let mut listeners = Arc::into_inner(snapshot.listeners).unwrap();
    let ListenerProtocol::Http(h) = listeners.remove(0).protocol else {
        panic!("an HTTP listener")
    };
    let upstreams: Vec<usize> = h.routes[0]
        .filters
        .filters
        .iter()
        .map(|f| match &f.filter {
            Filter::ForwardAuth(f) => f.upstream,
            _ => panic!("forward_auth"),
        })
        .collect();
    assert_eq!(upstreams, [1, 1, 2]);

    let src = src.replace(
        "[upstreams.app]",
        "[upstreams.\"internal:mine\"]\ntargets = [\"127.0.0.1:3\"]\n\n[upstreams.app]",
    );
    let e = compile_toml(&file, &src, &mut LiveState::default()).unwrap_err();
    assert!(
        e.0.iter().any(|e| e
            .message
            .contains("upstream names beginning `internal:` are Rampart's own")),
        "{e:?}"
    );
}

/// Each JWKS URL of the `jwt` filters becomes an internal upstream too (kind `jwks`, its own
/// beside a `forward_auth` service at the same place), which the fetch names; filters naming the
/// same service share it.
#[test]
fn jwks_urls_become_internal_upstreams() {
    use rampart_model::UpstreamProtocol;
    let dir = files();
    let (file, src) = config_file(
        dir.path(),
        r#"{ type = "jwt", jwks_url = "http://127.0.0.1:9000/jwks.json" },
           { type = "forward_auth", url = "http://127.0.0.1:9000/verify" },
           { type = "jwt", jwks_url = "https://idp.example.com/.well-known/jwks.json" }"#,
    );
    let snapshot = compile_toml(&file, &src, &mut LiveState::default()).unwrap().snapshot;
    let names: Vec<&str> = snapshot.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "app",
            "internal:jwks:http://127.0.0.1:9000",
            "internal:forward_auth:http://127.0.0.1:9000",
            "internal:jwks:https://idp.example.com"
        ]
    );
    let plain = &snapshot.upstreams[1];
    assert!(plain.is_internal() && plain.tls.is_none());
    assert_eq!(plain.targets[0].addr, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(plain.http.protocol, UpstreamProtocol::Auto);
    let named = &snapshot.upstreams[3];
    assert_eq!(named.lookups[0].query.to_string(), "dns+idp.example.com:443");
    assert!(named.tls.is_some());
    let fetches: Vec<Option<usize>> = snapshot
        .http_filters()
        .filter_map(|f| match f {
            Filter::Jwt(jwt) => Some(jwt.jwks.as_ref().and_then(|j| j.upstream)),
            _ => None,
        })
        .collect();
    assert_eq!(fetches, [Some(1), Some(3)]);
}
