//! A route's `cache` (issue 39) end to end, against real backends on 127.0.0.1 that answer
//! fixed responses and report each request they receive: what is stored and answered without the
//! upstream, what is not stored, `Vary`, `HEAD` from a stored `GET`, `only-if-cached`,
//! invalidation by an unsafe request, and `stale-if-error` with the origin gone.

use crate::common;

mod admin;
mod coalescing;
mod disk;
mod keys;
mod ranges;
mod upstream_h2;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::http::{header, send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

/// Rampart with one route per backend, `/NAME/...` to each, all caching in store `main`.
fn proxy(backends: &[(&str, &str)]) -> (Rampart, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut text = format!(
        "[caches.main]\nsize = \"16MiB\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n"
    );
    for (name, target) in backends {
        text.push_str(&format!(
            "[[listeners.web.routes]]\nmatch = {{ path_prefix = \"/{name}/\" }}\nupstream = \"{name}\"\n\
             cache = {{ store = \"main\" }}\n\n[upstreams.{name}]\ntargets = [\"{target}\"]\n\n"
        ));
    }
    let path = write_file(dir.path(), "cache.toml", &text);
    let rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    (rampart, port, dir)
}

/// Rampart in `dir` with one route `/NAME/...` caching in store `main`, to upstream `name` whose
/// table holds `upstream` (its `targets` and anything else).
fn proxy_with(dir: &std::path::Path, name: &str, upstream: &str) -> (Rampart, u16) {
    let port = free_port();
    let text = format!(
        "[caches.main]\n\n[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/{name}/\" }}\nupstream = \"{name}\"\n\
         cache = {{ store = \"main\" }}\n\n[upstreams.{name}]\n{upstream}\n"
    );
    let path = write_file(dir, "cache.toml", &text);
    (Rampart::start(dir, &["run", "-c", &path, "--workers", "1"]), port)
}

fn request(port: u16, raw: &str) -> (u16, String, Vec<u8>) {
    let mut client = common::connect(port);
    send(&mut client, raw.as_bytes())
}

fn get(port: u16, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    request(port, &format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n{extra}\r\n"))
}

const FRESH: &[u8] =
    b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello";

#[test]
fn a_fresh_response_is_answered_from_the_store_and_head_from_the_stored_get() {
    let backend = HttpBackend::start(Reply::Raw(FRESH));
    let (_rampart, port, _dir) = proxy(&[("a", &backend.target())]);
    let (status, head, body) = get(port, "/a/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(header(&head, "cache-status"), Some("Rampart; fwd=uri-miss"));
    assert_eq!(backend.seen(), 1);
    let (status, head, body) = get(port, "/a/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit; ttl=")),
        "{head}"
    );
    assert!(header(&head, "age").is_some_and(|a| a.parse::<u64>().is_ok()), "{head}");
    assert_eq!(header(&head, "content-type"), Some("text/plain"));
    // HEAD is answered from the stored GET: its length, no body.
    let mut client = common::connect(port);
    client
        .write_all(b"HEAD /a/x HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    client.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{raw}");
    assert_eq!(body, "", "{raw}");
    assert_eq!(header(head, "content-length"), Some("5"), "{raw}");
    assert_eq!(backend.seen(), 0, "the hits and the HEAD stayed off the upstream");
    // Another target, another key; the host is part of the key too.
    get(port, "/a/y", "");
    request(port, "GET /a/x HTTP/1.1\r\nHost: other.test\r\n\r\n");
    assert_eq!(backend.seen(), 2);
}

#[test]
fn responses_the_rfc_keeps_out_of_a_shared_cache_are_fetched_every_time() {
    let no_store = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store, max-age=600\r\ncontent-length: 2\r\n\r\nno",
    ));
    let private = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: private, max-age=600\r\ncontent-length: 2\r\n\r\nno",
    ));
    let fresh = HttpBackend::start(Reply::Raw(FRESH));
    let (_rampart, port, _dir) = proxy(&[
        ("nostore", &no_store.target()),
        ("private", &private.target()),
        ("fresh", &fresh.target()),
    ]);
    for _ in 0..2 {
        get(port, "/nostore/x", "");
        get(port, "/private/x", "");
        // Credentials: not stored without public, s-maxage or must-revalidate (RFC 9111 3.5).
        get(port, "/fresh/auth", "Authorization: Basic YTpi\r\n");
        // The request's own no-store.
        get(port, "/fresh/asked", "Cache-Control: no-store\r\n");
    }
    assert_eq!(no_store.seen(), 2);
    assert_eq!(private.seen(), 2);
    assert_eq!(fresh.seen(), 4);
    // A request's no-cache goes to the upstream even with a fresh response stored.
    get(port, "/fresh/x", "");
    let (_, head, _) = get(port, "/fresh/x", "Cache-Control: no-cache\r\n");
    assert_eq!(header(&head, "cache-status"), Some("Rampart; fwd=request"), "{head}");
    assert_eq!(fresh.seen(), 2);
    // What that request fetched was stored again: the next one is a hit.
    let (_, head, _) = get(port, "/fresh/x", "");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    assert_eq!(fresh.seen(), 0);
}

