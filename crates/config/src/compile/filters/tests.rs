use std::any::Any;
use std::sync::Arc;

use rampart_model::filter::{Filter, FilterRegistry, OptionValue};
use rampart_model::route::Route;
use rampart_model::ListenerProtocol;

use crate::compile::{compile_toml, Compiled, LiveState};

fn config(listener_extra: &str, routes: &str) -> String {
    format!(
        "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n{listener_extra}\n{routes}\n\
         [upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n"
    )
}

fn compile_with(src: &str, live: &mut LiveState) -> Result<Compiled, Vec<String>> {
    compile_toml("test.toml", src, live).map_err(|e| e.0.iter().map(|e| e.to_string()).collect())
}

fn routes(src: &str) -> Vec<Route> {
    let compiled = compile_with(src, &mut LiveState::default()).unwrap();
    let mut listeners = Arc::into_inner(compiled.snapshot.listeners).expect("one owner");
    match listeners.remove(0).protocol {
        ListenerProtocol::Http(h) => Arc::into_inner(h).expect("one owner").routes,
        _ => panic!("an HTTP listener"),
    }
}

fn errors(src: &str) -> Vec<String> {
    compile_with(src, &mut LiveState::default()).err().unwrap_or_default()
}

fn types(route: &Route) -> Vec<&str> {
    route.filters.filters.iter().map(|f| f.type_name()).collect()
}

#[test]
fn listener_filters_come_first_and_a_route_may_opt_out() {
    let rs = routes(&config(
        "filters = [{ type = \"request_id\" }, { type = \"ip_filter\", deny = [\"10.0.0.0/8\"] }]\nupstream = \"app\"",
        "[[listeners.gw.routes]]\nname = \"a\"\nupstream = \"app\"\nmax_body_size = \"1KiB\"\nstrip_prefix = \"/a\"\n\
         filters = [{ type = \"cors\", origins = [\"https://app.example\"] }]\n\n\
         [[listeners.gw.routes]]\nname = \"b\"\nupstream = \"app\"\ninherit_filters = false\n",
    ));
    assert_eq!(
        types(&rs[0]),
        ["request_id", "ip_filter", "body_limit", "rewrite", "cors"]
    );
    assert!(types(&rs[1]).is_empty());
    // The listener's default route inherits them too, and shares the same instances.
    assert_eq!(rs[2].name, "default");
    assert_eq!(types(&rs[2]), ["request_id", "ip_filter"]);
    assert!(Arc::ptr_eq(&rs[0].filters.filters[0], &rs[2].filters.filters[0]));
}

