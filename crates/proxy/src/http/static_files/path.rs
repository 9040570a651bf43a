//! From a request path to an open file under the root, with no way out of the root.
//!
//! The path is percent-decoded exactly once. A decoded NUL, `/` (`%2F`) or `\` (either form),
//! a bad escape, and a `..` segment (`/../`, `%2e%2e`) are refused outright (400): nothing
//! legitimate needs them. Empty and `.` segments are dropped (`//a/./b` is `a/b`).
//!
//! The relative path that remains is opened with openat2(2) beneath the root directory
//! (`RESOLVE_BENEATH`): the kernel refuses, atomically with the lookup, any resolution that
//! leaves the root, so a symbolic link pointing outside (absolute, or `../` enough times) is not
//! followed out, while links that stay inside work. On kernels without openat2 (before 5.6) the
//! path is canonicalized and compared with the canonical root instead.
//!
//! The path is built in a fixed buffer on the stack: resolving a request allocates nothing.

use std::cell::RefCell;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The longest relative path served (Linux's `PATH_MAX`, less its NUL).
pub const MAX_PATH: usize = 4095;

/// Why a request path is refused before any file is looked at (all answered 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not starting with `/`, or a `%` not followed by two hex digits.
    Malformed,
    /// `%00`.
    Nul,
    /// `%2F`: a slash that would not separate segments where the client meant it to.
    EncodedSlash,
    /// `\` or `%5C`.
    Backslash,
    /// A `..` segment, however written.
    DotDot,
    /// Longer than [`MAX_PATH`].
    TooLong,
}

/// A relative path under the root, NUL-terminated in place: segments joined by `/`, no empty,
/// `.` or `..` segment, no leading `/`. Empty for the root itself.
pub struct RelPath {
    buf: [u8; MAX_PATH + 1],
    len: usize,
    /// The request path ended with `/` (a directory was asked for).
    pub dir: bool,
}

impl RelPath {
    /// Decodes and checks a request path (without its query).
    pub fn from_request(path: &[u8]) -> Result<RelPath, PathError> {
        if path.first() != Some(&b'/') {
            return Err(PathError::Malformed);
        }
        let mut rel = RelPath {
            buf: [0; MAX_PATH + 1],
            len: 0,
            dir: path.ends_with(b"/"),
        };
        for segment in path[1..].split(|&b| b == b'/') {
            let start = rel.len;
            if start > 0 {
                rel.push(b'/')?;
            }
            let mut i = 0;
            while i < segment.len() {
                let b = match segment[i] {
                    b'%' => {
                        let hex = segment.get(i + 1..i + 3).ok_or(PathError::Malformed)?;
                        i += 2;
                        match (unhex(hex[0]), unhex(hex[1])) {
                            (Some(h), Some(l)) => (h << 4) | l,
                            _ => return Err(PathError::Malformed),
                        }
                    }
                    b => b,
                };
                match b {
                    0 => return Err(PathError::Nul),
                    b'/' => return Err(PathError::EncodedSlash),
                    b'\\' => return Err(PathError::Backslash),
                    _ => rel.push(b)?,
                }
                i += 1;
            }
            let decoded = &rel.buf[start + usize::from(start > 0)..rel.len];
            match decoded {
                b".." => return Err(PathError::DotDot),
                // Empty and `.` segments are dropped, with the `/` before them.
                b"" | b"." => rel.len = start,
                _ => {}
            }
        }
        rel.buf[rel.len] = 0;
        Ok(rel)
    }

    fn push(&mut self, b: u8) -> Result<(), PathError> {
        if self.len == MAX_PATH {
            return Err(PathError::TooLong);
        }
        self.buf[self.len] = b;
        self.len += 1;
        Ok(())
    }