#[test]
fn vary_keeps_each_variant_for_the_request_fields_it_names() {
    let backend = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\nvary: Accept-Language\r\ncontent-length: 2\r\n\r\nfr",
    ));
    let (_rampart, port, _dir) = proxy(&[("v", &backend.target())]);
    get(port, "/v/x", "Accept-Language: fr\r\n");
    let (_, head, _) = get(port, "/v/x", "Accept-Language: fr\r\n");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    let (_, head, _) = get(port, "/v/x", "Accept-Language: en\r\n");
    assert_eq!(header(&head, "cache-status"), Some("Rampart; fwd=vary-miss"), "{head}");
    assert_eq!(backend.seen(), 2);
    // Both variants are kept: each is a hit now, and a request without the field is a third.
    for language in ["fr", "en", "fr"] {
        let (_, head, _) = get(port, "/v/x", &format!("Accept-Language: {language}\r\n"));
        assert!(
            header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
            "{language}: {head}"
        );
    }
    assert_eq!(backend.seen(), 0);
    get(port, "/v/x", "");
    let (_, head, _) = get(port, "/v/x", "");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    assert_eq!(backend.seen(), 1);
    // An unsafe request removes every variant.
    request(port, "DELETE /v/x HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(backend.seen(), 1);
    get(port, "/v/x", "Accept-Language: fr\r\n");
    get(port, "/v/x", "Accept-Language: en\r\n");
    assert_eq!(backend.seen(), 2);
}

#[test]
fn only_if_cached_is_504_on_a_miss_and_a_hit_when_stored() {
    let backend = HttpBackend::start(Reply::Raw(FRESH));
    let (_rampart, port, _dir) = proxy(&[("o", &backend.target())]);
    let (status, head, _) = get(port, "/o/x", "Cache-Control: only-if-cached\r\n");
    assert_eq!(status, 504, "{head}");
    assert_eq!(backend.seen(), 0);
    get(port, "/o/x", "");
    let (status, _, body) = get(port, "/o/x", "Cache-Control: only-if-cached\r\n");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(backend.seen(), 1, "only the plain GET reached the upstream");
}

#[test]
fn an_unsafe_request_invalidates_the_stored_response_and_its_location() {
    let fresh = HttpBackend::start(Reply::Raw(FRESH));
    // POSTs answered 201 with a Location on the same origin.
    let creator = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 201 Created\r\nlocation: /c/item\r\ncontent-length: 0\r\n\r\n",
    ));
    let (_rampart, port, _dir) = proxy(&[("c", &fresh.target()), ("p", &creator.target())]);
    get(port, "/c/item", "");
    get(port, "/c/item", "");
    assert_eq!(fresh.seen(), 1);
    // A POST to another path whose Location names /c/item invalidates it.
    let (status, _, _) = request(
        port,
        "POST /p/new HTTP/1.1\r\nHost: app.test\r\ncontent-length: 0\r\n\r\n",
    );
    assert_eq!(status, 201);
    assert_eq!(creator.seen(), 1);
    get(port, "/c/item", "");
    assert_eq!(fresh.seen(), 1, "fetched again after the POST's Location");
    get(port, "/c/item", "");
    assert_eq!(fresh.seen(), 0, "and stored again");
    // A DELETE of the URL itself goes to the upstream and invalidates it.
    request(port, "DELETE /c/item HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(fresh.seen(), 1);
    get(port, "/c/item", "");
    assert_eq!(fresh.seen(), 1, "fetched again after the DELETE");
}

