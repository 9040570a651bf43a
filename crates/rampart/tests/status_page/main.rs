//! The status page (`GET /` on the admin listener) in a real browser: headless Debian Chromium
//! driven through ChromeDriver (installed by `scripts/browser` when missing). While a client sends
//! keep-alive requests through Rampart to two backends, the page loads with no console error, its
//! requests/s figure becomes positive and moves, and a click on one target's Drain button drains
//! it in the API and stops its traffic while the other target keeps serving. The test leaves a
//! screenshot in the target directory's tmp folder (`status-page.png`; docs/images/ has a copy).
//! With an admin token, the page loads without it, asks for it, and works once given it. With
//! traffic that gets 404s and 503s (a route to an upstream whose only target is down), the page
//! shows the 4xx rate, counts the 503s as the upstream's errors, calls the target down, and
//! charts loopback latencies at the resolution the target table shows them. A listener's file
//! certificate and an ACME name still being obtained appear in the certificate table with their
//! state and, for the name, the CA's error (screenshot `status-page-certificates.png`). The HTTP
//! cache panel is `caches.rs`'s.
//!
//! It lives with the other end-to-end tests (the binary is `CARGO_BIN_EXE_rampart`, always the
//! one just built, and the backends and process harness are shared) because its WebDriver client
//! is a few hundred lines over std sockets that add no dependency to the build.

use crate::common;
mod caches;
pub(crate) mod webdriver;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::http::{get, send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};
use serde_json::Value;
use webdriver::{chromedriver, ChromeDriver, Session, CHROMIUM_ARGS};

/// The longest any one wait may take: the history is sampled every 5 s, so two samples fit.
const WAIT: Duration = Duration::from_secs(20);

/// Requests a backend answered so far (it reports every head it reads).
struct Counted {
    backend: HttpBackend,
    seen: u64,
}

impl Counted {
    fn count(&mut self) -> u64 {
        self.seen += self.backend.heads.try_iter().count() as u64;
        self.seen
    }
}

/// One client sending keep-alive requests through the proxy until told to stop, `pause_ms`
/// between requests (the test changes it to change the rate).
struct Load {
    stop: Arc<AtomicBool>,
    pause_ms: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, pause_ms: u64) -> Load {
        Load::cycling(port, pause_ms, &["/load"])
    }

    /// Requests `paths` in turn; `failures` counts the answers that were not 200.
    fn cycling(port: u16, pause_ms: u64, paths: &[&str]) -> Load {
        let requests: Vec<Vec<u8>> = paths.iter().map(|p| get(p)).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicU64::new(pause_ms));
        let failures = Arc::new(AtomicU64::new(0));
        let (s, p, f) = (stop.clone(), pause.clone(), failures.clone());
        let thread = thread::spawn(move || {
            let mut client = common::connect(port);
            for request in requests.iter().cycle() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let (status, _, _) = send(&mut client, request);
                if status != 200 {
                    f.fetch_add(1, Ordering::Relaxed);
                    client = common::connect(port);
                }
                thread::sleep(Duration::from_millis(p.load(Ordering::Relaxed)));
            }
        });
        Load {
            stop,
            pause_ms: pause,
            failures,
            thread: Some(thread),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `probe` until it gives `Some`, or fails the test saying `what` after [`WAIT`].
fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Fails the test, saying `what`, if the page logged an error (a script error, a failed request).
fn assert_no_console_error(session: &Session, what: &str) {
    let errors: Vec<Value> = session
        .browser_log()
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}");
}

/// A card's number as the page shows it (`data-value`), once it has one.
fn card(session: &Session, id: &str) -> Option<f64> {
    let value = session.execute(&format!("return document.getElementById('{id}').dataset.value"));
    value.as_str().and_then(|s| s.parse().ok())
}

