//! Linux pipes for splice(2): the kernel moves socket data through a pipe without copying it into
//! user space. Each worker keeps a pool of empty pipes; a pipe that still holds data when its
//! connection ends is closed rather than returned.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking pipe and how many bytes sit in it.
#[derive(Debug)]
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    pending: usize,
}

/// The most a single splice moves.
pub(crate) const SPLICE_CHUNK: usize = 1 << 20;

impl Pipe {
    pub(crate) fn new() -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger pipe means fewer splice calls on bulk transfers; failure only costs speed.
        // SAFETY: F_SETPIPE_SZ on a pipe descriptor we own.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 256 * 1024) };
        Ok(Pipe {
            read,
            write,
            pending: 0,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Moves up to [`SPLICE_CHUNK`] bytes from socket `from` into the pipe; 0 means end of stream.
    pub(crate) fn fill_from(&mut self, from: RawFd) -> io::Result<usize> {
        let n = splice(from, self.write.as_raw_fd(), SPLICE_CHUNK)?;
        self.pending += n;
        Ok(n)
    }

    /// Moves what the pipe holds into socket `to`; returns the bytes moved.
    pub(crate) fn drain_into(&mut self, to: RawFd) -> io::Result<usize> {
        let n = splice(self.read.as_raw_fd(), to, self.pending)?;
        self.pending -= n;
        Ok(n)
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the duration of the call; null offsets are allowed
    // for sockets and pipes.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