/// The next request head on `conn` (lowercase; the requests carry no body), reading into `got`;
/// `None` once the client is gone.
fn next_head(conn: &mut TcpStream, got: &mut Vec<u8>) -> Option<String> {
    let mut buf = [0u8; 4096];
    loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..at + 4]).to_ascii_lowercase();
            got.drain(..at + 4);
            return Some(head);
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A backend on keep-alive connections that answers each request head with what `answer` makes
/// of it.
fn scripted(answer: impl Fn(&str) -> &'static [u8] + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Some(head) = next_head(&mut conn, &mut got) {
                    if conn.write_all(answer(&head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    target
}

/// A backend that answers `response` to the first `serve` connections, then is gone (its port
/// refuses connections).
fn one_shot(response: &'static [u8], serve: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for _ in 0..serve {
            let Ok((mut conn, _)) = listener.accept() else { return };
            next_head(&mut conn, &mut Vec::new());
            // Counted before it answers: a client that has the answer sees it counted.
            count.fetch_add(1, Ordering::SeqCst);
            let _ = conn.write_all(response);
        }
        // The listener closes here: connections are refused from now on.
    });
    (target, served)
}

#[test]
fn stale_if_error_answers_with_the_stale_response_when_the_origin_is_down() {
    // Stale at once (max-age=0), usable for a minute if the origin fails.
    let (target, served) = one_shot(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=0, stale-if-error=60\r\nconnection: close\r\ncontent-length: 5\r\n\r\nstale",
        1,
    );
    let (_rampart, port, _dir) = proxy(&[("s", &target)]);
    let (status, _, body) = get(port, "/s/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"stale"[..]));
    assert_eq!(served.load(Ordering::SeqCst), 1);
    // Wait until the one-shot backend has closed its listener.
    while TcpStream::connect(&target).is_ok() {
        std::thread::yield_now();
    }
    let (status, head, body) = get(port, "/s/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"stale"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("stale-if-error")),
        "{head}"
    );
}

#[test]
fn without_stale_if_error_a_dead_origin_is_an_error() {
    let (target, _) = one_shot(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=0\r\nconnection: close\r\ncontent-length: 5\r\n\r\nstale",
        1,
    );
    let (_rampart, port, _dir) = proxy(&[("d", &target)]);
    assert_eq!(get(port, "/d/x", "").0, 200);
    while TcpStream::connect(&target).is_ok() {
        std::thread::yield_now();
    }
    let (status, _, _) = get(port, "/d/x", "");
    assert!(status >= 500, "{status}");
}

#[test]
fn a_route_naming_an_unknown_cache_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[listeners.web]\nbind = \"127.0.0.1:0\"\nprotocol = \"http\"\n\n\
                [[listeners.web.routes]]\nupstream = \"app\"\ncache = { store = \"nope\" }\n\n\
                [upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n";
    let path = write_file(dir.path(), "bad.toml", text);
    let (code, _, stderr) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bad.toml:7:") && stderr.contains("unknown cache `nope`"),
        "{stderr}"
    );
}