#[test]
fn legacy_header_edits_fold_and_cost_nothing_per_request() {
    let rs = routes(&config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nrequest_headers = { set = { \"x-a\" = \"1\" } }\n\
         response_headers = { add = { \"x-b\" = \"2\" } }\n",
    ));
    assert!(rs[0].filters.is_empty());
    assert_eq!(rs[0].filters.request_edits.set, [("x-a".to_string(), "1".to_string())]);
    assert_eq!(
        rs[0].filters.response_edits.on_success.add,
        [("x-b".to_string(), "2".to_string())]
    );
}

#[test]
fn response_header_edits_with_always_apply_to_every_status() {
    let rs = routes(&config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\n\
         response_headers = { set = { \"x-all\" = \"1\" }, always = true }\n\
         filters = [{ type = \"response_headers\", set = { \"x-ok\" = \"1\" } }]\n",
    ));
    let names = |status: u16| -> Vec<&str> {
        let edits = rs[0].filters.response_edits.for_status(status);
        edits.set.iter().map(|(n, _)| n.as_str()).collect()
    };
    assert_eq!(names(200), ["x-ok", "x-all"]);
    assert_eq!(names(500), ["x-all"]);
    let errs = errors(&config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nrequest_headers = { set = { \"x\" = \"1\" }, always = true }\n",
    ));
    assert_eq!(
        errs,
        ["test.toml:7:51: `always` is for response_headers (request headers have no status to depend on)"]
    );
}

#[test]
fn filter_types_read_their_keys() {
    let rs = routes(&config(
        "",
        r#"[[listeners.gw.routes]]
upstream = "app"
filters = [
  { type = "request_id", header = "X-Trace", keep_incoming = false, echo = false },
  { type = "cors", origins = ["https://*.example.com", "http://localhost:*"], methods = ["get", "PUT"], allow_headers = ["X-Token"], expose_headers = ["X-Total"], credentials = true, max_age = "10m" },
  { type = "rewrite", replace_prefix = { from = "/v1/", to = "/v2/" } },
  { type = "request_headers", set = { "x-a" = "1" }, remove = ["X-B"] },
  { type = "body_limit", max = "2KiB" },
]
"#,
    ));
    let f = &rs[0].filters.filters;
    let Filter::RequestId(id) = &f[0].filter else {
        panic!("request_id")
    };
    assert_eq!(
        (id.header.as_str(), id.keep_incoming, id.echo),
        ("x-trace", false, false)
    );
    let Filter::Cors(cors) = &f[1].filter else {
        panic!("cors")
    };
    assert!(cors.allows_origin(b"https://app.example.com") && cors.allows_origin(b"http://localhost:3000"));
    assert!(!cors.allows_origin(b"https://example.org"));
    assert_eq!(cors.methods, ["GET", "PUT"]);
    assert_eq!(cors.allow_headers.as_deref(), Some(&["x-token".to_string()][..]));
    assert_eq!((cors.credentials, cors.max_age), (true, Some(600)));
    assert_eq!(f[2].type_name(), "rewrite");
    // The request edit comes after request_id, which edits per request: it cannot fold.
    assert_eq!(f[3].type_name(), "request_headers");
    let Filter::BodyLimit(limit) = &f[4].filter else {
        panic!("body_limit")
    };
    assert_eq!(limit.max, 2048);
}

#[test]
fn a_filter_that_stops_at_an_error_calls_none_of_its_own_keys_unknown() {
    let cfg = config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"cors\", methods = [\"GET\"], max_age = \"1m\" }]\n",
    );
    assert_eq!(errors(&cfg), ["test.toml:7:12: a `cors` filter needs `origins`"]);
}

#[test]
fn filter_errors_point_at_what_is_wrong() {
    let route = |filters: &str| {
        config(
            "",
            &format!("[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{filters}]\n"),
        )
    };
    let cases = [
        (
            "{ type = \"nope\" }",
            "test.toml:7:21: unknown filter type `nope` (known: request_id",
        ),
        ("{ typo = 1 }", "test.toml:7:12: a filter needs `type`"),
        ("{ type = 3 }", "test.toml:7:21: a filter's `type` is a string"),
        (
            "{ type = \"request_id\", colour = \"red\" }",
            "test.toml:7:35: `colour` is not a key of a `request_id` filter",
        ),
        (
            "{ type = \"request_id\", echo = \"yes\" }",
            "test.toml:7:42: `echo` is true or false",
        ),
        (
            "{ type = \"ip_filter\" }",
            "test.toml:7:12: an `ip_filter` needs `allow` or `deny`",
        ),
        (
            "{ type = \"ip_filter\", allow = [\"10.0.0.0/33\"] }",
            "test.toml:7:42: `10.0.0.0/33` is not an IP network",
        ),
        ("{ type = \"cors\" }", "test.toml:7:12: a `cors` filter needs `origins`"),
        (
            "{ type = \"cors\", origins = [\"example.com\"] }",
            "test.toml:7:39: origin `example.com` needs a scheme",
        ),
        (
            "{ type = \"cors\", origins = [\"*\"], credentials = true }",
            "test.toml:7:39: `credentials = true` with origin \"*\"",
        ),
        (
            "{ type = \"body_limit\" }",
            "test.toml:7:12: a `body_limit` filter needs `max`",
        ),
        (
            "{ type = \"body_limit\", max = \"lots\" }",
            "test.toml:7:41: `lots` is not a size",
        ),
        ("{ type = \"rewrite\" }", "test.toml:7:12: a `rewrite` filter needs"),
        (
            "{ type = \"rewrite\", regex = \"(\" , replacement = \"x\" }",
            "test.toml:7:40: invalid regex `(`",
        ),
        (
            "{ type = \"request_headers\" }",
            "test.toml:7:12: a `request_headers` filter needs `set`, `add` or `remove`",
        ),
        (
            "{ type = \"response_headers\", set = { \"bad name\" = \"x\" } }",
            "is not a header name",
        ),
    ];
    let mut wrong = Vec::new();
    for (filters, want) in cases {
        let got = errors(&route(filters));
        if !got.iter().any(|e| e.starts_with(want) || e.contains(want)) {
            wrong.push(format!("{filters}: {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // One error per mistake: a bad network is not also a missing list.
    assert_eq!(
        errors(&route("{ type = \"ip_filter\", allow = [\"10.0.0.0/33\"] }")).len(),
        1
    );
}

#[test]
fn filters_on_tcp_listeners_are_errors() {
    let src = "[listeners.t]\nbind = \"127.0.0.1:1\"\nupstream = \"app\"\nfilters = [{ type = \"request_id\" }]\n\
               trusted_proxies = [\"10.0.0.0/8\"]\n\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n";
    let got = errors(src);
    assert!(
        got.iter().any(|e| e.contains("`filters` is for HTTP listeners")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|e| e.contains("`trusted_proxies` is for HTTP listeners")),
        "{got:?}"
    );
}

#[test]
fn external_filters_are_built_by_their_registered_factory() {
    let mut registry = FilterRegistry::default();
    let factory = |options: &rampart_model::filter::FilterOptions| -> Result<Arc<dyn Any + Send + Sync>, String> {
        match options.get("level") {
            Some(OptionValue::Integer(n)) if *n > 0 => Ok(Arc::new(*n)),
            _ => Err("`level` must be a positive number".into()),
        }
    };
    registry.register("tenant", Arc::new(factory));
    let mut live = LiveState::default().with_filters(registry);
    let good = config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"tenant\", level = 3 }]\n",
    );
    let compiled = compile_with(&good, &mut live).unwrap();
    let ListenerProtocol::Http(h) = &compiled.snapshot.listeners[0].protocol else {
        panic!()
    };
    let Filter::External(e) = &h.routes[0].filters.filters[0].filter else {
        panic!("external")
    };
    assert_eq!(e.instance.downcast_ref::<i64>(), Some(&3));
    let bad = config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"tenant\", level = 0 }]\n",
    );
    let got = compile_with(&bad, &mut live).unwrap_err();
    assert_eq!(
        got,
        ["test.toml:7:12: `tenant` filter: `level` must be a positive number"]
    );
    // Unknown names list the registered ones too.
    let unknown = config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"nothing-like-it\" }]\n",
    );
    let got = compile_with(&unknown, &mut live).unwrap_err();
    assert!(
        got[0].contains("(known: request_id, ") && got[0].ends_with(", tenant)"),
        "{got:?}"
    );
    // A near miss of a registered name is suggested like a built-in one.
    let near = config(
        "",
        "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"tenat\" }]\n",
    );
    let got = compile_with(&near, &mut live).unwrap_err();
    assert!(
        got[0].ends_with("unknown filter type `tenat` (did you mean `tenant`?)"),
        "{got:?}"
    );
}

#[test]
fn every_built_in_the_model_lists_is_known_to_the_compiler() {
    for name in rampart_model::filter::BUILTIN_FILTER_TYPES {
        let errors = errors(&config(
            &format!("filters = [{{ type = \"{name}\" }}]\nupstream = \"app\""),
            "",
        ));
        assert!(
            errors.iter().all(|e| !e.contains("unknown filter type")),
            "{name}: {errors:?}"
        );
    }
}
