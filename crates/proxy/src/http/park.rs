//! The parking lot: idle keep-alive client connections held outside any task.
//!
//! A connection that has sent no request for a while (see `session::LINGER`) leaves the runtime:
//! its task ends, its socket is deregistered from tokio and added to the worker's own epoll set
//! (one-shot, readable), and all that remains of it is one small [`Parked`] entry. When the
//! client sends its next request (or closes), the worker's wake loop takes the entry out and
//! starts a new connection task for it. An idle connection thus costs a few dozen bytes instead
//! of a task, a future and a runtime registration (a TLS connection keeps its rustls state
//! besides), at the price of four epoll calls per wake-up after a pause, which only connections
//! idle for longer than the linger pay.

use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

use crate::slot::{Conn, ConnSlot};
use crate::stream::Stream;
use crate::tls::TlsSession;
use rampart_model::ListenerKey;

/// One parked client connection: 24 bytes for a plain one. Its peer address is asked of the
/// kernel again when it wakes rather than stored, unless a PROXY header gave the client's
/// address. Dropping it closes the connection and gives back its place in the listener's limit.
pub struct Parked {
    stream: std::net::TcpStream,
    /// When the keep-alive timeout closes it, in whole seconds after the lot's epoch.
    expires: u32,
    slot: ConnSlot,
    /// What only some connections have, out of line.
    extra: Option<Box<ParkedExtra>>,
}

/// The parts of a parked connection that plain connections from a direct client do not have.
struct ParkedExtra {
    /// The client's address when a PROXY header named it.
    client: Option<SocketAddr>,
    /// The rustls state of a TLS connection.
    tls: Option<Box<TlsSession>>,
    /// The listener a TCP route handed the connection to.
    handed_to: Option<ListenerKey>,
}

impl Parked {
    /// The connection again, for a new task.
    pub fn into_conn(self) -> Option<Conn> {
        let (client, tls, handed_to) = match self.extra {
            Some(extra) => (extra.client, extra.tls, extra.handed_to),
            None => (None, None, None),
        };
        let client_from_header = client.is_some();
        let client = match client {
            Some(c) => c,
            None => self.stream.peer_addr().ok()?,
        };
        Some(Conn {
            stream: Stream::from_parts(TcpStream::from_std(self.stream).ok()?, tls),
            client,
            client_from_header,
            early: Vec::new(),
            slot: self.slot,
            handed_to,
        })
    }
}

/// A worker's parked connections.
pub struct ParkingLot {
    epoll: OnceCell<AsyncFd<OwnedFd>>,
    epoch: Instant,
    entries: RefCell<Vec<Option<Parked>>>,
    free: RefCell<Vec<u32>>,
    len: Cell<usize>,
    closed: Cell<bool>,
}

/// Events taken from the epoll set per call.
const BATCH: usize = 64;

impl Default for ParkingLot {
    fn default() -> Self {
        ParkingLot {
            epoll: OnceCell::new(),
            epoch: Instant::now(),
            entries: RefCell::default(),
            free: RefCell::default(),
            len: Cell::new(0),
            closed: Cell::new(false),
        }
    }
}

impl ParkingLot {
    /// An entry for `conn`'s socket, to be closed `keepalive` from now unless it wakes first
    /// (rounded up to a whole second: the worker looks for expired entries once a second). `None`
    /// if the socket cannot leave the runtime (it is then closed).
    pub fn entry(&self, conn: Conn, keepalive: Duration) -> Option<Parked> {
        let at = self.epoch.elapsed() + keepalive;
        let Conn {
            mut stream,
            client,
            client_from_header,
            slot,
            handed_to,
            ..
        } = conn;
        if !stream.is_quiet() {
            // Decrypted bytes wait, or TLS records are still to be sent: not idle after all.
            return None;
        }
        let (tcp, tls) = stream.into_parts();
        let client = client_from_header.then_some(client);
        let extra = (client.is_some() || tls.is_some() || handed_to.is_some())
            .then(|| Box::new(ParkedExtra { client, tls, handed_to }));
        Some(Parked {
            stream: tcp.into_std().ok()?,
            expires: u32::try_from(at.as_secs().saturating_add(1)).unwrap_or(u32::MAX),
            slot,
            extra,
        })
    }

