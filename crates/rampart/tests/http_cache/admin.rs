//! The cache on the admin API and in the metrics and access log: purge by URL, ban by prefix
//! and by tag, `GET /api/caches`, the request outcomes counted, the `"cache"` log field.

use super::{get, request};
use common::http::{HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

use crate::common;

/// `METHOD path` on the admin listener: status and body.
fn admin(port: u16, method: &str, path: &str) -> (u16, String) {
    let (status, _, body) = request(
        port,
        &format!("{method} {path} HTTP/1.1\r\nHost: admin\r\ncontent-length: 0\r\n\r\n"),
    );
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn the_admin_api_purges_a_url_and_bans_by_prefix_and_by_tag() {
    let backend = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncache-tag: blue, green\r\ncontent-length: 2\r\n\r\nok",
    ));
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let log = dir.path().join("access.log");
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n[caches.main]\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         access_log = {{ path = \"{}\" }}\n\n\
         [[listeners.web.routes]]\nupstream = \"app\"\ncache = {{ store = \"main\" }}\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        log.display(),
        backend.target()
    );
    let path = write_file(dir.path(), "cache.toml", &text);
    let _rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let fill = || {
        for p in ["/p/one", "/p/two", "/q/three"] {
            get(port, p, "");
        }
    };
    fill();
    assert_eq!(backend.seen(), 3);
    get(port, "/p/one", "");
    let (status, body) = admin(admin_port, "GET", "/api/caches");
    assert_eq!(status, 200);
    assert!(
        body.contains("\"name\":\"main\"") && body.contains("\"objects\":3"),
        "{body}"
    );
    // Purge one URL (percent-encoded, the host in any case).
    let (status, body) = admin(
        admin_port,
        "POST",
        "/api/caches/main/purge?url=http%3A%2F%2FApp.test%2Fp%2Fone",
    );
    assert_eq!((status, body.trim()), (200, r#"{"cache":"main","removed":1}"#));
    fill();
    assert_eq!(backend.seen(), 1, "only the purged URL went upstream again");
    // Ban a prefix.
    let (_, body) = admin(admin_port, "POST", "/api/caches/main/ban?prefix=http://app.test/p/");
    assert!(body.contains("\"removed\":2"), "{body}");
    fill();
    assert_eq!(backend.seen(), 2);
    // Ban a tag every response carried.
    let (_, body) = admin(admin_port, "POST", "/api/caches/main/ban?tag=green");
    assert!(body.contains("\"removed\":3"), "{body}");
    fill();
    assert_eq!(backend.seen(), 3);
    // The metrics count what the cache did (each request once its response is out: the
    // scrape may come first), and what the store holds.
    let mut samples = Vec::new();
    let count = |samples: &[common::scrape::Sample], result: &str| {
        common::scrape::value(
            samples,
            "rampart_http_cache_requests_total",
            &[("listener", "web"), ("route", "web#1"), ("result", result)],
        )
    };
    common::tls::eventually("the metrics count every request", || {
        samples = common::scrape::scrape(admin_port);
        count(&samples, "hit") + count(&samples, "miss") >= 13.0
    });
    assert_eq!(
        (count(&samples, "hit"), count(&samples, "miss")),
        (4.0, 9.0),
        "as the backend saw them: 3 + 1 + 2 + 3 misses"
    );
    assert_eq!(
        common::scrape::value(
            &samples,
            "rampart_cache_objects",
            &[("cache", "main"), ("tier", "memory")]
        ),
        3.0
    );
    // The access log says what the cache did.
    let lines = common::tls::log_lines_once(&log, "a cache hit in the access log", |l| {
        l.contains("\"cache\":\"hit\"")
    });
    assert!(lines.iter().any(|l| l.contains("\"cache\":\"miss\"")), "{lines:?}");
    // The command line does the same through the admin API.
    let admin_addr = format!("127.0.0.1:{admin_port}");
    let (code, out, err) = common::run_rampart(
        dir.path(),
        &["cache", "purge", "http://app.test/q/three", "--admin", &admin_addr],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), r#"{"cache":"main","removed":1}"#);
    let (code, out, _) = common::run_rampart(dir.path(), &["cache", "ban", "--tag", "blue", "--admin", &admin_addr]);
    assert_eq!((code, out.trim()), (0, r#"{"cache":"main","removed":2}"#));
    let (code, _, err) = common::run_rampart(
        dir.path(),
        &[
            "cache",
            "purge",
            "http://app.test/",
            "--cache",
            "nope",
            "--admin",
            &admin_addr,
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("404") && err.contains("no cache `nope`"), "{err}");
    // Mistakes get a clear answer.
    assert_eq!(admin(admin_port, "POST", "/api/caches/nope/purge?url=x").0, 404);
    assert_eq!(admin(admin_port, "POST", "/api/caches/main/ban").0, 400);
    assert_eq!(admin(admin_port, "GET", "/api/caches/main/ban?tag=x").0, 405);
}
