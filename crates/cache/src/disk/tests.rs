//! The disk store on a real directory: what it writes reads back after a restart; torn, changed
//! and half-written files are never served; evicted and replaced files are deleted.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;

use super::format::{self, FormatError};
use super::{DiskError, DiskStore};
use crate::entry::Entry;
use crate::policy::control::{Directives, Targets};

type Fields<'a> = [(&'a [u8], &'a [u8])];

fn entry(body: &[u8], tag: &str) -> Entry {
    let request: &Fields = &[(b"accept-encoding", b"gzip")];
    let fields: Vec<(&[u8], &[u8])> = vec![
        (b"cache-control", b"max-age=60"),
        (b"vary", b"Accept-Encoding"),
        (b"content-type", b"text/plain"),
        (b"cache-tag", tag.as_bytes()),
        (b"connection", b"close"),
    ];
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    Entry::new(
        request,
        200,
        fields.iter().copied(),
        Directives::for_shared_cache(fields.as_slice()),
        Bytes::copy_from_slice(body),
        (at, at + Duration::from_millis(1500)),
        Duration::from_secs(86_400),
    )
    .unwrap()
}

fn write(store: &Arc<DiskStore>, key: &[u8], entry: &Entry) {
    store.reserve().unwrap().write(key, entry).unwrap();
}

/// Every data file (not `.part`) under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in fs::read_dir(dir).unwrap().flatten() {
        for file in fs::read_dir(sub.path()).unwrap().flatten() {
            out.push(file.path());
        }
    }
    out.sort();
    out
}

/// Waits (bounded) until the janitor thread has deleted down to `n` files.
fn until_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = files(dir);
        if now.len() == n || Instant::now() > deadline {
            return now;
        }
        std::thread::yield_now();
    }
}

#[test]
fn what_is_written_reads_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let stored = entry(b"hello, disk", "red, blue");
    {
        let store = Arc::new(DiskStore::open(dir.path(), 1 << 20, Targets::default()).unwrap());
        write(&store, b"http://a.test/x", &stored);
        let record = store.get(b"http://a.test/x").unwrap();
        assert_eq!(store.read(b"http://a.test/x", &record).unwrap().body, stored.body);
    }
    let store = DiskStore::open(dir.path(), 1 << 20, Targets::default()).unwrap();
    let record = store.get(b"http://a.test/x").expect("indexed again");
    assert!(record.tagged(b"blue") && !record.tagged(b"green"));
    let back = store.read(b"http://a.test/x", &record).unwrap();
    assert_eq!(back.body, stored.body);
    assert_eq!(back.head.status, 200);
    let fields: Vec<_> = back
        .head
        .fields_ref()
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    let before: Vec<_> = stored
        .head
        .fields_ref()
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(
        fields, before,
        "the stored fields, `connection` left out as when stored"
    );
    assert_eq!(
        (back.timing, back.lifetime, back.variant),
        (stored.timing, stored.lifetime, stored.variant)
    );
    assert_eq!(back.directives.max_age, Some(60));
    assert_eq!(store.stats().index.objects, 1);
}

