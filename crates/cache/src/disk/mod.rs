//! The disk store: responses as files under one directory, kept across restarts and binary
//! upgrades, bounded in bytes.
//!
//! - **Index in memory.** Which key is in which file is kept in a [`MemoryStore`] of
//!   [`DiskRecord`]s weighted by their files' sizes, so the disk store evicts by S3-FIFO like the
//!   memory one, and a lookup is a hash probe with no I/O. A record that leaves the index
//!   (evicted, replaced, purged) has its file deleted by the store's janitor thread.
//! - **Crash-safe writes.** A response is written to a `.part` file beside its final name and
//!   renamed into place when whole: a reader never sees a half-written file under a final name.
//!   Each file ends with a CRC-32 of everything before it ([`format`]): a file torn by a crash or
//!   a power loss after the rename (no `fsync` is made: the checksum catches what it would have
//!   prevented) is refused when read and deleted, never served.
//! - **Restart.** [`DiskStore::open`] reads the head of every file (not the bodies) and indexes
//!   the ones whose length adds up, oldest first; it deletes the rest, the `.part` files of
//!   processes that are gone, and the older of two files for one key.
//! - **Blocking I/O.** Every method here that touches the disk blocks: the proxy calls them on
//!   its blocking pool, never on a worker thread.

pub mod format;

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::entry::Entry;
use crate::policy::control::Targets;
use crate::store::{MemoryStore, StoreStats, Weighted};

/// Subdirectories the files are spread over (by sequence number), so no directory grows huge.
const SUBDIRS: u64 = 64;
/// Bytes read from the start of a file to index it: a head is rarely more.
const INDEX_READ: usize = 64 << 10;
/// Writes under way at once; more are skipped (the response stays in memory only).
pub const MAX_PENDING_WRITES: usize = 64;

/// Why the disk store could not do something.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: format::FormatError },
    #[error("{path}: holds another key")]
    OtherKey { path: PathBuf },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Deletes the files of records that left the index, on a thread of its own.
struct Janitor {
    doomed: mpsc::Sender<PathBuf>,
    /// Set when the store itself goes (a reload that drops it, the process ending): its files
    /// stay for the next store on the directory.
    closing: AtomicBool,
}

/// Where one key's response is on disk.
pub struct DiskRecord {
    path: PathBuf,
    size: u64,
    /// The response's tags (for bans), one per line.
    tags: Vec<u8>,
    /// Whether the response varies (`Vary`): its variants are stored under keys of their own.
    pub varies: bool,
    janitor: Arc<Janitor>,
}

impl DiskRecord {
    /// Whether the stored response named `tag` (see [`crate::policy::tags`]).
    pub fn tagged(&self, tag: &[u8]) -> bool {
        self.tags.split(|&b| b == b'\n').any(|t| t == tag)
    }
}

impl Weighted for DiskRecord {
    fn weight(&self) -> usize {
        self.size as usize
    }
}

impl Drop for DiskRecord {
    fn drop(&mut self) {
        if !self.janitor.closing.load(Relaxed) {
            let _ = self.janitor.doomed.send(std::mem::take(&mut self.path));
        }
    }
}

/// Counts beyond the index's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub index: StoreStats,
    pub writes: u64,
    /// Writes that failed, or were skipped with too many under way.
    pub write_errors: u64,
    /// Files refused when read (torn, changed, gone) and deleted.
    pub read_errors: u64,
}

