//! A route's cache options: `key_cookies` (cookie values in the key), `authorized` (requests
//! with `Authorization`: bypass, or keyed per credential) and its own `max_object_size`.

use super::get;
use common::http::{header, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

use crate::common;

const PRIVATE_DEFAULT: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\nhello";
const PUBLIC: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: public, max-age=600\r\ncontent-length: 5\r\n\r\nhello";

#[test]
fn cookies_credentials_and_the_routes_own_object_limit_shape_what_is_stored() {
    let cookies = HttpBackend::start(Reply::Raw(PRIVATE_DEFAULT));
    let keyed = HttpBackend::start(Reply::Raw(PRIVATE_DEFAULT));
    let bypass = HttpBackend::start(Reply::Raw(PUBLIC));
    let small = HttpBackend::start(Reply::Raw(PRIVATE_DEFAULT));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut text = format!("[caches.main]\n\n[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n");
    for (prefix, backend, options) in [
        ("c", &cookies, "key_cookies = [\"lang\"]"),
        ("a", &keyed, "authorized = \"per_credential\""),
        ("b", &bypass, "authorized = \"bypass\""),
        ("m", &small, "max_object_size = \"4\""),
    ] {
        text.push_str(&format!(
            "[[listeners.web.routes]]\nmatch = {{ path_prefix = \"/{prefix}/\" }}\nupstream = \"{prefix}\"\n\
             cache = {{ store = \"main\", {options} }}\n\n[upstreams.{prefix}]\ntargets = [\"{}\"]\n\n",
            backend.target()
        ));
    }
    let path = write_file(dir.path(), "keys.toml", &text);
    let _rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let status_of = |path: &str, extra: &str| {
        let (status, head, _) = get(port, path, extra);
        assert_eq!(status, 200, "{head}");
        header(&head, "cache-status").unwrap_or_default().to_string()
    };

    // The `lang` cookie's value is in the key, wherever it sits among the cookies.
    status_of("/c/x", "Cookie: lang=en; theme=dark\r\n");
    assert!(status_of("/c/x", "Cookie: theme=light; lang=en\r\n").contains("hit"));
    assert!(status_of("/c/x", "Cookie: lang=fr\r\n").contains("miss"));
    assert!(status_of("/c/x", "").contains("miss"));
    assert_eq!(cookies.seen(), 3);

    // Per credential: a response the RFC keeps from a shared cache (no `public`) is stored for
    // its credential, and answers only that one.
    status_of("/a/x", "Authorization: Bearer one\r\n");
    assert!(status_of("/a/x", "Authorization: Bearer one\r\n").contains("hit"));
    assert!(status_of("/a/x", "Authorization: Bearer two\r\n").contains("miss"));
    assert!(status_of("/a/x", "").contains("miss"));
    assert_eq!(keyed.seen(), 3);

    // Bypass: a request with credentials neither reads nor fills the store, even for a public
    // response; one without them does.
    assert_eq!(
        status_of("/b/x", "Authorization: Bearer one\r\n"),
        "Rampart; fwd=bypass"
    );
    status_of("/b/x", "");
    assert!(status_of("/b/x", "").contains("hit"));
    assert_eq!(
        status_of("/b/x", "Authorization: Bearer one\r\n"),
        "Rampart; fwd=bypass"
    );
    assert_eq!(bypass.seen(), 3);

    // The route's own limit (4 bytes) keeps the 5-byte body out.
    status_of("/m/x", "");
    assert!(status_of("/m/x", "").contains("miss"));
    assert_eq!(small.seen(), 2);
}

#[test]
fn a_bad_authorized_or_cookie_name_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[caches.main]\n\n[listeners.web]\nbind = \"127.0.0.1:0\"\nprotocol = \"http\"\n\n\
                [[listeners.web.routes]]\nupstream = \"app\"\n\
                cache = { store = \"main\", authorized = \"sometimes\" }\n\n\
                [[listeners.web.routes]]\nupstream = \"app\"\n\
                cache = { store = \"main\", key_cookies = [\"a b\"] }\n\n\
                [upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n";
    let path = write_file(dir.path(), "bad.toml", text);
    let (code, _, stderr) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bad.toml:9:40") && stderr.contains("expected \"rfc\", \"bypass\" or \"per_credential\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad.toml:13:42") && stderr.contains("`a b` is not a cookie name"),
        "{stderr}"
    );
}

#[test]
fn a_configured_targeted_field_is_followed_before_cdn_cache_control() {
    const OWN: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncdn-cache-control: no-store\r\n\
        rampart-cache-control: max-age=600\r\ncontent-length: 5\r\n\r\nhello";
    const CDN: &[u8] =
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncdn-cache-control: max-age=600\r\ncontent-length: 5\r\n\r\nhello";
    let own = HttpBackend::start(Reply::Raw(OWN));
    let cdn = HttpBackend::start(Reply::Raw(CDN));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut text = format!(
        "[caches.main]\ntargeted_fields = [\"Rampart-Cache-Control\", \"CDN-Cache-Control\"]\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n"
    );
    for (prefix, backend) in [("o", &own), ("c", &cdn)] {
        text.push_str(&format!(
            "[[listeners.web.routes]]\nmatch = {{ path_prefix = \"/{prefix}/\" }}\nupstream = \"{prefix}\"\n\
             cache = {{ store = \"main\" }}\n\n[upstreams.{prefix}]\ntargets = [\"{}\"]\n\n",
            backend.target()
        ));
    }
    let path = write_file(dir.path(), "targets.toml", &text);
    let _rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    for prefix in ["o", "c"] {
        get(port, &format!("/{prefix}/x"), "");
        let (_, head, _) = get(port, &format!("/{prefix}/x"), "");
        assert!(
            header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
            "/{prefix}: {head}"
        );
    }
    assert_eq!((own.seen(), cdn.seen()), (1, 1));
}
