//! Each worker's idle keep-alive upstream connections ("hot pipes"), per target address.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

struct Idle {
    stream: TcpStream,
    since: Instant,
}

/// A multiply-rotate hasher: target addresses are few and not attacker-chosen, so SipHash's
/// flooding resistance buys nothing here and costs time on every request.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Default)]
pub struct UpstreamPool {
    idle: HashMap<SocketAddr, Vec<Idle>, BuildHasherDefault<AddrHasher>>,
}

impl UpstreamPool {
    /// The most recently parked live connection to `addr` no older than `max_idle`, if any.
    /// Connections the upstream has closed (or that hold unexpected bytes) are dropped.
    pub fn take(&mut self, addr: SocketAddr, max_idle: Duration) -> Option<TcpStream> {
        let list = self.idle.get_mut(&addr)?;
        while let Some(conn) = list.pop() {
            if conn.since.elapsed() <= max_idle && !readable_now(&conn.stream) {
                return Some(conn.stream);
            }
        }
        None
    }

    /// Parks a connection after a complete exchange, unless `addr` already has `max` parked.
    pub fn put(&mut self, addr: SocketAddr, stream: TcpStream, max: usize) {
        let list = self.idle.entry(addr).or_default();
        if list.len() < max {
            list.push(Idle {
                stream,
                since: Instant::now(),
            });
        }
    }

    /// Closes parked connections older than `max_idle` (called periodically by the worker).
    pub fn sweep(&mut self, max_idle: Duration) {
        for list in self.idle.values_mut() {
            list.retain(|c| c.since.elapsed() <= max_idle && !readable_now(&c.stream));
        }
        self.idle.retain(|_, list| !list.is_empty());
    }
}

/// Whether the event loop has seen the socket become readable: for an idle upstream connection
/// that means it was closed (EOF) or sent something unasked; either way it cannot be reused.
/// Costs no system call.
fn readable_now(stream: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(stream.poll_read_ready(&mut cx), Poll::Ready(_))
}