/// Responses by key in files under a directory, at most `capacity` bytes of files.
pub struct DiskStore {
    dir: PathBuf,
    /// The targeted fields its responses' directives are read by (the cache's).
    targets: Targets,
    index: MemoryStore<Arc<[u8]>, DiskRecord>,
    janitor: Arc<Janitor>,
    /// Names this process's files: its id, then a sequence number.
    process: String,
    sequence: AtomicU64,
    pending: AtomicUsize,
    writes: AtomicU64,
    write_errors: AtomicU64,
    read_errors: AtomicU64,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("dir", &self.dir)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// The store on `dir` (created if missing), at most `capacity` bytes, with what a previous
    /// process left there indexed.
    pub fn open(dir: &Path, capacity: usize, targets: Targets) -> Result<DiskStore, DiskError> {
        for sub in 0..SUBDIRS {
            let path = dir.join(format!("{sub:02x}"));
            fs::create_dir_all(&path).map_err(io_error(&path))?;
        }
        let (doomed, bin) = mpsc::channel::<PathBuf>();
        std::thread::Builder::new()
            .name("cache-janitor".into())
            .spawn(move || {
                for path in bin {
                    let _ = fs::remove_file(path);
                }
            })
            .map_err(io_error(dir))?;
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let store = DiskStore {
            dir: dir.to_path_buf(),
            targets,
            index: MemoryStore::with_shards(capacity, 1),
            janitor: Arc::new(Janitor {
                doomed,
                closing: AtomicBool::new(false),
            }),
            process: format!("{:x}-{:x}", std::process::id(), started.as_micros()),
            sequence: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            writes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
        };
        store.scan()?;
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn capacity(&self) -> usize {
        self.index.capacity()
    }

    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    /// The largest file it keeps (a tenth of its bytes: S3-FIFO's small queue).
    pub fn max_file_size(&self) -> usize {
        self.index.capacity() / 10
    }

    /// Where `key`'s response is, counted as read.
    pub fn get(&self, key: &[u8]) -> Option<Arc<DiskRecord>> {
        self.index.get(key)
    }

    /// Reads `record`, stored under `key`. A file that is torn, changed, gone or holds another
    /// key is dropped from the index (and deleted).
    pub fn read(&self, key: &[u8], record: &Arc<DiskRecord>) -> Result<Entry, DiskError> {
        let path = &record.path;
        let result = fs::read(path)
            .map_err(io_error(path))
            .and_then(|data| {
                format::decode(Bytes::from(data), &self.targets).map_err(|source| DiskError::Format {
                    path: path.clone(),
                    source,
                })
            })
            .and_then(|(stored_key, entry)| match stored_key == key {
                true => Ok(entry),
                false => Err(DiskError::OtherKey { path: path.clone() }),
            });
        if result.is_err() {
            self.read_errors.fetch_add(1, Relaxed);
            if self.index.peek(key).is_some_and(|r| Arc::ptr_eq(&r, record)) {
                self.index.remove(key);
            }
        }
        result
    }

    /// A place for one more write, unless [`MAX_PENDING_WRITES`] are under way (then the write
    /// is skipped and counted).
    pub fn reserve(self: &Arc<Self>) -> Option<Reservation> {
        if self.pending.fetch_add(1, Relaxed) >= MAX_PENDING_WRITES {
            self.pending.fetch_sub(1, Relaxed);
            self.write_errors.fetch_add(1, Relaxed);
            return None;
        }
        Some(Reservation(self.clone()))
    }

    /// Writes `entry` under `key`: to a `.part` file, renamed into place when whole, then
    /// indexed (replacing what `key` had). A file larger than [`Self::max_file_size`] is not
    /// written (false).
    fn write(&self, key: &[u8], entry: &Entry) -> Result<bool, DiskError> {
        let (head, trailer) = format::encode(key, entry);
        let size = head.len() + entry.body.len() + trailer.len();
        if size > self.max_file_size() {
            return Ok(false);
        }
        let sequence = self.sequence.fetch_add(1, Relaxed);
        let sub = self.dir.join(format!("{:02x}", sequence % SUBDIRS));
        let path = sub.join(format!("{}-{sequence:x}", self.process));
        let part = sub.join(format!("{}-{sequence:x}.part", self.process));
        let written = fs::File::create(&part).and_then(|mut file| {
            file.write_all(&head)?;
            file.write_all(&entry.body)?;
            file.write_all(&trailer)
        });
        if let Err(e) = written.and_then(|()| fs::rename(&part, &path)) {
            let _ = fs::remove_file(&part);
            return Err(io_error(&part)(e));
        }
        let tags = format::tag_lines(&entry.head);
        let record = DiskRecord {
            path,
            size: size as u64,
            tags,
            varies: !entry.variant.names.is_empty(),
            janitor: self.janitor.clone(),
        };
        self.index.insert(Arc::from(key), record);
        Ok(true)
    }

    /// Removes what is under `key` (its file goes too).
    pub fn remove(&self, key: &[u8]) -> bool {
        self.index.remove(key)
    }

    /// Removes every record `f` picks (by key and record); how many.
    pub fn remove_where(&self, f: impl FnMut(&Arc<[u8]>, &DiskRecord) -> bool) -> usize {
        self.index.remove_where(f)
    }

    pub fn stats(&self) -> DiskStats {
        DiskStats {
            index: self.index.stats(),
            writes: self.writes.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
            read_errors: self.read_errors.load(Relaxed),
        }
    }

    /// Indexes what is in the directory (see the module's documentation).
    fn scan(&self) -> Result<(), DiskError> {
        let mut found: Vec<(SystemTime, Vec<u8>, DiskRecord)> = Vec::new();
        for sub in 0..SUBDIRS {
            let dir = self.dir.join(format!("{sub:02x}"));
            for item in fs::read_dir(&dir).map_err(io_error(&dir))?.flatten() {
                let path = item.path();
                let name = item.file_name().to_string_lossy().into_owned();
                if let Some(stem) = name.strip_suffix(".part") {
                    if !writer_alive(stem) {
                        let _ = fs::remove_file(&path);
                    }
                    continue;
                }
                match index_file(&path) {
                    Some((modified, info)) => {
                        let record = DiskRecord {
                            path,
                            size: info.length,
                            tags: info.tags,
                            varies: info.varies,
                            janitor: self.janitor.clone(),
                        };
                        found.push((modified, info.key, record));
                    }
                    None => {
                        self.read_errors.fetch_add(1, Relaxed);
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
        // Oldest first: a newer file for a key replaces (and deletes) an older one, and the
        // queues start in the order the responses came.
        found.sort_by_key(|(modified, _, _)| *modified);
        for (_, key, record) in found {
            self.index.insert(Arc::from(key), record);
        }
        Ok(())
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.janitor.closing.store(true, Relaxed);
    }
}

/// A write the store has room for: [`Reservation::write`] it (on a blocking thread).
pub struct Reservation(Arc<DiskStore>);

impl Reservation {
    /// Writes `entry` under `key`; false when it is too large for the store.
    pub fn write(self, key: &[u8], entry: &Entry) -> Result<bool, DiskError> {
        let result = self.0.write(key, entry);
        match &result {
            Ok(true) => {
                self.0.writes.fetch_add(1, Relaxed);
            }
            Ok(false) => {}
            Err(_) => {
                self.0.write_errors.fetch_add(1, Relaxed);
            }
        }
        result
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Relaxed);
    }
}

/// The modification time and index facts of a file whose length adds up; `None` for one to
/// delete.
fn index_file(path: &Path) -> Option<(SystemTime, format::FileInfo)> {
    let mut file = fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let mut start = Vec::with_capacity(INDEX_READ.min(meta.len() as usize));
    Read::by_ref(&mut file)
        .take(INDEX_READ as u64)
        .read_to_end(&mut start)
        .ok()?;
    let info = format::info(&start).ok()?;
    (info.length == meta.len()).then_some((meta.modified().unwrap_or(UNIX_EPOCH), info))
}

/// Whether the process that names a `.part` file (`PID-START-SEQUENCE`) may still be writing
/// it: it is running and is not this process (which has written nothing yet).
fn writer_alive(stem: &str) -> bool {
    let Some(pid) = stem.split('-').next().and_then(|p| u32::from_str_radix(p, 16).ok()) else {
        return false;
    };
    pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests;
