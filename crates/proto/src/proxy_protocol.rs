//! PROXY protocol v1 and v2 (<https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt>).
//!
//! [`decode`] reads a header from the start of a connection's first bytes; [`encode_v1`] and
//! [`encode_v2`] write one in front of an upstream connection.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature: `\r\n\r\n\0\r\nQUIT\n`.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line allowed by the specification, CRLF included.
pub const V1_MAX_LEN: usize = 107;
/// The longest v2 header Rampart accepts (16-byte fixed part plus addresses and TLVs).
pub const V2_MAX_LEN: usize = 16 + 536;

/// Which PROXY protocol version to send to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    V1,
    V2,
}

/// A decoded PROXY header. `addresses` is `None` for v1 `UNKNOWN` and v2 `LOCAL` headers, which
/// mean "use the connection's own addresses".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    pub version: ProxyVersion,
    pub addresses: Option<ProxyAddresses>,
}

/// The original client (`source`) and the address it connected to (`destination`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyAddresses {
    pub source: SocketAddr,
    pub destination: SocketAddr,
}

/// Why a PROXY header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("not a PROXY protocol header")]
    NotProxy,
    #[error("PROXY v1 line longer than 107 bytes")]
    V1TooLong,
    #[error("malformed PROXY v1 line")]
    V1Malformed,
    #[error("unsupported PROXY v2 version or command byte {0:#04x}")]
    V2BadVersionCommand(u8),
    #[error("unsupported PROXY v2 address family byte {0:#04x}")]
    V2BadFamily(u8),
    #[error("PROXY v2 address block too short for its family")]
    V2ShortAddresses,
    #[error("PROXY v2 header longer than {V2_MAX_LEN} bytes")]
    V2TooLong,
}

/// Decodes a PROXY header at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, or the header and the number of bytes it took.
/// Bytes after the header belong to the proxied stream.
pub fn decode(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] == b'P' {
        decode_v1(buf)
    } else if buf[0] == b'\r' {
        decode_v2(buf)
    } else {
        Err(ProxyError::NotProxy)
    }
}

fn decode_v1(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    const PREFIX: &[u8] = b"PROXY ";
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return Err(ProxyError::NotProxy);
    }
    let window = &buf[..buf.len().min(V1_MAX_LEN)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX_LEN {
            Err(ProxyError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    if lf == 0 || window[lf - 1] != b'\r' {
        return Err(ProxyError::V1Malformed);
    }
    let line = std::str::from_utf8(&window[PREFIX.len()..lf - 1]).map_err(|_| ProxyError::V1Malformed)?;
    let mut parts = line.split(' ');
    let proto = parts.next().ok_or(ProxyError::V1Malformed)?;
    if proto == "UNKNOWN" {
        // The rest of an UNKNOWN line is ignored by specification.
        let header = ProxyHeader {
            version: ProxyVersion::V1,
            addresses: None,
        };
        return Ok(Some((header, lf + 1)));
    }
    let fields: Vec<&str> = parts.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err(ProxyError::V1Malformed);
    };
    let (src, dst): (IpAddr, IpAddr) = match proto {
        "TCP4" => (
            src.parse::<Ipv4Addr>().map_err(|_| ProxyError::V1Malformed)?.into(),
            dst.parse::<Ipv4Addr>().map_err(|_| ProxyError::V1Malformed)?.into(),
        ),
        "TCP6" => (
            src.parse::<Ipv6Addr>().map_err(|_| ProxyError::V1Malformed)?.into(),
            dst.parse::<Ipv6Addr>().map_err(|_| ProxyError::V1Malformed)?.into(),
        ),
        _ => return Err(ProxyError::V1Malformed),
    };
    let port = |s: &str| -> Result<u16, ProxyError> {
        // The specification forbids leading zeros and signs.
        if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ProxyError::V1Malformed);
        }
        s.parse().map_err(|_| ProxyError::V1Malformed)
    };
    let addresses = ProxyAddresses {
        source: SocketAddr::new(src, port(sport)?),
        destination: SocketAddr::new(dst, port(dport)?),
    };
    Ok(Some((
        ProxyHeader {
            version: ProxyVersion::V1,
            addresses: Some(addresses),
        },
        lf + 1,
    )))
}