#[test]
fn the_status_page_shows_live_traffic_and_its_drain_button_stops_a_targets_traffic() {
    let driver_path = chromedriver();
    let mut a = Counted {
        backend: HttpBackend::start(Reply::Echo),
        seen: 0,
    };
    let mut b = Counted {
        backend: HttpBackend::start(Reply::Echo),
        seen: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"backend\"\n\n\
         [upstreams.backend]\ntargets = [\"{}\", \"{}\"]\n",
        a.backend.target(),
        b.backend.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    // A request every 5 ms at first (plus the time each takes).
    let load = Load::start(port, 5);

    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("http://127.0.0.1:{admin_port}/"));

    // The requests/s figure becomes positive; with the load slowed to a request every 20 ms, it
    // shows another positive figure; and the 15-minute total grows.
    let first = wait_until("requests/s above 0", || {
        card(&session, "total-rps").filter(|&v| v > 0.0)
    });
    load.pause_ms.store(20, Ordering::Relaxed);
    let second = wait_until("requests/s to change", || {
        card(&session, "total-rps").filter(|&v| v > 0.0 && v != first)
    });
    let total = wait_until("a 15-minute total", || card(&session, "total-requests"));
    let later = wait_until("the 15-minute total to grow", || {
        card(&session, "total-requests").filter(|&v| v > total)
    });
    println!("requests/s shown: {first} then {second}; 15-minute total {total} then {later}");

    // Both targets are listed and serving, and both got traffic.
    let (ta, tb) = (a.backend.target(), b.backend.target());
    let row = |t: &str| format!("tr[data-target=\"backend/{t}\"]");
    for t in [&ta, &tb] {
        let drained = session.execute(&format!("return document.querySelector('{}').dataset.drained", row(t)));
        assert_eq!(drained, "false", "{t}");
    }
    assert!(a.count() > 0 && b.count() > 0, "round robin reached both targets");

    // Drain target a with its button.
    let button = session
        .find(&format!("{} button[data-action=\"drain\"]", row(&ta)))
        .expect("a Drain button on target a's row");
    session.click(&button);
    wait_until("the API to show target a drained", || {
        let upstreams = common::admin(admin_port, "GET", "/api/upstreams", None).1;
        let targets = upstreams["upstreams"][0]["targets"].as_array().unwrap().clone();
        let state = |t: &str| targets.iter().find(|x| x["target"] == t).unwrap()["drained"].clone();
        (state(&ta) == true && state(&tb) == false).then_some(())
    });
    wait_until("the page to offer Enable for target a", || {
        session
            .find(&format!(
                "{}[data-drained=\"true\"] button[data-action=\"enable\"]",
                row(&ta)
            ))
            .map(|_| ())
    });

    // The client is sequential: once b answers one more request, nothing is in flight to a.
    let b_now = b.count();
    wait_until("b to answer after the drain", || (b.count() > b_now).then_some(()));
    let a_after = a.count();
    let b_after = b.count();
    wait_until("b to answer 50 more requests", || {
        (b.count() >= b_after + 50).then_some(())
    });
    assert_eq!(a.count(), a_after, "the drained target got no request");
    assert_eq!(
        load.failures.load(Ordering::Relaxed),
        0,
        "every request was answered 200"
    );

    // A few intervals on the charts (a reading every 5 s) before the picture.
    wait_until("four intervals of history", || {
        let n = session.execute("return document.getElementById('charts').dataset.intervals");
        (n.as_str().and_then(|n| n.parse::<u32>().ok()) >= Some(4)).then_some(())
    });
    let shot = session.screenshot();
    assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    std::fs::write(&file, shot).unwrap();
    println!("screenshot: {}", file.display());

    // No console error at any point (script errors, failed requests).
    assert_no_console_error(&session, "console errors");
}

