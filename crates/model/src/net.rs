//! Small network value types shared by the config compiler and the data plane.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network such as `10.0.0.0/8` or `::1/128`. IPv4 addresses also match their IPv4-mapped
/// IPv6 form, so a listener on `[::]` treats `::ffff:10.1.2.3` as `10.1.2.3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Why a network could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an IP network (expected an address such as 10.0.0.0/8 or 2001:db8::/32)")]
pub struct IpNetError(String);

impl FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || IpNetError(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (
                a.parse::<IpAddr>().map_err(|_| err())?,
                Some(p.parse::<u8>().map_err(|_| err())?),
            ),
            None => (s.parse::<IpAddr>().map_err(|_| err())?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(err());
        }
        Ok(IpNet { addr, prefix })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Whether listening on `a` and on `b` takes connections for the same addresses: the same
/// address and port, or a wildcard beside any address of its family on the same port (`[::]`
/// takes IPv4 clients too, since listeners bind it dual-stack). The config checker and the
/// runtime's bind probe both follow this rule.
pub fn binds_overlap(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    if a.port() != b.port() {
        return false;
    }
    let (a, b) = (a.ip(), b.ip());
    a == b
        || (a.is_unspecified() && (a.is_ipv6() || b.is_ipv4()))
        || (b.is_unspecified() && (b.is_ipv6() || a.is_ipv4()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_listen_addresses() {
        let a = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert!(binds_overlap(a("0.0.0.0:80"), a("127.0.0.1:80")));
        assert!(binds_overlap(a("127.0.0.1:80"), a("0.0.0.0:80")));
        assert!(binds_overlap(a("[::]:80"), a("127.0.0.1:80")));
        assert!(binds_overlap(a("127.0.0.1:80"), a("127.0.0.1:80")));
        assert!(!binds_overlap(a("127.0.0.1:80"), a("127.0.0.2:80")));
        assert!(!binds_overlap(a("0.0.0.0:80"), a("0.0.0.0:81")));
        assert!(!binds_overlap(a("0.0.0.0:80"), a("[::1]:80")));
    }

    #[test]
    fn membership() {
        let net: IpNet = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains("10.200.1.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let one: IpNet = "::1".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<IpNet>().is_err());
        assert!("banana".parse::<IpNet>().is_err());
    }
}
