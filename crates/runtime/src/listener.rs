//! Listening sockets: TCP listeners, and UDP sockets (HTTP/3's QUIC, UDP load balancing), each
//! bound once per worker with SO_REUSEPORT.

use std::collections::HashMap;
use std::net::SocketAddr;

use rampart_model::Transport;
use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length asked of the kernel (capped by net.core.somaxconn).
const BACKLOG: i32 = 4096;

/// Receive and send buffers asked of the kernel for a UDP socket (capped by net.core.rmem_max
/// and wmem_max): a burst of datagrams waits here while the worker is busy.
const UDP_BUFFER: usize = 4 << 20;

/// One bound socket of either transport.
#[derive(Debug)]
pub enum BoundSocket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl BoundSocket {
    /// Its transport.
    pub fn transport(&self) -> Transport {
        match self {
            BoundSocket::Tcp(_) => Transport::Tcp,
            BoundSocket::Udp(_) => Transport::Udp,
        }
    }

    /// A duplicate descriptor of the same socket.
    pub fn try_clone(&self) -> std::io::Result<BoundSocket> {
        Ok(match self {
            BoundSocket::Tcp(s) => BoundSocket::Tcp(s.try_clone()?),
            BoundSocket::Udp(s) => BoundSocket::Udp(s.try_clone()?),
        })
    }

    /// Its descriptor.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            BoundSocket::Tcp(s) => s.as_fd(),
            BoundSocket::Udp(s) => s.as_fd(),
        }
    }
}

/// Binds a socket of `transport` on `addr` with SO_REUSEPORT, one per worker.
pub fn bind_socket(transport: Transport, addr: SocketAddr) -> std::io::Result<BoundSocket> {
    Ok(match transport {
        Transport::Tcp => BoundSocket::Tcp(bind_reuseport(addr)?),
        Transport::Udp => BoundSocket::Udp(bind_udp_reuseport(addr)?),
    })
}