#[test]
fn with_a_token_the_page_loads_without_it_and_asks_for_it() {
    let driver_path = chromedriver();
    let backend = HttpBackend::start(Reply::Echo);
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken = \"s3cret\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\nupstream = \"backend\"\n\n\
         [upstreams.backend]\ntargets = [\"{}\"]\n",
        backend.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("http://127.0.0.1:{admin_port}/"));

    // The document came (a browser cannot send the token when it navigates); the API refused the
    // page's requests, so it asks for the token and shows no target.
    let input = wait_until("the token form", || session.find("#token-form:not([hidden]) #token"));
    assert_eq!(
        session.execute("return document.querySelectorAll('#targets tbody tr').length"),
        0
    );
    let refused = session.browser_log();
    assert!(
        refused
            .iter()
            .all(|e| e["message"].as_str().unwrap().contains("status of 401")),
        "only the API's 401s: {refused:#?}"
    );

    session.type_text(&input, "s3cret\n");
    let target = format!("tr[data-target=\"backend/{}\"]", backend.target());
    wait_until("the target table", || session.find(&target));
    // No route caches: no cache panel.
    assert_eq!(
        session.execute("return document.getElementById('caches-section').hidden"),
        true
    );
    assert_eq!(
        session.execute("return sessionStorage.getItem('rampart-admin-token')"),
        "s3cret",
        "kept for this tab"
    );
    assert_eq!(
        session.execute("return document.getElementById('token-form').hidden"),
        true
    );
    assert_no_console_error(&session, "console errors once the token is given");
}

/// A series block's newest figure (`data-FIELD`), once it has one.
fn figure(session: &Session, kind: &str, name: &str, field: &str) -> Option<f64> {
    let value = session.execute(&format!(
        "const b = document.querySelector('.series[data-kind=\"{kind}\"][data-name=\"{name}\"]'); \
         return b ? b.dataset.{field} : null"
    ));
    value.as_str().and_then(|s| s.parse().ok())
}

#[test]
fn the_status_page_shows_4xx_answers_503s_without_a_target_and_a_down_target() {
    let driver_path = chromedriver();
    let live = HttpBackend::start(Reply::Echo);
    // Answers 503 to everything: ejected by outlier detection at its first one, for a minute.
    let failing = HttpBackend::start(Reply::Raw(common::http::UNAVAILABLE));
    let dead = common::dead_target();
    let dir = tempfile::tempdir().unwrap();
    let (admin_port, port) = (free_port(), free_port());
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\
         [[listeners.web.routes]]\nname = \"ok\"\nmatch = {{ path_prefix = \"/ok\" }}\nupstream = \"backend\"\n\
         [[listeners.web.routes]]\nname = \"gone\"\nmatch = {{ path_prefix = \"/gone\" }}\nupstream = \"gone\"\n\n\
         [upstreams.backend]\ntargets = [\"{}\", \"{}\"]\n\
         outlier_detection = {{ consecutive_5xx = 1, base_ejection_time = \"60s\" }}\n\
         [upstreams.gone]\ntargets = [\"{dead}\"]\n\
         [upstreams.gone.health_check]\ninterval = \"50ms\"\nfall = 1\nrise = 1\n",
        live.target(),
        failing.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("target is down");
    // 200s through `ok`, 404s (no route) and 503s (`gone` has no target up), in turn.
    let _load = Load::cycling(port, 5, &["/ok", "/ok", "/missing", "/gone"]);

    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("http://127.0.0.1:{admin_port}/"));

    // 4xx answers have their card and their rate on the listener and on the routes' block.
    wait_until("4xx answers/s above 0", || {
        card(&session, "total-4xx").filter(|&v| v > 0.0)
    });
    wait_until("the listener's 4xx/s above 0", || {
        figure(&session, "listener", "web", "clientErrors").filter(|&v| v > 0.0)
    });
    wait_until("the unrouted requests' 4xx/s above 0", || {
        figure(&session, "route", "web/(unrouted)", "clientErrors").filter(|&v| v > 0.0)
    });
    // The 503s of the route to `gone` are the upstream's errors, though no target was tried.
    wait_until("the gone upstream's errors/s above 0", || {
        figure(&session, "upstream", "gone", "errors").filter(|&v| v > 0.0)
    });
    let upstreams = common::admin(admin_port, "GET", "/api/upstreams", None).1;
    let gone = upstreams["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "gone")
        .unwrap();
    assert!(gone["no_target_total"].as_u64().unwrap() > 0, "{gone}");
    assert!(gone["retries_total"].is_u64(), "{gone}");
    // Its target is down, and says so.
    let row = format!("tr[data-target=\"gone/{dead}\"]");
    wait_until("the dead target's state to read down", || {
        let state = session.execute(&format!(
            "const r = document.querySelector('{row}'); \
             return r ? r.querySelector('td[data-col=\"state\"]').textContent : null"
        ));
        (state == "down").then_some(())
    });
    // The failing target is ejected, and the page says so, why and for how long.
    let row = format!("tr[data-target=\"backend/{}\"]", failing.target());
    let (state, passive) = wait_until("the failing target's state to read ejected", || {
        let cell = |col: &str| {
            session.execute(&format!(
                "const r = document.querySelector('{row}'); \
                 return r ? r.querySelector('td[data-col=\"{col}\"]').textContent : null"
            ))
        };
        (cell("state") == "ejected").then(|| (cell("state"), cell("passive")))
    });
    let passive = passive.as_str().unwrap_or_default();
    assert!(
        passive.starts_with("ejected ") && passive.ends_with("(5xx responses)"),
        "{state}: {passive}"
    );

    // Loopback latencies are charted at their own resolution: with a first bucket from 0 to
    // 0.5 ms every interval whose responses all took less read p50 0.25 ms and p99 0.495 ms
    // (the bucket's interpolation points), whatever the latency. (The admin API test checks the
    // buckets themselves, the history's unit tests the percentiles of 70 µs responses.)
    let live_row = format!("tr[data-target=\"backend/{}\"]", live.target());
    let (p50, p99, ewma) = wait_until("the backend's percentiles at their own resolution", || {
        let p50 = figure(&session, "upstream", "backend", "p50")?;
        let p99 = figure(&session, "upstream", "backend", "p99")?;
        let ewma = session.execute(&format!(
            "return document.querySelector('{live_row} td[data-col=\"latency\"]').dataset.value"
        ));
        let ewma: f64 = ewma.as_str()?.parse().ok()?;
        (p50 <= p99 && (p50, p99) != (0.25, 0.495)).then_some((p50, p99, ewma))
    });
    println!("backend p50 {p50} ms, p99 {p99} ms, latency (peak EWMA) {ewma} ms");
    assert_no_console_error(&session, "console errors");
}

