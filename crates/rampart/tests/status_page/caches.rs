//! The status page's HTTP cache panel: with a store (`[caches.main]`, with a disk part) that a
//! route caches in, the panel lists the store before any request; after a miss and a hit through
//! the proxy it shows one object in memory and on disk, the hit and the miss, and a hit ratio of
//! 50% (screenshot `status-page-caches.png`).

use std::path::PathBuf;

use super::webdriver::{chromedriver, ChromeDriver, CHROMIUM_ARGS};
use super::{assert_no_console_error, wait_until, WAIT};
use crate::common;
use common::http::{get, header, send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

#[test]
fn the_status_page_shows_a_caches_objects_and_hit_ratio() {
    let driver_path = chromedriver();
    let backend = HttpBackend::start(Reply::Raw(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 2\r\n\r\nok",
    ));
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let (admin_port, port) = (free_port(), free_port());
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [caches.main]\nsize = \"16MiB\"\ndisk = \"{}\"\ndisk_size = \"64MiB\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nname = \"cached\"\nupstream = \"app\"\ncache = {{ store = \"main\" }}\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        cache_dir.display(),
        backend.target()
    );
    let path = write_file(dir.path(), "rampart.toml", &config);
    let _proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let driver = ChromeDriver::start(&driver_path, WAIT);
    let session = driver.session(CHROMIUM_ARGS);
    session.goto(&format!("http://127.0.0.1:{admin_port}/"));

    // The panel shows the store as soon as a route uses it, before any request.
    let row = "#caches tr[data-store=\"main\"]";
    let data = |field: &str| {
        session.execute(&format!(
            "const r = document.querySelector('{row}'); return r ? r.dataset.{field} : null"
        ))
    };
    wait_until("the store's row, empty", || (data("requests") == "0").then_some(()));
    assert_eq!(
        session.execute("return document.getElementById('caches-section').hidden"),
        false
    );
    assert_eq!(data("objects"), "0");

    // A miss, then a hit.
    let mut client = common::connect(port);
    let (status, head, _) = send(&mut client, &get("/cached"));
    assert_eq!(status, 200, "{head}");
    let (status, head, body) = send(&mut client, &get("/cached"));
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    assert_eq!(backend.heads.try_iter().count(), 1, "the hit went nowhere");

    // One object in memory and on disk, the hit and the miss counted: a ratio of 50%.
    wait_until("the panel to count the miss and the hit, one object on disk", || {
        (data("objects") == "1" && data("served") == "1" && data("requests") == "2" && data("diskObjects") == "1")
            .then_some(())
    });
    assert_eq!(data("ratio"), "0.5");
    let cell = |col: &str| {
        session.execute(&format!(
            "return document.querySelector('{row} td[data-col=\"{col}\"]').textContent"
        ))
    };
    assert_eq!(cell("objects"), "1");
    assert_eq!(cell("ratio"), "50.0%");
    assert_eq!(cell("requests"), "hit 1 · miss 1");
    assert_eq!(cell("disk-objects"), "1");
    assert_eq!(cell("disk-errors"), "0 write · 0 read");
    assert_eq!(cell("routes"), "web/cached");
    let memory = cell("memory");
    let memory = memory.as_str().unwrap();
    assert!(memory.ends_with(" of 16 MiB (<1%)"), "{memory}");
    let disk = cell("disk");
    assert!(disk.as_str().unwrap().ends_with(" of 64 MiB (<1%)"), "{disk}");

    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page-caches.png");
    std::fs::write(&file, session.screenshot()).unwrap();
    assert_no_console_error(&session, "console errors");
}
