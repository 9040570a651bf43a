//! A small W3C WebDriver client over std sockets, for ChromeDriver driving headless Chromium:
//! the few commands the status page test needs (navigate, run a script, find and click an element,
//! the browser's console log, a screenshot). WebDriver is JSON over HTTP/1.1; a client crate
//! (fantoccini) would bring an async stack and about eighty crates into the build for this. Shared
//! by the browser tests (the status page, CORS).
// Each browser test uses a part of it.
#![allow(dead_code)]

use crate::common::Bounded;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--window-size=1400,1000",
    "--disable-dev-shm-usage",
    // This machine's network is closed: no background fetches, updates or sync to fail at.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
];

/// `CHROMEDRIVER` if set, else what `scripts/browser` installs (when missing) and prints. Once
/// per process: the tests run side by side, and two package installs would fight over dpkg's lock.
pub fn chromedriver() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("CHROMEDRIVER") {
            return path.into();
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/browser");
        let out = Command::new(&script)
            .output_within(crate::common::INSTALL_WAIT)
            .expect("run scripts/browser");
        assert!(
            out.status.success(),
            "scripts/browser failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// The W3C key of an element reference in WebDriver's answers.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process on a free port of 127.0.0.1; killed on drop.
pub struct ChromeDriver {
    child: Child,
    pub port: u16,
}

impl ChromeDriver {
    /// Starts `driver` and waits until its `/status` says it is ready for sessions.
    pub fn start(driver: &Path, wait: Duration) -> ChromeDriver {
        // Bind port 0 for a free port, then hand it to chromedriver (it takes no port 0).
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let mut driver = ChromeDriver { child, port };
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(status) = call(port, "GET", "/status", None) {
                if status["ready"] == true {
                    return driver;
                }
            }
            if let Ok(Some(exit)) = driver.child.try_wait() {
                panic!("chromedriver exited at start: {exit}");
            }
            assert!(Instant::now() < deadline, "chromedriver not ready within {wait:?}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// A new headless browser session with the browser's console log kept.
    pub fn session(&self, args: &[&str]) -> Session {
        let capabilities = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"args": args},
                "goog:loggingPrefs": {"browser": "ALL"},
            }}
        });
        let value = call(self.port, "POST", "/session", Some(&capabilities))
            .unwrap_or_else(|e| panic!("cannot start a browser session: {e}"));
        Session {
            port: self.port,
            id: value["sessionId"].as_str().expect("a session id").to_string(),
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser session; closed (the browser quits) on drop.
pub struct Session {
    port: u16,
    id: String,
}

impl Session {
    fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}{path}", self.id);
        call(self.port, method, &path, body).unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(&json!({ "url": url })));
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub fn execute(&self, script: &str) -> Value {
        self.command("POST", "/execute/sync", Some(&json!({ "script": script, "args": [] })))
    }

    /// The first element matching a CSS selector, if any.
    pub fn find(&self, css: &str) -> Option<String> {
        let path = format!("/session/{}/element", self.id);
        let query = json!({ "using": "css selector", "value": css });
        call(self.port, "POST", &path, Some(&query))
            .ok()
            .and_then(|v| v[ELEMENT_KEY].as_str().map(str::to_string))
    }

    /// Clicks an element as a user would (scrolled into view, pointer events).
    pub fn click(&self, element: &str) {
        self.command("POST", &format!("/element/{element}/click"), Some(&json!({})));
    }

    /// Types `text` into an element (an input).
    pub fn type_text(&self, element: &str, text: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(&json!({ "text": text })),
        );
    }

    /// The browser's console entries since the last call (`level`, `message`, `source`).
    pub fn browser_log(&self) -> Vec<Value> {
        let log = self.command("POST", "/se/log", Some(&json!({ "type": "browser" })));
        log.as_array().cloned().unwrap_or_default()
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let value = self.command("GET", "/screenshot", None);
        base64_decode(value.as_str().expect("base64 PNG"))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = call(self.port, "DELETE", &format!("/session/{}", self.id), None);
    }
}

/// One WebDriver command: its `value`, or the error's message.
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    // ChromeDriver answers with a Content-Length and may keep the connection open: read just that.
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).map_err(|e| e.to_string())?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().map_err(|_| format!("bad length {value:?}"))?;
            }
        }
    }
    let mut text = vec![0u8; length];
    reader.read_exact(&mut text).map_err(|e| e.to_string())?;
    let answer: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&text)))?;
    let value = answer["value"].clone();
    if status == 200 {
        Ok(value)
    } else {
        Err(format!("{status}: {} {}", value["error"], value["message"]))
    }
}

/// Standard base64 (with padding, no line breaks), as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let digit = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c:#x}"),
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut n) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        bits = bits << 6 | u32::from(digit(c));
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

#[test]
fn base64_decodes_every_padding() {
    assert_eq!(base64_decode("TWFu"), b"Man");
    assert_eq!(base64_decode("TWE="), b"Ma");
    assert_eq!(base64_decode("TQ=="), b"M");
    assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
}