    /// The path's bytes (no NUL).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The last segment (the file name; empty for the root).
    pub fn file_name(&self) -> &[u8] {
        let bytes = self.as_bytes();
        bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes)
    }

    /// Appends `/name` (or `name` to the root) or a suffix such as `.br`; false when it does
    /// not fit. [`RelPath::truncate`] takes it off again.
    pub fn append(&mut self, separator: bool, name: &[u8]) -> bool {
        let sep = separator && self.len > 0;
        if self.len + usize::from(sep) + name.len() > MAX_PATH || name.contains(&0) {
            return false;
        }
        if sep {
            self.buf[self.len] = b'/';
            self.len += 1;
        }
        self.buf[self.len..self.len + name.len()].copy_from_slice(name);
        self.len += name.len();
        self.buf[self.len] = 0;
        true
    }

    /// The length, to go back to with [`RelPath::truncate`].
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = len.min(self.len);
        self.buf[self.len] = 0;
    }

    /// The path as a C string, `.` for the root.
    fn c_str(&self) -> &CStr {
        let bytes = if self.len == 0 {
            &b".\0"[..]
        } else {
            &self.buf[..=self.len]
        };
        CStr::from_bytes_with_nul(bytes).unwrap_or(c".")
    }
}

fn unhex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The root directory (`O_PATH`: nothing is read through it). Each worker keeps a root it opened
/// for the rest of that wall-clock second: a root replaced on disk (a `current` link swapped by a
/// deploy) is followed within a second, and requests in between save the open and close of the
/// directory (two system calls of the four a small file costs).
pub struct Root {
    dir: Rc<OwnedFd>,
}

/// The roots this worker thread opened, with the second each was opened in.
struct OpenRoots {
    second: u64,
    roots: Vec<(Box<Path>, Rc<OwnedFd>)>,
}

thread_local! {
    static OPEN_ROOTS: RefCell<OpenRoots> = const {
        RefCell::new(OpenRoots { second: 0, roots: Vec::new() })
    };
}

/// Roots a worker keeps open at once; past it, the oldest is closed.
const MAX_OPEN_ROOTS: usize = 16;

impl Root {
    pub fn open(root: &Path) -> io::Result<Root> {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        OPEN_ROOTS.with(|cell| {
            let mut open = cell.borrow_mut();
            if open.second != second {
                open.second = second;
                open.roots.clear();
            }
            if let Some((_, dir)) = open.roots.iter().find(|(path, _)| **path == *root) {
                return Ok(Root { dir: dir.clone() });
            }
            let dir: Rc<OwnedFd> = Rc::new(
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(root)?
                    .into(),
            );
            if open.roots.len() == MAX_OPEN_ROOTS {
                open.roots.remove(0);
            }
            open.roots.push((root.into(), dir.clone()));
            Ok(Root { dir })
        })
    }

    /// Opens `rel` for reading, refusing any resolution that leaves the root (error kind
    /// `NotFound`, as for a file that is not there). `root` is the path `Root` was opened with,
    /// for kernels without openat2.
    pub fn open_file(&self, root: &Path, rel: &RelPath) -> io::Result<File> {
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            match openat2_beneath(self.dir.as_fd(), rel.c_str()) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS)) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP | libc::EAGAIN)) => {
                    return Err(io::ErrorKind::NotFound.into());
                }
                other => return other,
            }
        }
        open_canonical(root, rel)
    }
}

/// Set once openat2 turned out to be missing (ENOSYS): the canonical-path check from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// `struct open_how` of linux/openat2.h.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The flags every served file is opened with: `O_NONBLOCK` so that a FIFO under the root does
/// not stall the worker in open(2) (regular files ignore it).
const OPEN_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

