//! Listening sockets.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length asked of the kernel (capped by net.core.somaxconn).
const BACKLOG: i32 = 4096;

/// Binds a non-blocking listening socket with SO_REUSEADDR and SO_REUSEPORT, so that each worker
/// can have its own socket on the same address and the kernel balances connections among them.
pub fn bind_reuseport(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // `[::]:PORT` takes IPv4 clients too, as most operators expect.
        let _ = socket.set_only_v6(false);
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