#[test]
fn torn_changed_and_half_written_files_are_never_served() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(DiskStore::open(dir.path(), 1 << 20, Targets::default()).unwrap());
        for key in ["cut", "flipped", "whole"] {
            write(&store, key.as_bytes(), &entry(&[b'x'; 4000], ""));
        }
    }
    let by_key = |key: &str| {
        files(dir.path())
            .into_iter()
            .find(|p| format::info(&fs::read(p).unwrap()).is_ok_and(|i| i.key == key.as_bytes()))
            .unwrap()
    };
    // Cut short, as a crash after a rename whose data never reached the disk leaves it.
    let cut = by_key("cut");
    let bytes = fs::read(&cut).unwrap();
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    // The same length, one body byte changed.
    let flipped = by_key("flipped");
    let mut bytes = fs::read(&flipped).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 1;
    fs::write(&flipped, &bytes).unwrap();
    // A `.part` file of a process that is gone, and one of a process that is running (pid 1).
    let gone = dir.path().join("00").join("7ffffffe-1-0.part");
    let running = dir.path().join("00").join("1-1-0.part");
    fs::write(&gone, b"half").unwrap();
    fs::write(&running, b"half").unwrap();

    let store = DiskStore::open(dir.path(), 1 << 20, Targets::default()).unwrap();
    assert!(store.get(b"cut").is_none(), "a file cut short is not indexed");
    assert!(!cut.exists() && !gone.exists());
    assert!(running.exists(), "a live process's write is left alone");
    let record = store.get(b"flipped").expect("its length adds up");
    match store.read(b"flipped", &record) {
        Err(DiskError::Format {
            source: FormatError::Checksum,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(store.get(b"flipped").is_none(), "refused once, dropped");
    drop(record);
    let whole = by_key("whole");
    assert_eq!(until_files(dir.path(), 2), {
        let mut left = vec![whole, running];
        left.sort();
        left
    });
    assert_eq!(store.stats().read_errors, 2);
}

#[test]
fn evicted_and_replaced_files_are_deleted_and_the_bytes_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(DiskStore::open(dir.path(), 100_000, Targets::default()).unwrap());
    for i in 0..40 {
        write(&store, format!("k{i}").as_bytes(), &entry(&[b'y'; 4000], ""));
    }
    write(&store, b"k39", &entry(&[b'z'; 4000], ""));
    let stats = store.stats().index;
    assert!(stats.bytes <= 100_000 && stats.evictions > 0, "{stats:?}");
    let left = until_files(dir.path(), stats.objects);
    assert_eq!(left.len(), stats.objects);
    let on_disk: u64 = left.iter().map(|p| p.metadata().unwrap().len()).sum();
    assert_eq!(on_disk as usize, stats.bytes);
    let record = store.get(b"k39").unwrap();
    assert_eq!(store.read(b"k39", &record).unwrap().body[0], b'z');
    // Too large for the store (a tenth of it): not kept.
    write(&store, b"big", &entry(&[b'b'; 20_000], ""));
    assert!(store.get(b"big").is_none());
}

#[test]
fn any_cut_or_change_of_a_file_is_refused_without_a_panic() {
    let stored = entry(b"0123456789abcdef", "t");
    let (head, trailer) = format::encode(b"key", &stored);
    let whole: Vec<u8> = [&head[..], &stored.body[..], &trailer[..]].concat();
    assert!(format::decode(Bytes::from(whole.clone()), &Targets::default()).is_ok());
    for cut in 0..whole.len() {
        assert!(
            format::decode(Bytes::copy_from_slice(&whole[..cut]), &Targets::default()).is_err(),
            "cut at {cut}"
        );
        let _ = format::info(&whole[..cut]);
    }
    for at in 0..whole.len() {
        let mut changed = whole.clone();
        changed[at] ^= 0x40;
        assert!(
            format::decode(Bytes::from(changed.clone()), &Targets::default()).is_err(),
            "byte {at} changed"
        );
        let _ = format::info(&changed);
    }
}

#[test]
fn the_fuzz_corpus_replays_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/cache_file");
    let mut seen = 0;
    for item in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = fs::read(item.unwrap().path()).unwrap();
        format::fuzzing::any_file(&data);
        for cut in 0..data.len().min(512) {
            format::fuzzing::any_file(&data[..cut]);
        }
        seen += 1;
    }
    assert!(seen >= 3, "the corpus at {} looks empty", dir.display());
}

/// Writes the fuzz target's seed files (run by hand: `cargo test -p rampart-cache seed_corpus --
/// --ignored`).
#[test]
#[ignore]
fn seed_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/cache_file");
    fs::create_dir_all(&dir).unwrap();
    for (i, (body, tag)) in [(&b""[..], ""), (b"hello", "a, b"), (&[7u8; 300][..], "x")]
        .iter()
        .enumerate()
    {
        let stored = entry(body, tag);
        let (head, trailer) = format::encode(format!("http://a.test/{i}").as_bytes(), &stored);
        fs::write(dir.join(format!("seed-{i}")), [&head[..], body, &trailer[..]].concat()).unwrap();
    }
}