    /// How many connections are parked.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len.get() == 0
    }

    /// Whether the lot was closed (the worker drains): connections close instead of parking.
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Whether connections can be parked (the lot is open and its epoll set exists).
    pub fn available(&self) -> bool {
        !self.closed.get() && self.epoll().is_ok()
    }

    /// Parks a connection. On failure (no epoll set, or the lot is closed) it is handed back.
    pub fn park(&self, parked: Parked) -> Result<(), Parked> {
        if self.closed.get() {
            return Err(parked);
        }
        let Ok(epoll) = self.epoll() else {
            return Err(parked);
        };
        let fd = parked.stream.as_raw_fd();
        let index = {
            let mut entries = self.entries.borrow_mut();
            match self.free.borrow_mut().pop() {
                Some(i) => i,
                None => {
                    entries.push(None);
                    (entries.len() - 1) as u32
                }
            }
        };
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: token(index, fd),
        };
        // SAFETY: both descriptors are open; `event` is a valid epoll_event.
        let rc = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
        if rc != 0 {
            self.free.borrow_mut().push(index);
            return Err(parked);
        }
        self.entries.borrow_mut()[index as usize] = Some(parked);
        self.len.set(self.len.get() + 1);
        Ok(())
    }

    /// Waits until parked connections have something to read (a request, or the client's close),
    /// and moves them out of the lot into `woken`.
    pub async fn wait_woken(&self, woken: &mut Vec<Parked>) -> io::Result<()> {
        let epoll = self.epoll()?;
        loop {
            let mut guard = epoll.readable().await?;
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
            loop {
                // SAFETY: `events` has room for BATCH entries; a zero timeout never blocks.
                let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), BATCH as i32, 0) };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                for event in &events[..n as usize] {
                    let (index, fd) = untoken(event.u64);
                    if let Some(p) = self.remove(index, fd) {
                        // SAFETY: `fd` is open (owned by `p`); removing it from our set.
                        unsafe {
                            libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
                        }
                        woken.push(p);
                    }
                }
                if (n as usize) < BATCH {
                    guard.clear_ready();
                    break;
                }
            }
            if !woken.is_empty() {
                return Ok(());
            }
        }
    }

    /// Moves the connections whose keep-alive time is over into `out`.
    pub fn take_expired(&self, now: Instant, out: &mut Vec<Parked>) {
        if self.is_empty() {
            return;
        }
        let now = u32::try_from(now.saturating_duration_since(self.epoch).as_secs()).unwrap_or(u32::MAX);
        let expired: Vec<(u32, RawFd)> = self
            .entries
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                e.as_ref()
                    .filter(|p| p.expires <= now)
                    .map(|p| (i as u32, p.stream.as_raw_fd()))
            })
            .collect();
        out.extend(expired.into_iter().filter_map(|(i, fd)| self.remove(i, fd)));
    }

    /// Closes the lot (parking is refused from now on) and moves every parked connection into
    /// `out`.
    pub fn close(&self, out: &mut Vec<Parked>) {
        self.closed.set(true);
        out.extend(self.entries.borrow_mut().drain(..).flatten());
        self.free.borrow_mut().clear();
        self.len.set(0);
    }

    /// Takes entry `index` if it still holds the connection on `fd`. A closed descriptor leaves
    /// the epoll set by itself.
    fn remove(&self, index: u32, fd: RawFd) -> Option<Parked> {
        let mut entries = self.entries.borrow_mut();
        let slot = entries.get_mut(index as usize)?;
        if slot.as_ref()?.stream.as_raw_fd() != fd {
            return None;
        }
        let taken = slot.take();
        self.free.borrow_mut().push(index);
        self.len.set(self.len.get() - 1);
        taken
    }

    /// The worker's epoll set, created (and registered with the runtime) on first use.
    fn epoll(&self) -> io::Result<&AsyncFd<OwnedFd>> {
        if let Some(e) = self.epoll.get() {
            return Ok(e);
        }
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the AsyncFd owns `owned`, which stays open for as long as it does.
        let registered = unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(self.epoll.get_or_init(|| registered))
    }
}

fn token(index: u32, fd: RawFd) -> u64 {
    (u64::from(fd as u32) << 32) | u64::from(index)
}

fn untoken(token: u64) -> (u32, RawFd) {
    (token as u32, (token >> 32) as u32 as RawFd)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_parked_connection_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<Option<super::Parked>>(), 24);
    }
}
