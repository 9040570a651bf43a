//! `rampart run --watch`: a change to any file of the config (the main file, an included file,
//! a new file matching an include pattern, a certificate, key or other file the config reads)
//! reloads it, through the same path as SIGHUP.
//!
//! inotify watches the directories those files are in, not the files: editors and certificate
//! tools replace a file by renaming a new one over it, which a watch on the old file would not
//! see. Events for other names in those directories are ignored. A burst of events (an editor
//! writes, renames, sets attributes) becomes one reload once the directories have been quiet for
//! [`QUIET`]. After each load the control loop hands over the new list of files (includes and
//! certificates may have changed); a load that fails keeps the previous list.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use rampart_config::load::glob_match;
use rampart_config::WatchList;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::publisher::ReloadRequest;

/// How long the watched directories must stay quiet before a change reloads.
pub const QUIET: Duration = Duration::from_millis(200);

/// The running watcher: give it each new list of files with [`Watching::update`].
pub struct Watching {
    files: watch::Sender<WatchList>,
}

impl Watching {
    /// Starts watching `list` on the current runtime; a change sends a reload request to
    /// `reloads` (a channel into the control loop) and waits for its outcome before the next.
    pub fn start(list: WatchList, reloads: mpsc::UnboundedSender<ReloadRequest>) -> std::io::Result<Watching> {
        let inotify = Inotify::init()?;
        let (files, updates) = watch::channel(list);
        // The crate's one unsafe block: tokio's safe constructor is deprecated as unsound.
        // SAFETY: the AsyncFd owns the Inotify, whose descriptor stays open (and the same) until
        // it is dropped with it.
        #[allow(unsafe_code)]
        let fd =
            unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) }.map_err(std::io::Error::from)?;
        let mut watcher = Watcher {
            fd,
            interests: HashMap::new(),
        };
        watcher.set(&updates.borrow());
        tokio::spawn(watcher.run(updates, reloads));
        Ok(Watching { files })
    }

    /// Watches `list` from now on.
    pub fn update(&self, list: WatchList) {
        self.files.send_if_modified(|current| {
            let changed = *current != list;
            *current = list;
            changed
        });
    }
}

/// The names that matter in one watched directory.
#[derive(Default)]
struct Wanted {
    dir: PathBuf,
    names: HashSet<OsString>,
    patterns: Vec<String>,
}

impl Wanted {
    fn wants(&self, name: &std::ffi::OsStr) -> bool {
        self.names.contains(name)
            || name
                .to_str()
                .is_some_and(|n| self.patterns.iter().any(|p| glob_match(p, n)))
    }
}

struct Watcher {
    fd: AsyncFd<Inotify>,
    interests: HashMap<WatchDescriptor, Wanted>,
}

impl Watcher {
    async fn run(mut self, mut updates: watch::Receiver<WatchList>, reloads: mpsc::UnboundedSender<ReloadRequest>) {
        let mut buffer = vec![0u8; 16 * 1024];
        // The first changed file of a burst, and when the burst ends.
        let mut pending: Option<(PathBuf, Instant)> = None;
        loop {
            let deadline = pending.as_ref().map(|(_, at)| *at);
            tokio::select! {
                changed = self.changes(&mut buffer) => match changed {
                    Ok(changed) => {
                        if let Some(path) = changed {
                            let first = pending.take().map_or(path, |(first, _)| first);
                            pending = Some((first, Instant::now() + QUIET));
                        }
                    }
                    Err(e) => {
                        tracing::error!("watch: cannot read file events: {e}; no longer watching");
                        return;
                    }
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    let (path, _) = pending.take().expect("a deadline comes with a change");
                    tracing::info!(path = %path.display(), "watch: {} changed; reloading", path.display());
                    let (reply, outcome) = oneshot::channel();
                    if reloads.send(reply).is_err() {
                        return;
                    }
                    // One reload at a time; changes meanwhile gather for the next.
                    let _ = outcome.await;
                }
                update = updates.changed() => {
                    if update.is_err() {
                        return;
                    }
                    let list = updates.borrow_and_update().clone();
                    self.set(&list);
                }
            }
        }
    }

    /// Waits for file events and returns the path of one that matters, if any did.
    async fn changes(&mut self, buffer: &mut [u8]) -> std::io::Result<Option<PathBuf>> {
        loop {
            let mut guard = self.fd.readable_mut().await?;
            let interests = &self.interests;
            let read = guard.try_io(|inotify| {
                let mut found = None;
                for event in inotify.get_mut().read_events(buffer)? {
                    if event.mask.contains(EventMask::Q_OVERFLOW) {
                        found = Some(PathBuf::from("(many files)"));
                        continue;
                    }
                    let (Some(interest), Some(name)) = (interests.get(&event.wd), event.name) else {
                        continue;
                    };
                    if found.is_none() && interest.wants(name) {
                        found = Some(interest.dir.join(name));
                    }
                }
                Ok(found)
            });
            match read {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Watches the directories of `list` (adding the new ones first, then removing those no
    /// longer needed, so no change in between is missed).
    fn set(&mut self, list: &WatchList) {
        let mut wanted: HashMap<PathBuf, Wanted> = HashMap::new();
        for file in &list.files {
            let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
                continue;
            };
            wanted.entry(dir_of(dir)).or_default().names.insert(name.to_os_string());
        }
        for (dir, pattern) in &list.patterns {
            wanted.entry(dir_of(dir)).or_default().patterns.push(pattern.clone());
        }
        let mask = WatchMask::CLOSE_WRITE
            | WatchMask::MODIFY
            | WatchMask::ATTRIB
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM;
        let mut interests: HashMap<WatchDescriptor, Wanted> = HashMap::new();
        let mut watches = self.fd.get_ref().watches();
        for (dir, mut interest) in wanted {
            match watches.add(&dir, mask) {
                Ok(wd) => {
                    interest.dir = dir;
                    // Two paths to one directory share a descriptor: join their names.
                    let entry = interests.entry(wd).or_default();
                    entry.dir = interest.dir;
                    entry.names.extend(interest.names);
                    entry.patterns.extend(interest.patterns);
                }
                Err(e) => tracing::warn!("watch: cannot watch {}: {e}", dir.display()),
            }
        }
        for wd in self.interests.keys() {
            if !interests.contains_key(wd) {
                let _ = watches.remove(wd.clone());
            }
        }
        tracing::debug!(directories = interests.len(), "watch: watching the config's files");
        self.interests = interests;
    }
}

/// A file's directory, `.` for a bare file name.
fn dir_of(dir: &Path) -> PathBuf {
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir.to_path_buf()
    }
}