#[test]
fn the_status_page_lists_file_certificates_and_acme_names_with_their_state() {
    let driver_path = chromedriver();
    let dir = tempfile::tempdir().unwrap();
    let ca = common::tls::Ca::new("status page test CA");
    let pair = ca
        .issue(&common::tls::CertSpec::new(&["files.example.test"]))
        .write(dir.path(), "files");
    let (admin_port, port) = (free_port(), free_port());
    // An ACME name whose CA nobody answers for: it stays `obtaining`, with the error.
    let nowhere = format!("https://127.0.0.1:{}/dir", free_port());
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [acme]\ndirectory = \"{nowhere}\"\nstorage = \"acme\"\n\n\
         [listeners.secure]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\n{}\nacme = [\"acme.example.test\"]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200 }}\n",
        common::tls::certificates(&[pair])
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("acme: acme.example.test:");
    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("http://127.0.0.1:{admin_port}/"));

    let row_text = |selector: &str| {
        session.execute(&format!(
            "const r = document.querySelector('{selector}'); return r ? r.textContent : null"
        ))
    };
    let file = wait_until("the file certificate's row", || {
        row_text("#certificates tr[data-cert^=\"file:secure:\"][data-state=\"valid\"]")
            .as_str()
            .map(str::to_string)
    });
    assert!(
        file.contains("files.example.test") && file.contains(" d left)"),
        "{file}"
    );
    let acme = wait_until("the ACME name's row with its error", || {
        row_text("#certificates tr[data-cert=\"acme:acme.example.test\"][data-state=\"obtaining\"]")
            .as_str()
            .filter(|t| t.contains("failed:"))
            .map(str::to_string)
    });
    assert!(acme.contains(&format!("ACME {nowhere}")), "{acme}");
    assert!(
        acme.contains(&format!("ACME directory {nowhere}")),
        "the CA's error: {acme}"
    );
    assert_eq!(
        session.execute("return document.getElementById('certificates-section').hidden"),
        false
    );
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page-certificates.png");
    std::fs::write(&file, session.screenshot()).unwrap();
    assert_no_console_error(&session, "console errors");
}