/// Binds a non-blocking listening socket with SO_REUSEADDR and SO_REUSEPORT, so that each worker
/// can have its own socket on the same address and the kernel balances connections among them.
pub fn bind_reuseport(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = new_socket(addr, Type::STREAM, Protocol::TCP)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Binds a non-blocking UDP socket with SO_REUSEPORT: the kernel gives each worker's socket the
/// datagrams of a share of the client addresses (by a hash of the four-tuple, so one client's
/// datagrams keep reaching the same worker).
pub fn bind_udp_reuseport(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    let _ = socket.set_recv_buffer_size(UDP_BUFFER);
    let _ = socket.set_send_buffer_size(UDP_BUFFER);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Checks that no other socket of `transport` is bound to `addr`, or to an address that overlaps
/// it (the wildcard of its family, or a specific address under a wildcard `addr`).
///
/// SO_REUSEPORT lets any process of the same user bind the same address and take a share of its
/// connections, so a second Rampart would start silently beside the first. A bind without
/// SO_REUSEPORT is refused (`AddrInUse`) while another socket is bound there; it keeps
/// SO_REUSEADDR so that connections of an earlier process still in TIME_WAIT do not count. The
/// probe socket is closed again at once. Call it before this process binds `addr` itself.
pub fn probe_unused(transport: Transport, addr: SocketAddr) -> std::io::Result<()> {
    let socket = match transport {
        Transport::Tcp => new_socket(addr, Type::STREAM, Protocol::TCP)?,
        Transport::Udp => new_socket(addr, Type::DGRAM, Protocol::UDP)?,
    };
    socket.bind(&addr.into())
}

/// A socket for `addr`; IPv6 wildcards take IPv4 clients too. TCP sockets get SO_REUSEADDR
/// (so that an earlier process's connections in TIME_WAIT do not block the address); UDP ones
/// must not, since on UDP it lets any other socket with it share the address.
fn new_socket(addr: SocketAddr, kind: Type, protocol: Protocol) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    if addr.is_ipv6() {
        // `[::]:PORT` takes IPv4 clients too, as most operators expect.
        let _ = socket.set_only_v6(false);
    }
    if protocol == Protocol::TCP {
        socket.set_reuse_address(true)?;
    }
    Ok(socket)
}

/// Sockets handed over by the process this one replaces, by transport and address.
/// [`crate::Engine::start`] uses them in place of binding; those it does not use are closed.
#[derive(Debug, Default)]
pub struct InheritedSockets {
    by_address: HashMap<(Transport, SocketAddr), Vec<BoundSocket>>,
}

impl InheritedSockets {
    /// Adds a handed-over socket (a TCP listener or a UDP socket); returns its transport and the
    /// address it is bound to.
    pub fn add(&mut self, socket: Socket) -> std::io::Result<(Transport, SocketAddr)> {
        let addr = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| std::io::Error::other("not an IP socket"))?;
        socket.set_nonblocking(true)?;
        let socket = match socket.r#type()? {
            Type::DGRAM => BoundSocket::Udp(socket.into()),
            _ => BoundSocket::Tcp(socket.into()),
        };
        let key = (socket.transport(), addr);
        self.by_address.entry(key).or_default().push(socket);
        Ok(key)
    }

    /// Whether a socket of `transport` bound to `addr` was handed over.
    pub fn has(&self, transport: Transport, addr: SocketAddr) -> bool {
        self.by_address.contains_key(&(transport, addr))
    }

    /// The sockets of `transport` bound to `addr`, taken out.
    pub fn take(&mut self, transport: Transport, addr: SocketAddr) -> Vec<BoundSocket> {
        self.by_address.remove(&(transport, addr)).unwrap_or_default()
    }

    /// The TCP listener bound to `addr`, if one was handed over (the admin listener's).
    pub fn take_tcp(&mut self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        let mut list = self.take(Transport::Tcp, addr);
        let found = list.pop().and_then(|s| match s {
            BoundSocket::Tcp(l) => Some(l),
            BoundSocket::Udp(_) => None,
        });
        if !list.is_empty() {
            self.by_address.insert((Transport::Tcp, addr), list);
        }
        found
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
        let err = probe_unused(Transport::Tcp, addr).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // A wildcard on the same port overlaps it too.
        let wildcard = SocketAddr::from(([0, 0, 0, 0], addr.port()));
        assert_eq!(
            probe_unused(Transport::Tcp, wildcard).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        drop(held);
        probe_unused(Transport::Tcp, addr).unwrap();
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
                probe_unused(Transport::Tcp, addr).unwrap_err().kind(),
                std::io::ErrorKind::AddrInUse,
                "{addr}"
            );
        }
        // The probe holds nothing: the address can still be bound afterwards.
        drop(held);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        probe_unused(Transport::Tcp, addr).unwrap();
        bind_reuseport(addr).unwrap();
    }

    #[test]
    fn udp_sockets_share_a_port_with_each_other_not_with_strangers() {
        // A UDP socket on the port of a TCP listener this test holds: the transports do not
        // collide. (A port whose UDP side another process holds is passed over.)
        let (_tcp, first) = (0..20)
            .find_map(|_| {
                let tcp = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
                let udp = bind_udp_reuseport(tcp.local_addr().unwrap()).ok()?;
                Some((tcp, udp))
            })
            .expect("a port free on both transports");
        let addr = first.local_addr().unwrap();
        // A second worker's socket on the same address; a stranger's probe is refused.
        let _second = bind_udp_reuseport(addr).unwrap();
        assert_eq!(
            probe_unused(Transport::Udp, addr).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        // Handed over, a UDP socket is told from a TCP one.
        let mut inherited = InheritedSockets::default();
        let key = inherited.add(Socket::from(first)).unwrap();
        assert_eq!(key, (Transport::Udp, addr));
        assert!(inherited.has(Transport::Udp, addr) && !inherited.has(Transport::Tcp, addr));
        assert!(inherited.take_tcp(addr).is_none());
        assert!(matches!(
            inherited.take(Transport::Udp, addr).as_slice(),
            [BoundSocket::Udp(_)]
        ));
    }
}
