//! The `static` route action end to end: real files in a temporary root served by the real
//! binary over HTTP/1.1 (plain TCP with sendfile, and TLS), HTTP/2 (curl), with every way out
//! of the root tried.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::http::{header, is_closed, send};
use common::tls::{Ca, CertSpec, ClientOpts};
use common::Bounded;
use common::*;

/// A root with the files the tests ask for, beside a secret the root links to.
struct Site {
    proxy: Rampart,
    port: u16,
    dir: tempfile::TempDir,
    root: PathBuf,
    /// The 1 MiB file's bytes.
    big: Vec<u8>,
}

const APP_JS: &str = "console.log('plain javascript, the uncompressed one');\n";

fn files(dir: &Path) -> (PathBuf, Vec<u8>) {
    let root = dir.join("www");
    for sub in ["docs", "empty", "browse/sub"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    let put = |name: &str, bytes: &[u8]| std::fs::write(root.join(name), bytes).unwrap();
    put("index.html", b"<h1>home</h1>\n");
    put("docs/index.html", b"<h1>docs</h1>\n");
    put("app.js", APP_JS.as_bytes());
    put("app.js.br", b"BROTLI-BYTES");
    put("app.js.gz", b"GZIP-BYTES");
    put("style.css", b"body { color: red }\n");
    put("logo.svg", b"<svg/>");
    put("data.json", b"{}");
    put("font.woff2", b"wOF2");
    put("README", b"no extension");
    put("a b.txt", b"spaced");
    put("browse/<b>&.txt", b"x");
    put("browse/.hidden", b"x");
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    put("big.bin", &big);
    std::fs::write(dir.join("secret.txt"), b"TOP SECRET").unwrap();
    std::os::unix::fs::symlink("../secret.txt", root.join("rel-leak")).unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("abs-leak")).unwrap();
    std::os::unix::fs::symlink("style.css", root.join("inside-link.css")).unwrap();
    (root, big)
}

/// Three routes over one root: `/assets/` (prefix stripped, precompressed siblings), `/browse/`
/// (listings), and everything else as a single-page application (fallback to /index.html).
fn routes(root: &Path) -> String {
    let root = root.display();
    format!(
        "[[listeners.web.routes]]\nname = \"assets\"\nmatch = {{ path_prefix = \"/assets/\" }}\nstrip_prefix = \"/assets\"\n\
         static = {{ root = \"{root}\", precompressed = true }}\n\n\
         [[listeners.web.routes]]\nname = \"browse\"\nmatch = {{ path_prefix = \"/browse/\" }}\n\
         static = {{ root = \"{root}\", list = true }}\n\n\
         [[listeners.web.routes]]\nname = \"spa\"\nstatic = {{ root = \"{root}\", fallback = \"/index.html\" }}\n"
    )
}

fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let (root, big) = files(dir.path());
    let port = free_port();
    let log = dir.path().join("access.log");
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\naccess_log = {{ path = \"{}\", format = \"json\" }}\n\n{}",
        log.display(),
        routes(&root)
    );
    let path = write_file(dir.path(), "static.toml", &cfg);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    Site {
        proxy,
        port,
        dir,
        root,
        big,
    }
}

impl Site {
    /// `GET path` with extra header lines (each ending in CRLF), on a new connection.
    fn get(&self, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
        self.request("GET", path, headers)
    }

