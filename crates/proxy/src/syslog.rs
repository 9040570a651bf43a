//! Log lines to a syslog server, as RFC 5424 messages: `<134>1 TIMESTAMP HOST rampart PID - -
//! LINE` (facility local0, severity informational), one datagram per line over UDP or a unix
//! socket, octet-counted (RFC 6587: `LENGTH SP MESSAGE`) over TCP. The log writer thread owns one
//! [`SyslogOutput`] per destination; a server that cannot be written to loses the lines (counted
//! by the caller), and a TCP server is dialled again at most once a second, so that a dead one
//! never holds the writer (each connect and write waits at most [`WAIT`]).

use std::io::{self, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant, SystemTime};

use rampart_model::log_target::SyslogAddr;

use crate::session_log::write_timestamp;

/// The longest a connect or a write to a syslog server waits.
const WAIT: Duration = Duration::from_millis(500);
/// How long after a failure a TCP server is dialled again.
const REDIAL: Duration = Duration::from_secs(1);
/// Longest line sent in a datagram (longer ones are cut): what syslog servers take by default
/// (rsyslog's `maxMessageSize`); over TCP, lines go whole.
const MAX_DATAGRAM_LINE: usize = 8 * 1024;

enum Conn {
    Udp(UdpSocket),
    Tcp(TcpStream),
    Unix(UnixDatagram),
}

/// One syslog destination.
pub struct SyslogOutput {
    addr: SyslogAddr,
    conn: Option<Conn>,
    /// No dial before this (after a failure).
    quiet_until: Option<Instant>,
    /// `HOST rampart PID` (the header's fixed middle).
    origin: String,
    message: Vec<u8>,
}

impl SyslogOutput {
    pub fn new(addr: SyslogAddr) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && h.is_ascii() && !h.contains(' '))
            .unwrap_or_else(|| "-".into());
        SyslogOutput {
            addr,
            conn: None,
            quiet_until: None,
            origin: format!("{host} rampart {}", std::process::id()),
            message: Vec::with_capacity(1024),
        }
    }

    /// Sends each line of `lines` (newline-ended) as one message; returns how many were lost.
    pub fn send_lines(&mut self, lines: &[u8]) -> u64 {
        if let Some(Conn::Tcp(s)) = &self.conn {
            // A syslog server never writes: a connection with something to read was closed by
            // it (or reset). Found before writing, so that the lines are not written into a
            // connection that is gone (what TCP syslog cannot tell otherwise; RELP would).
            if peer_closed(s) {
                self.conn = None;
            }
        }
        let mut lost = 0;
        let now = SystemTime::now();
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if self.send(line, now).is_err() {
                lost += 1;
                self.conn = None;
                self.quiet_until = Some(Instant::now() + REDIAL);
            }
        }
        lost
    }

    fn send(&mut self, line: &[u8], now: SystemTime) -> io::Result<()> {
        if self.conn.is_none() {
            if self.quiet_until.is_some_and(|t| Instant::now() < t) {
                return Err(io::ErrorKind::NotConnected.into());
            }
            self.conn = Some(self.dial()?);
        }
        let m = &mut self.message;
        m.clear();
        m.extend_from_slice(b"<134>1 ");
        write_timestamp(m, now);
        m.push(b' ');
        m.extend_from_slice(self.origin.as_bytes());
        m.extend_from_slice(b" - - ");
        let cut = match self.conn {
            Some(Conn::Tcp(_)) => line.len(),
            _ => line.len().min(MAX_DATAGRAM_LINE),
        };
        m.extend_from_slice(&line[..cut]);
        match self.conn.as_mut() {
            Some(Conn::Udp(s)) => s.send(m).map(drop),
            Some(Conn::Unix(s)) => s.send(m).map(drop),
            Some(Conn::Tcp(s)) => {
                let mut framed = Vec::with_capacity(m.len() + 8);
                let _ = write!(framed, "{} ", m.len());
                framed.extend_from_slice(m);
                s.write_all(&framed)
            }
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn dial(&self) -> io::Result<Conn> {
        match &self.addr {
            SyslogAddr::Udp(addr) => {
                let any: std::net::SocketAddr = if addr.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let s = UdpSocket::bind(any)?;
                s.connect(addr)?;
                s.set_write_timeout(Some(WAIT))?;
                Ok(Conn::Udp(s))
            }
            SyslogAddr::Tcp(addr) => {
                let s = TcpStream::connect_timeout(addr, WAIT)?;
                s.set_write_timeout(Some(WAIT))?;
                s.set_nodelay(true)?;
                Ok(Conn::Tcp(s))
            }
            SyslogAddr::Unix(path) => {
                let s = UnixDatagram::unbound()?;
                s.connect(path)?;
                s.set_write_timeout(Some(WAIT))?;
                Ok(Conn::Unix(s))
            }
        }
    }
}

/// Whether the peer of `s` closed or reset it (a read would not wait).
fn peer_closed(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let closed = !matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    closed || s.set_nonblocking(false).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_rfc5424_messages_and_tcp_frames_count_octets() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut out = SyslogOutput::new(SyslogAddr::Udp(udp.local_addr().unwrap()));
        assert_eq!(out.send_lines(b"{\"a\":1}\nsecond line\n"), 0);
        let mut buf = [0u8; 2048];
        let n = udp.recv(&mut buf).unwrap();
        let first = std::str::from_utf8(&buf[..n]).unwrap();
        let fields: Vec<&str> = first.splitn(8, ' ').collect();
        assert_eq!(fields[0], "<134>1", "{first}");
        assert!(fields[1].ends_with('Z') && fields[1].len() == 27, "{first}");
        assert_eq!(
            (fields[3], fields[4], fields[5], fields[6]),
            ("rampart", &*std::process::id().to_string(), "-", "-")
        );
        assert_eq!(fields[7], "{\"a\":1}");
        let n = udp.recv(&mut buf).unwrap();
        assert!(buf[..n].ends_with(b" - - second line"));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut out = SyslogOutput::new(SyslogAddr::Tcp(listener.local_addr().unwrap()));
        assert_eq!(out.send_lines(b"x\n"), 0);
        let (mut conn, _) = listener.accept().unwrap();
        drop(out);
        let mut got = String::new();
        io::Read::read_to_string(&mut conn, &mut got).unwrap();
        let (len, message) = got.split_once(' ').unwrap();
        assert_eq!(len.parse::<usize>().unwrap(), message.len(), "{got}");
        assert!(message.ends_with(" - - x"));
    }

    #[test]
    fn a_server_that_is_not_there_loses_the_lines_and_is_not_dialled_again_at_once() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let mut out = SyslogOutput::new(SyslogAddr::Tcp(port));
        assert_eq!(out.send_lines(b"a\nb\nc\n"), 3);
        assert!(out.quiet_until.is_some());
    }
}
