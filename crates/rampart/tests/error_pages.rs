//! Error pages: a listener's and a route's pages replace the plain bodies of Rampart's own
//! answers (404 for no route, a dead upstream's 502/503, a filter's 403), with the variant the
//! client's `Accept` asks for; what a route says itself (`respond`) is left alone.

use crate::common;

use common::http::{header, send};
use common::*;

fn get(path: &str, accept: Option<&str>) -> Vec<u8> {
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: a\r\n{accept}\r\n").into_bytes()
}

#[test]
fn pages_replace_rampart_s_own_error_bodies_by_status_class_and_accept() {
    let dead = dead_target();
    let files: [(&str, &[u8]); 3] = [
        ("404.html", b"<h1>No such page</h1>"),
        ("5xx.html", b"<h1>We are down</h1>"),
        ("5xx.json", b"{\"error\":\"down\"}"),
    ];
    let listener = "[listeners.gw.error_pages]\n404 = \"404.html\"\n5xx = { html = \"5xx.html\", json = \"5xx.json\" }\n403 = { body = \"not from here\\n\" }\n";
    let routes = format!(
        "[[listeners.gw.routes]]\nname = \"dead\"\nmatch = {{ path_prefix = \"/dead\" }}\nupstream = \"dead\"\n\
         [[listeners.gw.routes]]\nname = \"own\"\nmatch = {{ path_prefix = \"/own\" }}\nupstream = \"dead\"\n\
         error_pages = {{ 5xx = {{ body = \"route page\", content_type = \"text/plain\" }} }}\n\
         [[listeners.gw.routes]]\nname = \"gone\"\nmatch = {{ path = \"/gone\" }}\nrespond = {{ status = 404, body = \"as written\\n\" }}\n\
         [[listeners.gw.routes]]\nname = \"private\"\nmatch = {{ path = \"/private\" }}\nupstream = \"app\"\n\
         filters = [{{ type = \"ip_filter\", deny = [\"127.0.0.0/8\"] }}]\n\
         [upstreams.dead]\ntargets = [\"{dead}\"]\nretries = 0\n"
    );
    let gw = filter_gateway(&files, listener, &routes);
    let mut client = connect(gw.port);

    // No route: the listener's 404 page, HTML by its extension.
    let (status, head, body) = send(&mut client, &get("/nowhere", None));
    assert_eq!(status, 404);
    assert_eq!(body, b"<h1>No such page</h1>");
    assert_eq!(
        header(&head, "content-type"),
        Some("text/html; charset=utf-8"),
        "{head}"
    );
    assert_eq!(header(&head, "content-length"), Some("21"), "{head}");

    // A dead upstream (502, then 503 while it is in backoff): the 5xx page, in the variant
    // Accept prefers (HTML for a browser).
    let (status, head, body) = send(
        &mut client,
        &get("/dead", Some("text/html,application/xhtml+xml,*/*;q=0.8")),
    );
    assert!(status == 502 || status == 503, "{status}");
    assert_eq!(body, b"<h1>We are down</h1>");
    assert_eq!(header(&head, "content-type"), Some("text/html; charset=utf-8"));
    let (status, head, body) = send(&mut client, &get("/dead", Some("application/json")));
    assert!(status == 502 || status == 503, "{status}");
    assert_eq!(body, b"{\"error\":\"down\"}");
    assert_eq!(header(&head, "content-type"), Some("application/json"));

    // A route's own page wins over the listener's for its status.
    let (status, head, body) = send(&mut client, &get("/own", Some("application/json")));
    assert!(status == 502 || status == 503, "{status}");
    assert_eq!(body, b"route page");
    assert_eq!(header(&head, "content-type"), Some("text/plain"));

    // What a route answers itself stays as written.
    let (status, _, body) = send(&mut client, &get("/gone", None));
    assert_eq!(status, 404);
    assert_eq!(body, b"as written\n");

    // A filter's refusal gets the page for its status.
    let (status, _, body) = send(&mut client, &get("/private", None));
    assert_eq!(status, 403);
    assert_eq!(body, b"not from here\n");
}

#[test]
fn a_missing_page_file_is_a_config_error_at_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        dir.path(),
        "gw.toml",
        "[listeners.gw]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\nupstream = \"app\"\n\n[listeners.gw.error_pages]\n502 = \"missing.html\"\n\n[upstreams.app]\ntargets = [\"127.0.0.1:2\"]\n",
    );
    let (code, _, err) = run_rampart(dir.path(), &["check", &path]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with(&format!("{path}:7:7: error page missing.html: cannot read")),
        "{err}"
    );
}