#[test]
fn an_http2_client_is_answered_from_what_an_http1_client_stored() {
    let backend = HttpBackend::start(Reply::Raw(FRESH));
    let (_rampart, port, _dir) = proxy(&[("h", &backend.target())]);
    get(port, "/h/x", "");
    assert_eq!(backend.seen(), 1);
    let (out, body) = crate::http2::curl(&[
        "--http2-prior-knowledge",
        "-H",
        "Host: app.test",
        &format!("http://127.0.0.1:{port}/h/x"),
    ]);
    assert!(out.ends_with("2 200"), "{out}");
    assert!(body.starts_with("hello"), "{body}");
    assert_eq!(backend.seen(), 0, "the HTTP/2 request was a hit");
}

/// A 200 `hello` tagged `"v1"`, stale at once.
const STALE_V1: &[u8] =
    b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=0\r\ncontent-length: 5\r\n\r\nhello";

/// A backend that answers a request carrying `If-None-Match: "v1"` with 304 (now fresh for ten
/// minutes), and any other with `first` (tagged `"v1"`); it counts both.
fn validating_backend(first: &'static [u8]) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (full, conditional) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (f, c) = (full.clone(), conditional.clone());
    let target = scripted(move |head| {
        if head.contains("if-none-match: \"v1\"") {
            c.fetch_add(1, Ordering::SeqCst);
            b"HTTP/1.1 304 Not Modified\r\netag: \"v1\"\r\ncache-control: max-age=600\r\nx-fresh: again\r\n\r\n"
        } else {
            f.fetch_add(1, Ordering::SeqCst);
            first
        }
    });
    (target, full, conditional)
}

#[test]
fn a_stale_response_is_validated_and_a_304_refreshes_it_in_the_store() {
    let (target, full, conditional) = validating_backend(STALE_V1);
    let (_rampart, port, _dir) = proxy(&[("r", &target)]);
    assert_eq!(get(port, "/r/x", "").0, 200);
    assert_eq!(
        (full.load(Ordering::SeqCst), conditional.load(Ordering::SeqCst)),
        (1, 0)
    );
    // Stale at once: validated with its ETag; the 304 answers from the store.
    let (status, head, body) = get(port, "/r/x", "");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("fwd-status=304")),
        "{head}"
    );
    assert_eq!(
        header(&head, "x-fresh"),
        Some("again"),
        "the 304's fields replace the stored ones: {head}"
    );
    assert_eq!(
        (full.load(Ordering::SeqCst), conditional.load(Ordering::SeqCst)),
        (1, 1)
    );
    // The 304 made it fresh for ten minutes: a plain hit now.
    let (_, head, body) = get(port, "/r/x", "");
    assert_eq!(body, b"hello");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit; ttl=")),
        "{head}"
    );
    assert_eq!(
        (full.load(Ordering::SeqCst), conditional.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[test]
fn a_client_conditional_request_is_answered_304_from_the_store() {
    let backend = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\nhello",
    ));
    let (_rampart, port, _dir) = proxy(&[("n", &backend.target())]);
    get(port, "/n/x", "");
    let (status, head, body) = get(port, "/n/x", "If-None-Match: \"v0\", W/\"v1\"\r\n");
    assert_eq!(status, 304, "{head}");
    assert!(body.is_empty());
    assert_eq!(header(&head, "etag"), Some("\"v1\""));
    let (status, _, body) = get(port, "/n/x", "If-None-Match: \"v2\"\r\n");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(backend.seen(), 1);
}

#[test]
fn cdn_cache_control_overrides_cache_control_for_this_cache() {
    let cdn_stores = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncdn-cache-control: max-age=600\r\ncontent-length: 2\r\n\r\nok",
    ));
    let cdn_refuses = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncdn-cache-control: no-store\r\ncontent-length: 2\r\n\r\nok",
    ));
    let (_rampart, port, _dir) = proxy(&[("yes", &cdn_stores.target()), ("no", &cdn_refuses.target())]);
    for _ in 0..3 {
        get(port, "/yes/x", "");
        get(port, "/no/x", "");
    }
    assert_eq!(
        cdn_stores.seen(),
        1,
        "CDN-Cache-Control: max-age stored it despite no-store"
    );
    assert_eq!(
        cdn_refuses.seen(),
        3,
        "CDN-Cache-Control: no-store kept it out despite max-age"
    );
}
