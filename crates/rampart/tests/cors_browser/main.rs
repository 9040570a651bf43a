//! CORS as a browser does it: headless Chromium (through ChromeDriver, installed by
//! `scripts/browser` when missing) loads a page from one Rampart listener and calls an API on
//! another port (another origin) with `fetch`: a `PUT` with a custom header and a JSON body, so
//! the browser first sends its own preflight. The `cors` filter answers it, the call goes
//! through, and the page can read the header the filter exposes. A call to a route whose `cors`
//! allows another origin fails in the browser, as it must.

use crate::common;
use crate::status_page::webdriver;

use std::thread;
use std::time::{Duration, Instant};

use common::http::{HttpBackend, Reply};
use common::{free_port, write_file, Rampart};
use serde_json::Value;
use webdriver::{chromedriver, ChromeDriver, Session, CHROMIUM_ARGS};

const WAIT: Duration = Duration::from_secs(20);

/// Polls the page's `window.results[key]` until the script has set it.
fn result(session: &Session, key: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = session.execute(&format!("return window.results && window.results['{key}']"));
        if !v.is_null() {
            return v;
        }
        assert!(Instant::now() < deadline, "the page's fetch `{key}` did not finish");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_page_calls_a_cross_origin_api_through_the_cors_filter() {
    let driver_path = chromedriver();
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (page_port, api_port) = (free_port(), free_port());
    let page_origin = format!("http://127.0.0.1:{page_port}");
    let log = dir.path().join("api.log");
    let config = format!(
        r#"[listeners.page]
bind = "127.0.0.1:{page_port}"
protocol = "http"

[[listeners.page.routes]]
respond = {{ status = 200, body = "<!doctype html><title>app</title><p>app</p>", headers = {{ "content-type" = "text/html" }} }}

[listeners.api]
bind = "127.0.0.1:{api_port}"
protocol = "http"
access_log = {{ path = "{log}", format = "json" }}
filters = [{{ type = "request_id" }}]

[[listeners.api.routes]]
match = {{ path_prefix = "/api/" }}
upstream = "app"
filters = [{{ type = "cors", origins = ["{page_origin}"], methods = ["GET", "PUT"], allow_headers = ["x-token", "content-type"], expose_headers = ["x-request-id"], max_age = "1m" }}]

[[listeners.api.routes]]
match = {{ path_prefix = "/other/" }}
upstream = "app"
filters = [{{ type = "cors", origins = ["https://elsewhere.example"] }}]

[upstreams.app]
targets = ["{}"]
"#,
        backend.target(),
        log = log.display(),
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);

    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("{page_origin}/"));
    session.execute(&format!(
        r#"window.results = {{}};
const api = "http://127.0.0.1:{api_port}";
fetch(api + "/api/items/7", {{ method: "PUT", headers: {{ "X-Token": "t0ken", "Content-Type": "application/json" }}, body: "{{\"n\":1}}" }})
  .then(r => r.text().then(t => {{ window.results.put = {{ status: r.status, id: r.headers.get("x-request-id"), body: t }}; }}))
  .catch(e => {{ window.results.put = {{ error: String(e) }}; }});
fetch(api + "/other/x")
  .then(r => {{ window.results.other = {{ status: r.status }}; }})
  .catch(e => {{ window.results.other = {{ error: String(e) }}; }});"#
    ));
    let put = result(&session, "put");
    assert_eq!(put["status"], 200, "{put}");
    let id = put["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the page reads the exposed x-request-id: {put}"));
    assert_eq!(id.len(), 36, "{put}");
    let body = put["body"].as_str().unwrap().to_ascii_lowercase();
    assert!(body.starts_with("put /api/items/7"), "{body}");
    assert!(body.contains("x-token: t0ken"), "{body}");
    let other = result(&session, "other");
    assert!(
        other["error"].as_str().is_some_and(|e| e.contains("TypeError")),
        "the browser refuses a response its origin may not read: {other}"
    );

    // The browser's own preflight reached Rampart and was answered there, never upstream.
    let deadline = Instant::now() + WAIT;
    let lines: Vec<Value> = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if lines.len() >= 3 {
            break lines;
        }
        assert!(Instant::now() < deadline, "access log: {text}");
        thread::sleep(Duration::from_millis(50));
    };
    let preflight = lines
        .iter()
        .find(|l| l["method"] == "OPTIONS")
        .unwrap_or_else(|| panic!("no preflight logged: {lines:?}"));
    assert_eq!(
        (preflight["path"].as_str(), preflight["status"].as_u64()),
        (Some("/api/items/7"), Some(204))
    );
    let mut heads = Vec::new();
    while let Ok(head) = backend.heads.try_recv() {
        heads.push(head);
    }
    assert!(heads.iter().all(|h| !h.starts_with("OPTIONS")), "{heads:?}");
}
