//! A cache with a disk store (`disk = DIR`): responses too large for memory are kept on disk and
//! answered from it; what is on disk survives a restart and is answered with the origin gone;
//! a process killed while writing leaves nothing torn that a later one would serve.

use std::path::Path;

use super::{get, one_shot, scripted};
use common::http::header;
use common::tls::eventually;
use common::{free_port, write_file, Rampart};

use crate::common;

/// Rampart with a route `/d/...` to `target`, caching in store `main` (16 MiB of memory) with
/// its disk part in `cache_dir`; the admin API on `admin_port`.
fn start(dir: &Path, cache_dir: &Path, target: &str, port: u16, admin_port: u16) -> Rampart {
    let text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
         [caches.main]\nsize = \"16MiB\"\ndisk = \"{}\"\ndisk_size = \"256MiB\"\n\n\
         [listeners.web]\nbind = \"127.0.0.1:{port}\"\nprotocol = \"http\"\n\n\
         [[listeners.web.routes]]\nmatch = {{ path_prefix = \"/d/\" }}\nupstream = \"app\"\n\
         cache = {{ store = \"main\" }}\n\n[upstreams.app]\ntargets = [\"{target}\"]\n",
        cache_dir.display()
    );
    let path = write_file(dir, "disk.toml", &text);
    Rampart::start(dir, &["run", "-c", &path, "--workers", "1"])
}

/// The disk tier's counts from `GET /api/caches`.
fn disk_objects(admin_port: u16) -> u64 {
    let (_, caches) = common::admin(admin_port, "GET", "/api/caches", None);
    caches["caches"][0]["disk"]["objects"].as_u64().unwrap()
}

/// A 200 that may be stored for ten minutes, with a body of `len` bytes made from `seed`.
fn response(seed: u8, len: usize) -> (&'static [u8], Vec<u8>) {
    let body: Vec<u8> = (0..len).map(|i| seed.wrapping_add((i % 251) as u8)).collect();
    let mut raw =
        format!("HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: {len}\r\n\r\n").into_bytes();
    raw.extend_from_slice(&body);
    (Vec::leak(raw), body)
}

#[test]
fn what_is_on_disk_survives_a_restart_and_answers_with_the_origin_gone() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    // 3 MiB: more than the memory store keeps (a tenth of 16 MiB), less than the disk's tenth.
    let (raw, body) = response(7, 3 << 20);
    let (target, served) = one_shot(raw, 1);
    let (port, admin_port) = (free_port(), free_port());
    let mut rampart = start(dir.path(), &cache_dir, &target, port, admin_port);
    let (status, _, got) = get(port, "/d/big", "");
    assert_eq!((status, got.len()), (200, body.len()));
    eventually("the response is on disk", || disk_objects(admin_port) == 1);
    // Answered from disk: the origin is gone already.
    let (status, head, got) = get(port, "/d/big", "");
    assert_eq!(status, 200, "{head}");
    assert!(got == body, "the body read back from disk is the one stored");
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(rampart.stop(), 0);

    let (port, admin_port) = (free_port(), free_port());
    let _rampart = start(dir.path(), &cache_dir, &common::dead_target(), port, admin_port);
    assert_eq!(disk_objects(admin_port), 1, "indexed again at start");
    let (status, head, got) = get(port, "/d/big", "");
    assert_eq!(status, 200, "{head}");
    assert!(got == body);
    assert!(
        header(&head, "cache-status").is_some_and(|s| s.contains("hit")),
        "{head}"
    );
    let (status, _, _) = get(port, "/d/other", "");
    assert_eq!(status, 502, "a miss with the origin gone");
}

#[test]
fn a_process_killed_while_writing_leaves_nothing_torn_to_serve() {
    // 12 bodies of 8 MiB under 200 keys: a steady run of misses, each written to disk.
    const BODIES: usize = 12;
    const KEYS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let responses: Vec<(&'static [u8], Vec<u8>)> = (0..BODIES).map(|i| response(i as u8, 8 << 20)).collect();
    let raws: Vec<&'static [u8]> = responses.iter().map(|(raw, _)| *raw).collect();
    let target = scripted(move |head| {
        let n: usize = head
            .split_whitespace()
            .nth(1)
            .and_then(|path| path.strip_prefix("/d/"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        raws[n % BODIES]
    });
    let (port, admin_port) = (free_port(), free_port());
    let rampart = start(dir.path(), &cache_dir, &target, port, admin_port);
    // Requests keep coming until the process is gone.
    let client = std::thread::spawn(move || {
        for i in 0..KEYS {
            let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            let raw = format!("GET /d/{i} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
            if std::io::Write::write_all(&mut conn, raw.as_bytes()).is_err() {
                return;
            }
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut conn, &mut sink);
        }
    });
    // Killed the moment a write is seen under way (a `.part` file), with some done before it.
    eventually("a write under way after some are done", || {
        disk_objects(admin_port) >= 2 && walk(&cache_dir).iter().any(|p| p.ends_with(".part"))
    });
    rampart.signal(libc::SIGKILL);
    drop(rampart);
    client.join().unwrap();

    let (port, admin_port) = (free_port(), free_port());
    let _rampart = start(dir.path(), &cache_dir, &common::dead_target(), port, admin_port);
    let mut from_disk = 0;
    for i in 0..KEYS {
        let (status, head, got) = get(port, &format!("/d/{i}"), "Cache-Control: only-if-cached\r\n");
        match status {
            200 => {
                assert!(
                    got == responses[i % BODIES].1,
                    "/d/{i}: a stored body comes back whole and right"
                );
                from_disk += 1;
            }
            504 => {}
            other => panic!("/d/{i}: {other}\n{head}"),
        }
    }
    assert!(
        from_disk >= 2,
        "what was on disk before the kill is served: {from_disk}"
    );
    let parts = walk(&cache_dir).into_iter().filter(|p| p.ends_with(".part")).count();
    assert_eq!(parts, 0, "the killed process's half-written files are gone");
}

/// Every file name under `dir`, one level of subdirectories down.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        for file in std::fs::read_dir(sub.path()).unwrap().flatten() {
            out.push(file.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn a_disk_store_that_cannot_be_made_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "a-file", "not a directory");
    let text = "[caches.main]\ndisk = \"a-file/cache\"\n\n\
                [caches.other]\ndisk_size = \"1GiB\"\n\n\
                [listeners.web]\nbind = \"127.0.0.1:0\"\nprotocol = \"http\"\n\n\
                [[listeners.web.routes]]\nupstream = \"app\"\ncache = { store = \"main\" }\n\n\
                [upstreams.app]\ntargets = [\"127.0.0.1:9\"]\n";
    let path = write_file(dir.path(), "bad.toml", text);
    let (code, _, stderr) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bad.toml:2:8") && stderr.contains("cache `main`: disk store:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad.toml:5:13") && stderr.contains("`disk_size` without `disk`"),
        "{stderr}"
    );
}
