//! A binary upgrade keeps what the HTTP cache's disk store holds: the new process indexes the
//! directory when it starts and answers from it, without the upstream.

use super::{pid_in, wait_gone, Processes};
use crate::common;

use common::http::{header, send, HttpBackend, Reply};
use common::{free_port, write_file, Rampart};

const FRESH: &[u8] = b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\nhello";

fn get(port: u16) -> (u16, String, Vec<u8>) {
    let mut client = common::connect(port);
    send(&mut client, b"GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n")
}

/// The data files (not `.part`) under the disk store's directory.
fn files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|subs| {
            subs.flatten()
                .filter_map(|sub| std::fs::read_dir(sub.path()).ok())
                .flat_map(|files| files.flatten())
                .filter(|f| !f.file_name().to_string_lossy().ends_with(".part"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_binary_upgrade_answers_from_the_disk_store_the_old_process_filled() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let backend = HttpBackend::start(Reply::Raw(FRESH));
    let port = free_port();
    let text = format!(
        "[global]\ndrain_timeout = \"5s\"\n\n[caches.main]\ndisk = \"{}\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nupstream = \"app\"\ncache = {{ store = \"main\" }}\n\n\
         [upstreams.app]\ntargets = [\"{}\"]\n",
        cache_dir.display(),
        backend.target()
    );
    let path = write_file(dir.path(), "up.toml", &text);
    let mut rampart = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let mut started = Processes::default();
    let (status, _, body) = get(port);
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    assert_eq!(backend.seen(), 1);
    common::tls::eventually("the response is on disk", || files(&cache_dir) == 1);

    let old = rampart.pid();
    rampart.signal(libc::SIGUSR2);
    let new = pid_in(&rampart.wait_for("is ready and serves"), "PID ");
    started.add(new);
    wait_gone(old, &rampart);
    let (status, head, body) = get(port);
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.starts_with("Rampart; hit")),
        "{head}"
    );
    assert_eq!(backend.seen(), 0, "answered from the disk store, not the upstream");
    // SAFETY: only sends a signal, to the process the upgrade started.
    unsafe { libc::kill(new, libc::SIGTERM) };
    wait_gone(new, &rampart);
}
