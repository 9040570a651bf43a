//! Targets found by DNS: the questions an upstream's targets come from, the answers they got,
//! and the resolver settings. The control plane asks; the workers only ever see the targets the
//! answers became, published in a new snapshot.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::defaults;

/// A DNS question whose answers are targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Query {
    /// The A and AAAA records of `name`, each address at `port`.
    Host { name: String, port: u16 },
    /// The SRV records of `name`: each names a host (whose addresses are looked up in turn), a
    /// port, a priority and a weight.
    Srv { name: String },
}

impl Query {
    /// `dns+NAME:PORT` or `srv+NAME`, as a target written by name; `None` for anything else
    /// (a plain `host:port`). `Err` says what is wrong with a target that starts like one.
    pub fn parse(spec: &str) -> Option<Result<Query, String>> {
        if let Some(rest) = spec.strip_prefix("dns+") {
            let parsed = match rest.rsplit_once(':') {
                Some((name, port)) => match port.parse::<u16>() {
                    Ok(port) if port > 0 => Query::host(name, port),
                    _ => Err(format!("`{spec}`: `{port}` is not a port (1 to 65535)")),
                },
                None => Err(format!("`{spec}` has no port: write dns+NAME:PORT")),
            };
            return Some(parsed);
        }
        spec.strip_prefix("srv+").map(Query::srv)
    }

    /// A and AAAA records of `name` at `port`, when `name` is a DNS name.
    pub fn host(name: &str, port: u16) -> Result<Query, String> {
        check_name(name)?;
        Ok(Query::Host {
            name: name.trim_end_matches('.').to_ascii_lowercase(),
            port,
        })
    }

    /// SRV records of `name` (such as `_http._tcp.api.internal`), when it is a DNS name.
    pub fn srv(name: &str) -> Result<Query, String> {
        check_name(name)?;
        Ok(Query::Srv {
            name: name.trim_end_matches('.').to_ascii_lowercase(),
        })
    }

    /// The name asked about.
    pub fn name(&self) -> &str {
        match self {
            Query::Host { name, .. } | Query::Srv { name } => name,
        }
    }
}

/// A name of dot-separated labels of letters, digits, `-` and `_` (SRV names start with `_`).
fn check_name(name: &str) -> Result<(), String> {
    let trimmed = name.trim_end_matches('.');
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if trimmed.is_empty() || trimmed.len() > 253 || !trimmed.split('.').all(label_ok) {
        return Err(format!("`{name}` is not a DNS name"));
    }
    if trimmed.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "`{name}` is an address, not a name: write it as a plain target"
        ));
    }
    Ok(())
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Query::Host { name, port } => write!(f, "dns+{name}:{port}"),
            Query::Srv { name } => write!(f, "srv+{name}"),
        }
    }
}

/// Targets of an upstream that come from one DNS question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub query: Query,
    /// The weight of each address an A/AAAA answer gives (SRV records carry their own).
    pub weight: u32,
    /// Every address it gives is a backup target.
    pub backup: bool,
}

/// One address an answer gave.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    pub addr: SocketAddr,
    /// The name whose address this is (the SRV record's target for SRV): what a target's
    /// certificate is verified against.
    pub host: String,
    /// SRV priority (lower first); 0 for A/AAAA.
    pub priority: u16,
    /// SRV weight; 0 for A/AAAA.
    pub weight: u16,
}

/// How names are resolved: `[global] resolvers`, `dns_ttl_min`, `dns_ttl_max`, `dns_grace`,
/// `dns_hold`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSettings {
    /// The servers to ask; `None`: those of `/etc/resolv.conf`.
    pub resolvers: Option<Vec<SocketAddr>>,
    /// An answer is asked again when its TTL runs out, but not sooner than this...
    pub ttl_min: Duration,
    /// ...and not later than this.
    pub ttl_max: Duration,
    /// How long a name that cannot be resolved keeps its last answer before its upstream is
    /// called degraded (it keeps serving that answer after too).
    pub grace: Duration,
    /// How long a name that answers "no address" (NXDOMAIN, or no record of the type asked)
    /// after it had addresses keeps them before its targets go: a zone pushed half-written, or
    /// a record deleted and added back, does not empty an upstream at once.
    pub hold: Duration,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            resolvers: None,
            ttl_min: defaults::DNS_TTL_MIN,
            ttl_max: defaults::DNS_TTL_MAX,
            grace: defaults::DNS_GRACE,
            hold: defaults::DNS_HOLD,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_by_name_parse_and_print_back() {
        let q = Query::parse("dns+API.internal.:8080").unwrap().unwrap();
        assert_eq!(q, Query::host("api.internal", 8080).unwrap());
        assert_eq!(q.to_string(), "dns+api.internal:8080");
        let s = Query::parse("srv+_http._tcp.api.internal").unwrap().unwrap();
        assert_eq!(s.to_string(), "srv+_http._tcp.api.internal");
        assert_eq!(s.name(), "_http._tcp.api.internal");
        assert!(Query::parse("127.0.0.1:80").is_none());
        assert!(Query::parse("api.internal:80").is_none());
    }

    #[test]
    fn bad_names_and_ports_say_what_is_wrong() {
        let err = |s: &str| Query::parse(s).unwrap().unwrap_err();
        assert_eq!(
            err("dns+api.internal"),
            "`dns+api.internal` has no port: write dns+NAME:PORT"
        );
        assert_eq!(err("dns+api:0"), "`dns+api:0`: `0` is not a port (1 to 65535)");
        assert_eq!(err("dns+api:http"), "`dns+api:http`: `http` is not a port (1 to 65535)");
        assert_eq!(err("dns+a..b:80"), "`a..b` is not a DNS name");
        assert_eq!(err("srv+"), "`` is not a DNS name");
        assert_eq!(
            err("dns+10.0.0.1:80"),
            "`10.0.0.1` is an address, not a name: write it as a plain target"
        );
    }
}
