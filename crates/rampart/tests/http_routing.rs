//! Gateway routing through real sockets: matchers, actions, filters, access logs.

use crate::common;

use std::io::Write;

use common::http::{get, read_response, send, HttpBackend, Reply};
use common::*;

const ROUTES: &str = r#"
[[listeners.gw.routes]]
name = "health"
match = { path = "/healthz" }
respond = { status = 200, body = "ok\n", headers = { "x-served-by" = "rampart" } }

[[listeners.gw.routes]]
name = "old"
match = { path_prefix = "/old/" }
redirect = { to = "https://new.example", status = 301, keep_path = true }

[[listeners.gw.routes]]
name = "api"
match = { host = "*.example.com", path_prefix = "/api/", methods = ["GET", "POST"] }
upstream = "api"
strip_prefix = "/api"
request_headers = { set = { "x-route" = "api" }, remove = ["x-internal"] }
response_headers = { add = { "x-gateway" = "rampart" } }
max_body_size = "8"

[[listeners.gw.routes]]
name = "beta"
match = { path_glob = "/beta/*", headers = { "x-beta" = "1" }, query = { v = "2" } }
upstream = "beta"

[[listeners.gw.routes]]
name = "users"
match = { path_regex = "^/user/[0-9]+$" }
upstream = "api"
rewrite = { regex = "^/user/([0-9]+)$", replacement = "/users?id=$1" }
"#;

struct Gateway {
    proxy: Rampart,
    port: u16,
    api: HttpBackend,
    beta: HttpBackend,
    dir: tempfile::TempDir,
}

fn gateway(access_format: &str) -> Gateway {
    let api = HttpBackend::start(Reply::Echo);
    let beta = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("access.log");
    let cfg = format!(
        "[listeners.gw]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\naccess_log = {{ path = \"{}\", format = \"{access_format}\" }}\n{ROUTES}\n\
         [upstreams.api]\ntargets = [\"{}\"]\n[upstreams.beta]\ntargets = [\"{}\"]\n",
        log.display(),
        api.target(),
        beta.target()
    );
    let path = write_file(dir.path(), "gw.toml", &cfg);
    let proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    Gateway {
        proxy,
        port,
        api,
        beta,
        dir,
    }
}

