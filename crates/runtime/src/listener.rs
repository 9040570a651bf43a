//! Listening sockets.

use std::collections::HashMap;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length asked of the kernel (capped by net.core.somaxconn).
const BACKLOG: i32 = 4096;

/// Binds a non-blocking listening socket with SO_REUSEADDR and SO_REUSEPORT, so that each worker
/// can have its own socket on the same address and the kernel balances connections among them.
pub fn bind_reuseport(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = new_socket(addr)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Checks that no other socket listens on `addr`, or on an address that overlaps it (the
/// wildcard of its family, or a specific address under a wildcard `addr`).
///
/// SO_REUSEPORT lets any process of the same user bind the same address and take a share of its
/// connections, so a second Rampart would start silently beside the first. A bind without
/// SO_REUSEPORT is refused (`AddrInUse`) while another socket listens there; it keeps
/// SO_REUSEADDR so that connections of an earlier process still in TIME_WAIT do not count. The
/// probe socket is closed again at once. Call it before this process binds `addr` itself.
pub fn probe_unused(addr: SocketAddr) -> std::io::Result<()> {
    let socket = new_socket(addr)?;
    socket.bind(&addr.into())
}

/// A TCP socket for `addr` with SO_REUSEADDR; IPv6 wildcards take IPv4 clients too.
fn new_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // `[::]:PORT` takes IPv4 clients too, as most operators expect.
        let _ = socket.set_only_v6(false);
    }
    socket.set_reuse_address(true)?;
    Ok(socket)
}

/// Listening sockets handed over by the process this one replaces, by the address each is bound
/// to. [`crate::Engine::start`] uses them in place of binding; those it does not use are closed.
#[derive(Debug, Default)]
pub struct InheritedSockets {
    by_address: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
}

impl InheritedSockets {
    /// Adds a listening socket; returns the address it is bound to.
    pub fn add(&mut self, socket: std::net::TcpListener) -> std::io::Result<SocketAddr> {
        let addr = socket.local_addr()?;
        socket.set_nonblocking(true)?;
        self.by_address.entry(addr).or_default().push(socket);
        Ok(addr)
    }

    /// Whether a socket bound to `addr` was handed over.
    pub fn has(&self, addr: SocketAddr) -> bool {
        self.by_address.contains_key(&addr)
    }

    /// The sockets bound to `addr`, taken out.
    pub fn take(&mut self, addr: SocketAddr) -> Vec<std::net::TcpListener> {
        self.by_address.remove(&addr).unwrap_or_default()
    }

    /// How many sockets are left.
    pub fn len(&self) -> usize {
        self.by_address.values().map(Vec::len).sum()
    }

    /// Whether none are left.
    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_refuses_an_address_held_by_another_socket() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = probe_unused(addr).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // A wildcard on the same port overlaps it too.
        let wildcard = SocketAddr::from(([0, 0, 0, 0], addr.port()));
        assert_eq!(
            probe_unused(wildcard).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        drop(held);
        probe_unused(addr).unwrap();
    }

    #[test]
    fn probe_refuses_reuseport_sockets_and_specific_addresses_under_a_wildcard() {
        let held = bind_reuseport("0.0.0.0:0".parse().unwrap()).unwrap();
        let port = held.local_addr().unwrap().port();
        for addr in [
            SocketAddr::from(([0, 0, 0, 0], port)),
            SocketAddr::from(([127, 0, 0, 1], port)),
        ] {
            assert_eq!(
                probe_unused(addr).unwrap_err().kind(),
                std::io::ErrorKind::AddrInUse,
                "{addr}"
            );
        }
        // The probe holds nothing: the address can still be bound afterwards.
        drop(held);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        probe_unused(addr).unwrap();
        bind_reuseport(addr).unwrap();
    }
}