    fn request(&self, method: &str, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
        let mut c = connect(self.port);
        send(
            &mut c,
            format!("{method} {path} HTTP/1.1\r\nHost: site.test\r\n{headers}\r\n").as_bytes(),
        )
    }
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

#[test]
fn files_indexes_and_content_types() {
    let site = site();
    let (status, head, body) = site.get("/assets/style.css", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(text(&body), "body { color: red }\n");
    assert_eq!(header(&head, "content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(header(&head, "content-length"), Some("20"));
    assert_eq!(header(&head, "accept-ranges"), Some("bytes"));
    for (path, want) in [
        ("/assets/app.js", "text/javascript; charset=utf-8"),
        ("/assets/logo.svg", "image/svg+xml"),
        ("/assets/data.json", "application/json; charset=utf-8"),
        ("/assets/font.woff2", "font/woff2"),
        ("/assets/README", "application/octet-stream"),
        ("/assets/", "text/html; charset=utf-8"),
        ("/assets/inside-link.css", "text/css; charset=utf-8"),
    ] {
        let (status, head, _) = site.get(path, "");
        assert_eq!(
            (status, header(&head, "content-type")),
            (200, Some(want)),
            "{path}: {head}"
        );
    }
    assert_eq!(text(&site.get("/assets/a%20b.txt", "").2), "spaced");
    assert_eq!(text(&site.get("/assets/", "").2), "<h1>home</h1>\n");
    // A directory without its slash is redirected (on the client's path, prefix and query kept).
    let (status, head, _) = site.get("/assets/docs?v=1", "");
    assert_eq!(status, 301, "{head}");
    assert_eq!(header(&head, "location"), Some("/assets/docs/?v=1"));
    assert_eq!(text(&site.get("/assets/docs/", "").2), "<h1>docs</h1>\n");
    // No index and no listing: 404, as for what is not there; a file asked for as a directory too.
    for path in [
        "/assets/empty/",
        "/assets/empty",
        "/assets/missing.css",
        "/assets/style.css/",
    ] {
        assert_eq!(site.get(path, "").0, 404, "{path}");
    }
}

#[test]
fn a_single_page_application_falls_back_to_its_index() {
    let site = site();
    for path in ["/", "/users/42/settings", "/missing.png"] {
        let (status, head, body) = site.get(path, "");
        assert_eq!(status, 200, "{path}: {head}");
        assert_eq!(text(&body), "<h1>home</h1>\n", "{path}");
        assert_eq!(header(&head, "content-type"), Some("text/html; charset=utf-8"));
    }
    assert_eq!(text(&site.get("/style.css", "").2), "body { color: red }\n");
    // The fallback is for what is missing, never for a refused path.
    assert_eq!(site.get("/../secret.txt", "").0, 400);
}

#[test]
fn only_get_and_head_are_served_and_head_has_no_body() {
    let site = site();
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let (status, head, _) = site.request(method, "/assets/style.css", "Content-Length: 0\r\n");
        assert_eq!(status, 405, "{method}: {head}");
        assert_eq!(header(&head, "allow"), Some("GET, HEAD"));
    }
    let mut c = connect(site.port);
    let head_req = b"HEAD /assets/big.bin HTTP/1.1\r\nHost: s\r\n\r\n";
    c.write_all(head_req).unwrap();
    // `read_response` frames a HEAD answer by its content-length; read the head alone instead.
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(header(&head, "content-length"), Some("1048576"));
    // The connection goes on, with no body bytes in between.
    let (status, _, body) = send(&mut c, b"GET /assets/style.css HTTP/1.1\r\nHost: s\r\n\r\n");
    assert_eq!((status, text(&body).as_str()), (200, "body { color: red }\n"));
}

/// Reads one response head (to its blank line) and nothing more.
fn read_head(c: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "closed in a head");
        head.push(byte[0]);
    }
    text(&head)
}

#[test]
fn validators_answer_conditional_requests() {
    let site = site();
    let (status, head, _) = site.get("/assets/style.css", "");
    assert_eq!(status, 200);
    let etag = header(&head, "etag").unwrap().to_string();
    let modified = header(&head, "last-modified").unwrap().to_string();
    let meta = std::fs::metadata(site.root.join("style.css")).unwrap();
    let mtime = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(etag, format!("\"{mtime:x}-{:x}\"", meta.len()));
    assert!(modified.ends_with(" GMT") && modified.len() == 29, "{modified}");
    assert!(header(&head, "date").is_some(), "{head}");

    let (status, head, body) = site.get("/assets/style.css", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!((status, body.len()), (304, 0), "{head}");
    assert_eq!(header(&head, "etag"), Some(etag.as_str()));
    assert_eq!(header(&head, "content-length"), None, "{head}");
    let (status, _, _) = site.get("/assets/style.css", "If-None-Match: \"other\"\r\n");
    assert_eq!(status, 200);
    let (status, _, _) = site.get("/assets/style.css", &format!("If-Modified-Since: {modified}\r\n"));
    assert_eq!(status, 304);
    let (status, _, _) = site.get(
        "/assets/style.css",
        "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
    );
    assert_eq!(status, 200);
    let (status, _, _) = site.get("/assets/style.css", "If-Match: \"other\"\r\n");
    assert_eq!(status, 412);
    let (status, _, _) = site.get("/assets/style.css", &format!("If-Match: {etag}\r\n"));
    assert_eq!(status, 200);
    let (status, _, _) = site.get(
        "/assets/style.css",
        "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
    );
    assert_eq!(status, 412);
}

#[test]
fn ranges_are_answered_with_206_or_416() {
    let site = site();
    let (status, head, body) = site.get("/assets/big.bin", "Range: bytes=1000-1999\r\n");
    assert_eq!(status, 206, "{head}");
    assert_eq!(header(&head, "content-range"), Some("bytes 1000-1999/1048576"));
    assert_eq!(header(&head, "content-length"), Some("1000"));
    assert!(body == site.big[1000..2000], "range bytes differ");
    // A large range goes through sendfile from its offset.
    let (status, _, body) = site.get("/assets/big.bin", "Range: bytes=100000-\r\n");
    assert_eq!(status, 206);
    assert!(body == site.big[100_000..], "open range bytes differ");
    let (status, head, body) = site.get("/assets/style.css", "Range: bytes=-4\r\n");
    assert_eq!((status, text(&body).as_str()), (206, "d }\n"), "{head}");
    let (status, head, _) = site.get("/assets/style.css", "Range: bytes=20-\r\n");
    assert_eq!(status, 416, "{head}");
    assert_eq!(header(&head, "content-range"), Some("bytes */20"));
    // Several ranges: the whole file.
    let (status, _, body) = site.get("/assets/style.css", "Range: bytes=0-1,4-5\r\n");
    assert_eq!((status, body.len()), (200, 20));
    // If-Range with a validator that no longer holds: the whole file.
    let (status, _, body) = site.get("/assets/style.css", "Range: bytes=0-3\r\nIf-Range: \"stale\"\r\n");
    assert_eq!((status, body.len()), (200, 20));
    let etag = header(&site.get("/assets/style.css", "").1, "etag")
        .unwrap()
        .to_string();
    let (status, _, body) = site.get(
        "/assets/style.css",
        &format!("Range: bytes=0-3\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!((status, text(&body).as_str()), (206, "body"));
}

#[test]
fn precompressed_siblings_follow_accept_encoding() {
    let site = site();
    for (accept, body, encoding) in [
        (
            "Accept-Encoding: gzip, deflate, br, zstd\r\n",
            "BROTLI-BYTES",
            Some("br"),
        ),
        ("Accept-Encoding: gzip\r\n", "GZIP-BYTES", Some("gzip")),
        ("Accept-Encoding: br;q=0, gzip;q=0.8\r\n", "GZIP-BYTES", Some("gzip")),
        ("Accept-Encoding: zstd\r\n", APP_JS, None),
        ("", APP_JS, None),
    ] {
        let (status, head, got) = site.get("/assets/app.js", accept);
        assert_eq!(status, 200, "{head}");
        assert_eq!(text(&got), body, "{accept}");
        assert_eq!(header(&head, "content-encoding"), encoding, "{accept}");
        assert_eq!(header(&head, "vary"), Some("Accept-Encoding"), "{accept}");
        assert_eq!(header(&head, "content-type"), Some("text/javascript; charset=utf-8"));
    }
    // The SPA route has no `precompressed`: the file as it is, and no Vary.
    let (_, head, got) = site.get("/app.js", "Accept-Encoding: br\r\n");
    assert_eq!((text(&got).as_str(), header(&head, "vary")), (APP_JS, None));
}

#[test]
fn no_request_gets_out_of_the_root() {
    let site = site();
    for (path, want) in [
        ("/assets/../secret.txt", 400),
        ("/assets/docs/../../secret.txt", 400),
        ("/assets/%2e%2e/secret.txt", 400),
        ("/assets/.%2E/secret.txt", 400),
        ("/assets/..%2Fsecret.txt", 400),
        ("/assets/docs%2F..%2F..%2Fsecret.txt", 400),
        ("/assets/..%5Csecret.txt", 400),
        ("/assets/..\\secret.txt", 400),
        ("/assets/secret.txt%00.css", 400),
        ("/assets/%zz", 400),
        ("/assets/rel-leak", 404),
        ("/assets/abs-leak", 404),
        ("/browse/../secret.txt", 400),
    ] {
        let (status, head, body) = site.get(path, "");
        assert_eq!(status, want, "{path}: {head}");
        assert!(!text(&body).contains("TOP SECRET"), "{path}");
    }
    // The SPA route serves its fallback for a link out, never the secret.
    let (status, _, body) = site.get("/rel-leak", "");
    assert_eq!((status, text(&body).as_str()), (200, "<h1>home</h1>\n"));
}

#[test]
fn directory_listings_only_where_asked_for() {
    let site = site();
    let (status, head, body) = site.get("/browse/", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(header(&head, "content-type"), Some("text/html; charset=utf-8"));
    let page = text(&body);
    assert!(
        page.contains("<a href=\"./%3Cb%3E%26.txt\">&lt;b&gt;&amp;.txt</a>"),
        "{page}"
    );
    assert!(!page.contains("hidden"), "{page}");
    assert!(page.contains("<title>Index of /browse/</title>"), "{page}");
    assert!(page.contains("<a href=\"./sub/\">sub/</a>"), "{page}");
    let (status, head, _) = site.get("/browse/sub", "");
    assert_eq!((status, header(&head, "location")), (301, Some("/browse/sub/")));
    let (status, _, body) = site.get("/browse/sub/", "");
    assert_eq!(status, 200);
    assert!(text(&body).contains("Index of /browse/sub/"));
    assert_eq!(site.get("/assets/browse/", "").0, 404);
}

#[test]
fn a_large_file_leaves_byte_exact_twice_on_one_connection_and_is_logged() {
    let site = site();
    let mut c = connect(site.port);
    for _ in 0..2 {
        let (status, head, body) = send(&mut c, b"GET /assets/big.bin HTTP/1.1\r\nHost: s\r\n\r\n");
        assert_eq!(status, 200, "{head}");
        assert_eq!(body.len(), site.big.len());
        assert!(body == site.big, "bytes differ");
    }
    let (status, _, body) = send(
        &mut c,
        b"GET /assets/style.css HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((status, body.len()), (200, 20));
    assert!(is_closed(&mut c));
    let lines = json_log_lines(&site.dir.path().join("access.log"), 3);
    for line in &lines[..2] {
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["route"], "assets", "{line}");
        assert!(line["bytes"].as_u64().unwrap() > 1 << 20, "{line}");
    }
    let _ = &site.proxy;
}

/// `curl --http2-prior-knowledge ARGS URL`: the response head and body.
fn curl_h2(dir: &Path, args: &[&str], url: &str) -> (String, Vec<u8>) {
    let (head, body) = (dir.join("h2-head"), dir.join("h2-body"));
    // curl writes no body file for a response without one.
    let _ = std::fs::remove_file(&body);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge", "-D"])
        .arg(&head)
        .arg("-o")
        .arg(&body)
        .args(args)
        .arg(url)
        .output_within(common::TOOL_WAIT)
        .expect("curl runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    (
        std::fs::read_to_string(&head).unwrap(),
        std::fs::read(&body).unwrap_or_default(),
    )
}

#[test]
fn http2_clients_get_files_ranges_and_304() {
    let site = site();
    let dir = site.dir.path();
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", site.port);
    let (head, body) = curl_h2(dir, &[], &url("/assets/big.bin"));
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(body == site.big, "bytes differ over HTTP/2");
    let (head, body) = curl_h2(dir, &["-H", "Range: bytes=10-19"], &url("/assets/big.bin"));
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    assert_eq!(header(&head, "content-range"), Some("bytes 10-19/1048576"));
    assert!(body == site.big[10..20]);
    let etag = header(&head, "etag").unwrap().to_string();
    let (head, body) = curl_h2(dir, &["-H", &format!("If-None-Match: {etag}")], &url("/assets/big.bin"));
    assert!(head.starts_with("HTTP/2 304"), "{head}");
    assert!(body.is_empty());
    let (head, body) = curl_h2(dir, &["-I"], &url("/assets/big.bin"));
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(header(&head, "content-length"), Some("1048576"));
    // With -I curl writes the head where the body would go: no file bytes came.
    assert_eq!(text(&body), head);
    let (head, _) = curl_h2(dir, &["-X", "POST"], &url("/assets/big.bin"));
    assert!(head.starts_with("HTTP/2 405"), "{head}");
    let (head, _) = curl_h2(dir, &["--path-as-is"], &url("/assets/../secret.txt"));
    assert!(head.starts_with("HTTP/2 400"), "{head}");
}

#[test]
fn a_large_file_over_tls_is_copied_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (root, big) = files(dir.path());
    let ca = Ca::new("Rampart static test CA");
    let (cert, key) = ca.issue(&CertSpec::new(&["localhost"])).write(dir.path(), "localhost");
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n{}\n\
         [listeners.web.tls]\ncertificates = [{{ cert = \"{cert}\", key = \"{key}\" }}]\n",
        routes(&root)
    );
    let (_proxy, _) = common::tls::start_config(dir.path(), &cfg, 1);
    let mut tls = common::tls::handshake(port, &ClientOpts::new(&ca).build(), "localhost").unwrap();
    for _ in 0..2 {
        let got = common::tls::request(&mut tls, b"GET /assets/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        assert_eq!(got.status, 200, "{}", got.head);
        assert!(got.body == big, "bytes differ over TLS");
    }
}

#[test]
fn bad_static_settings_are_reported_at_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nstatic = {{ root = \"{}\" }}\n\n\
         [[listeners.web.routes]]\nstatic = {{ root = \"{}\", fallback = \"index.html\" }}\n",
        missing.display(),
        dir.path().display()
    );
    let path = write_file(dir.path(), "bad.toml", &cfg);
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "{path}:6:19: static root `{}`: No such file",
            missing.display()
        )),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{path}:9:{}: fallback `index.html` must start with /",
            34 + dir.path().display().to_string().len()
        )),
        "{err}"
    );
    let unknown = write_file(
        dir.path(),
        "unknown.toml",
        &format!(
            "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
             [[listeners.web.routes]]\nstatic = {{ root = \"{}\", listing = true }}\n",
            dir.path().display()
        ),
    );
    let (code, _, err) = run_rampart(dir.path(), &["check", "-c", &unknown]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown key `listing` (did you mean `list`?)"), "{err}");
    assert!(err.starts_with(&format!("{unknown}:6:")), "{err}");
}

/// A deploy that swaps the `current` link the root is named by is served within a second, with
/// no reload: each worker keeps the root it opened for the rest of that second only.
#[test]
fn a_swapped_current_link_is_served_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    for (release, text) in [("v1", "one\n"), ("v2", "two\n")] {
        std::fs::create_dir_all(dir.path().join(release)).unwrap();
        std::fs::write(dir.path().join(release).join("index.html"), text).unwrap();
    }
    let current = dir.path().join("current");
    std::os::unix::fs::symlink("v1", &current).unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nstatic = {{ root = \"{}\" }}\n",
        current.display()
    );
    let path = write_file(dir.path(), "static.toml", &cfg);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let get = || send(&mut connect(port), b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").2;
    assert_eq!(get(), b"one\n");
    // Swapped as deploy tools do: a new link renamed over the old one.
    std::os::unix::fs::symlink("v2", dir.path().join("current.new")).unwrap();
    std::fs::rename(dir.path().join("current.new"), &current).unwrap();
    // Polled (the root is opened anew in the next second), within the harness's bound.
    let swapped = std::time::Instant::now();
    while get() != b"two\n" {
        assert!(swapped.elapsed() < WAIT, "the swap was not followed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Every path a config names is relative to the config file's directory, whatever the working
/// directory (as under systemd): a `static` root and an access log written relative to it.
#[test]
fn relative_paths_are_taken_from_the_config_files_directory() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("etc");
    std::fs::create_dir_all(conf.join("site")).unwrap();
    std::fs::create_dir_all(conf.join("logs")).unwrap();
    std::fs::write(conf.join("site/index.html"), b"<h1>beside the config</h1>\n").unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         access_log = {{ path = \"logs/access.log\", format = \"json\" }}\n\n\
         [[listeners.web.routes]]\nstatic = {{ root = \"site\" }}\n"
    );
    let path = write_file(&conf, "rampart.toml", &cfg);
    // Run from the directory above: neither `site` nor `logs` is there.
    let (code, _, stderr) = run_rampart(dir.path(), &["check", &path]);
    assert_eq!(code, 0, "{stderr}");
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut conn = connect(port);
    let (status, _, body) = send(&mut conn, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((status, body.as_slice()), (200, &b"<h1>beside the config</h1>\n"[..]));
    drop(conn);
    proxy.stop();
    let lines = json_log_lines(&conf.join("logs/access.log"), 1);
    assert_eq!(lines[0]["status"], 200);
    assert!(!dir.path().join("logs").exists());
}

/// `response_headers` edits responses of a success status only, as nginx's `add_header` does:
/// a long cache lifetime for the files does not land on a 404; with `always` it does.
#[test]
fn response_headers_skip_error_answers_unless_always() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/app.js"), b"js").unwrap();
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/always/\" }}\nstrip_prefix = \"/always\"\n\
         static = {{ root = \"www\" }}\n\
         response_headers = {{ set = {{ \"cache-control\" = \"max-age=31536000\" }}, always = true }}\n\n\
         [[listeners.web.routes]]\nstatic = {{ root = \"www\" }}\n\
         response_headers = {{ set = {{ \"cache-control\" = \"max-age=31536000\" }} }}\n"
    );
    let path = write_file(dir.path(), "r.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut conn = connect(port);
    for (path, status, cached) in [
        ("/app.js", 200, true),
        ("/missing.js", 404, false),
        ("/always/app.js", 200, true),
        ("/always/missing.js", 404, true),
    ] {
        let (got, head, _) = send(&mut conn, format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(got, status, "{path}");
        assert_eq!(header(&head, "cache-control").is_some(), cached, "{path}: {head}");
    }
    drop(conn);
    proxy.stop();
}