fn request(port: u16, raw: &str) -> (u16, String, String) {
    let mut client = connect(port);
    let (status, head, body) = send(&mut client, raw.as_bytes());
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn respond_redirect_and_not_found() {
    let gw = gateway("json");
    let (status, head, body) = request(gw.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert!(head.contains("x-served-by: rampart"), "{head}");
    let (status, head, _) = request(gw.port, "GET /old/page?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 301);
    assert!(head.contains("location: https://new.example/old/page?q=1"), "{head}");
    let (status, _, body) = request(gw.port, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((status, body.as_str()), (404, "404 Not Found\n"));
    assert_eq!(gw.api.connections.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn host_path_and_method_matching_with_prefix_strip_and_header_edits() {
    let gw = gateway("json");
    let (status, head, body) = request(
        gw.port,
        "GET /api/items?id=3 HTTP/1.1\r\nHost: shop.example.com:8080\r\nX-Internal: 1\r\nX-Route: spoofed\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert!(head.contains("x-gateway: rampart"), "{head}");
    assert!(body.starts_with("GET /items?id=3 HTTP/1.1"), "{body}");
    let upstream = gw.api.next_head().to_ascii_lowercase();
    assert!(
        upstream.contains("x-route: api") && !upstream.contains("spoofed") && !upstream.contains("x-internal"),
        "{upstream}"
    );
    // Wrong host, wrong method: no route.
    assert_eq!(
        request(gw.port, "GET /api/items HTTP/1.1\r\nHost: example.com\r\n\r\n").0,
        404
    );
    assert_eq!(
        request(gw.port, "DELETE /api/items HTTP/1.1\r\nHost: a.example.com\r\n\r\n").0,
        404
    );
}

#[test]
fn body_limits_are_413() {
    let gw = gateway("json");
    let ok = "POST /api/x HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 8\r\n\r\n12345678";
    assert_eq!(request(gw.port, ok).0, 200);
    let big = "POST /api/x HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 9\r\n\r\n123456789";
    assert_eq!(request(gw.port, big).0, 413);
    let chunked =
        "POST /api/x HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n0\r\n\r\n";
    assert_eq!(request(gw.port, chunked).0, 413);
    // A body refused in one piece never reached the backend: only the first request did.
    assert!(gw.api.next_head().starts_with("POST /x "));
    assert!(gw.api.heads.try_recv().is_err());
    // A body over the limit that arrives after its head is refused as it streams.
    let mut client = connect(gw.port);
    client
        .write_all(b"POST /api/x HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    assert!(gw.api.next_head().starts_with("POST /x "));
    client.write_all(b"5\r\n12345\r\n5\r\n67890\r\n0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut client).0, 413);
}

#[test]
fn glob_header_query_and_regex_rewrite() {
    let gw = gateway("json");
    assert_eq!(
        request(gw.port, "GET /beta/a?v=2 HTTP/1.1\r\nHost: x\r\nX-Beta: 1\r\n\r\n").0,
        200
    );
    assert!(gw.beta.next_head().starts_with("GET /beta/a?v=2 "));
    for miss in [
        "GET /beta/a?v=1 HTTP/1.1\r\nHost: x\r\nX-Beta: 1\r\n\r\n",
        "GET /beta/a?v=2 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /beta/a/b?v=2 HTTP/1.1\r\nHost: x\r\nX-Beta: 1\r\n\r\n",
    ] {
        assert_eq!(request(gw.port, miss).0, 404, "{miss}");
    }
    let (status, _, body) = request(gw.port, "GET /user/42 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    assert!(body.starts_with("GET /users?id=42 HTTP/1.1"), "{body}");
}

/// `--access-log -` writes the lines on standard output (no file named `-`); `bytes` counts the
/// whole response (head and body), `body_bytes` the body alone, and the combined format's size
/// field is the body's, as nginx's `$body_bytes_sent`.
#[test]
fn access_log_on_stdout_with_body_bytes_beside_bytes() {
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    for format in ["json", "combined"] {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let target = backend.target();
        let args = [
            "http",
            "--listen",
            &listen,
            "--to",
            &target,
            "--workers",
            "1",
            "--access-log",
            "-",
            "--access-log-format",
            format,
        ];
        let mut proxy = Rampart::start(dir.path(), &args);
        let (status, head, body) = send(&mut connect(port), &get("/sized"));
        assert_eq!(status, 200);
        assert!(!body.is_empty());
        let (code, stdout) = proxy.stop_with_stdout();
        assert_eq!(code, 0);
        assert!(!dir.path().join("-").exists(), "no file named `-`");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{stdout}");
        if format == "json" {
            let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
            assert_eq!(line["path"], "/sized");
            assert_eq!(line["bytes"], (head.len() + body.len()) as u64, "{line}");
            assert_eq!(line["body_bytes"], body.len() as u64, "{line}");
        } else {
            let size = format!("\"GET /sized HTTP/1.1\" 200 {} ", body.len());
            assert!(lines[0].contains(&size), "{size} in {}", lines[0]);
        }
    }
    // The config's `path = "-"` is standard output too.
    let port = free_port();
    let cfg = format!(
        "[listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"app\"\n\
         access_log = {{ path = \"-\" }}\n[upstreams.app]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let path = write_file(dir.path(), "stdout.toml", &cfg);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    assert_eq!(send(&mut connect(port), &get("/from-config")).0, 200);
    let (code, stdout) = proxy.stop_with_stdout();
    assert_eq!(code, 0);
    assert!(stdout.contains("\"path\":\"/from-config\""), "{stdout}");
    assert!(!dir.path().join("-").exists(), "no file named `-`");
}

#[test]
fn access_log_lines_in_json_and_combined() {
    for format in ["json", "combined"] {
        let mut gw = gateway(format);
        request(
            gw.port,
            "GET /api/items HTTP/1.1\r\nHost: a.example.com\r\nUser-Agent: test-agent\r\n\r\n",
        );
        request(gw.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        request(gw.port, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        assert_eq!(gw.proxy.stop(), 0);
        let log = std::fs::read_to_string(gw.dir.path().join("access.log")).unwrap();
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 3, "{log}");
        if format == "json" {
            assert!(
                lines[0]
                    .contains("\"method\":\"GET\",\"path\":\"/api/items\",\"host\":\"a.example.com\",\"protocol\":\"HTTP/1.1\",\"status\":200"),
                "{}",
                lines[0]
            );
            assert!(
                lines[0].contains("\"route\":\"api\"")
                    && lines[0].contains(&format!("\"upstream_target\":\"{}\"", gw.api.target())),
                "{}",
                lines[0]
            );
            assert!(
                lines[0].contains("\"upstream_time_ms\":") && lines[0].contains("\"user_agent\":\"test-agent\""),
                "{}",
                lines[0]
            );
            assert!(
                lines[1].contains("\"route\":\"health\"") && lines[1].contains("\"upstream_target\":null"),
                "{}",
                lines[1]
            );
            assert!(
                lines[2].contains("\"status\":400") && lines[2].contains("\"error\":\"bad_request\""),
                "{}",
                lines[2]
            );
        } else {
            assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
            assert!(lines[0].contains("] \"GET /api/items HTTP/1.1\" 200 "), "{}", lines[0]);
            assert!(lines[0].contains(" \"-\" \"test-agent\" api "), "{}", lines[0]);
            assert!(
                lines[2].contains("\" 400 ") && lines[2].ends_with(" bad_request"),
                "{}",
                lines[2]
            );
        }
    }
}