fn decode_v2(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] != V2_SIGNATURE[..n] {
        return Err(ProxyError::NotProxy);
    }
    if buf.len() < 16 {
        return Ok(None);
    }
    let version_command = buf[12];
    let family = buf[13];
    let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if 16 + len > V2_MAX_LEN {
        return Err(ProxyError::V2TooLong);
    }
    let local = match version_command {
        0x20 => true,
        0x21 => false,
        other => return Err(ProxyError::V2BadVersionCommand(other)),
    };
    if buf.len() < 16 + len {
        return Ok(None);
    }
    let body = &buf[16..16 + len];
    let total = 16 + len;
    let header = |addresses| ProxyHeader {
        version: ProxyVersion::V2,
        addresses,
    };
    if local {
        return Ok(Some((header(None), total)));
    }
    let addresses = match family {
        // AF_UNSPEC: the receiver must ignore the address block.
        0x00 => None,
        0x11 | 0x12 => {
            if body.len() < 12 {
                return Err(ProxyError::V2ShortAddresses);
            }
            let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some(ProxyAddresses {
                source: SocketAddr::new(ip(0), port(8)),
                destination: SocketAddr::new(ip(4), port(10)),
            })
        }
        0x21 | 0x22 => {
            if body.len() < 36 {
                return Err(ProxyError::V2ShortAddresses);
            }
            let ip = |o: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&body[o..o + 16]);
                IpAddr::from(octets)
            };
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some(ProxyAddresses {
                source: SocketAddr::new(ip(0), port(32)),
                destination: SocketAddr::new(ip(16), port(34)),
            })
        }
        // Unix sockets and unknown families carry no TCP addresses we can use.
        0x31 | 0x32 => None,
        other => return Err(ProxyError::V2BadFamily(other)),
    };
    Ok(Some((header(addresses), total)))
}

/// Brings both addresses to one family: an IPv4 address beside an IPv6 one becomes v4-mapped.
fn same_family(a: &ProxyAddresses) -> (IpAddr, IpAddr) {
    match (a.source.ip(), a.destination.ip()) {
        (IpAddr::V4(s), IpAddr::V6(d)) => (IpAddr::V6(s.to_ipv6_mapped()), IpAddr::V6(d)),
        (IpAddr::V6(s), IpAddr::V4(d)) => (IpAddr::V6(s), IpAddr::V6(d.to_ipv6_mapped())),
        (s, d) => (s, d),
    }
}

/// Appends a v1 header line for `addresses` to `out`.
pub fn encode_v1(addresses: &ProxyAddresses, out: &mut Vec<u8>) {
    use std::io::Write;
    let (src, dst) = same_family(addresses);
    let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "PROXY {proto} {src} {dst} {} {}\r\n",
        addresses.source.port(),
        addresses.destination.port()
    );
}

/// Appends a v2 `PROXY` header (TCP over IPv4 or IPv6, no TLVs) for `addresses` to `out`.
pub fn encode_v2(addresses: &ProxyAddresses, out: &mut Vec<u8>) {
    encode_v2_for(addresses, false, out)
}

/// [`encode_v2`] for a datagram (`datagram`: the protocol byte says UDP, `0x12` or `0x22`, as a
/// PROXY header in front of each datagram of a UDP session does), else for a stream.
pub fn encode_v2_for(addresses: &ProxyAddresses, datagram: bool, out: &mut Vec<u8>) {
    let transport = if datagram { 0x02 } else { 0x01 };
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21);
    match same_family(addresses) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(0x10 | transport);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.push(0x20 | transport);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        _ => unreachable!("same_family returns one family"),
    }
    out.extend_from_slice(&addresses.source.port().to_be_bytes());
    out.extend_from_slice(&addresses.destination.port().to_be_bytes());
}

#[cfg(test)]
mod tests;