fn openat2_beneath(dir: BorrowedFd<'_>, rel: &CStr) -> io::Result<File> {
    let how = OpenHow {
        flags: OPEN_FLAGS as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `dir` is an open descriptor for the call's duration, `rel` is NUL-terminated, and
    // `how` is a valid `struct open_how` whose size is passed with it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }))
}

/// Without openat2: the canonical path must lie under the canonical root.
fn open_canonical(root: &Path, rel: &RelPath) -> io::Result<File> {
    let root = root.canonicalize()?;
    let full = root.join(std::ffi::OsStr::from_bytes(rel.as_bytes()));
    let canonical = full.canonicalize()?;
    if !canonical.starts_with(&root) {
        return Err(io::ErrorKind::NotFound.into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(path: &str) -> Result<String, PathError> {
        RelPath::from_request(path.as_bytes()).map(|r| String::from_utf8(r.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn paths_are_decoded_once_and_normalised() {
        assert_eq!(rel("/"), Ok(String::new()));
        assert_eq!(rel("/a/b.txt"), Ok("a/b.txt".into()));
        assert_eq!(rel("//a/./b//c/"), Ok("a/b/c".into()));
        assert_eq!(rel("/a%20b/%41"), Ok("a b/A".into()));
        // Decoded once: `%252e%252e` is the name `%2e%2e`, not `..`.
        assert_eq!(rel("/%252e%252e/x"), Ok("%2e%2e/x".into()));
        assert_eq!(rel("/.hidden/..."), Ok(".hidden/...".into()));
        assert!(RelPath::from_request(b"/d/").unwrap().dir);
        assert!(!RelPath::from_request(b"/d").unwrap().dir);
    }

    #[test]
    fn escapes_and_bad_bytes_are_refused() {
        assert_eq!(rel("/../etc/passwd"), Err(PathError::DotDot));
        assert_eq!(rel("/a/.."), Err(PathError::DotDot));
        assert_eq!(rel("/a/%2e%2e/b"), Err(PathError::DotDot));
        assert_eq!(rel("/a/.%2E/b"), Err(PathError::DotDot));
        assert_eq!(rel("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(rel("/a%2f..%2fb"), Err(PathError::EncodedSlash));
        assert_eq!(rel("/a\\b"), Err(PathError::Backslash));
        assert_eq!(rel("/a%5cb"), Err(PathError::Backslash));
        assert_eq!(rel("/a%00b"), Err(PathError::Nul));
        assert_eq!(rel("/a%zzb"), Err(PathError::Malformed));
        assert_eq!(rel("/a%4"), Err(PathError::Malformed));
        assert_eq!(rel("a"), Err(PathError::Malformed));
        assert_eq!(rel(&format!("/{}", "a".repeat(MAX_PATH + 1))), Err(PathError::TooLong));
    }

    #[test]
    fn names_append_and_come_off() {
        let mut r = RelPath::from_request(b"/app.js").unwrap();
        let len = r.len();
        assert!(r.append(false, b".br"));
        assert_eq!(r.as_bytes(), b"app.js.br");
        assert_eq!(r.c_str().to_bytes(), b"app.js.br");
        r.truncate(len);
        assert_eq!(r.c_str().to_bytes(), b"app.js");
        let mut root = RelPath::from_request(b"/").unwrap();
        assert_eq!(root.c_str().to_bytes(), b".");
        assert!(root.append(true, b"index.html"));
        assert_eq!(root.as_bytes(), b"index.html");
        assert_eq!(root.file_name(), b"index.html");
    }

    #[test]
    fn files_open_beneath_the_root_only() {
        let dir = std::env::temp_dir().join(format!("rampart-path-{}", std::process::id()));
        let root = dir.join("www");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/in.txt"), b"in").unwrap();
        std::fs::write(dir.join("secret.txt"), b"secret").unwrap();
        let _ = std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("abs-out"));
        let _ = std::os::unix::fs::symlink("../secret.txt", root.join("rel-out"));
        let _ = std::os::unix::fs::symlink("sub/in.txt", root.join("inside"));
        let r = Root::open(&root).unwrap();
        let open = |p: &str| r.open_file(&root, &RelPath::from_request(p.as_bytes()).unwrap());
        assert!(open("/sub/in.txt").is_ok());
        assert!(open("/inside").is_ok());
        assert!(open("/").is_ok());
        for escape in ["/abs-out", "/rel-out", "/missing"] {
            assert_eq!(open(escape).unwrap_err().kind(), io::ErrorKind::NotFound, "{escape}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
