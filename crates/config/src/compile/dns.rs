//! `[global]` settings of DNS discovery: `resolvers`, `dns_ttl_min`, `dns_ttl_max`, `dns_grace`,
//! `dns_hold`.

use std::net::{IpAddr, SocketAddr};

use rampart_model::defaults;
use rampart_model::discovery::DnsSettings;

use super::Checker;
use crate::raw::RawGlobal;

impl Checker<'_> {
    pub(super) fn dns_settings(&mut self, global: &RawGlobal) -> DnsSettings {
        let resolvers = global.resolvers.as_ref().map(|list| {
            if list.get_ref().is_empty() {
                self.error(
                    list.span(),
                    "resolvers is empty: list servers (\"IP\" or \"IP:PORT\"), or leave it out for /etc/resolv.conf's",
                );
            }
            list.get_ref()
                .iter()
                .filter_map(|r| match parse_resolver(r.get_ref()) {
                    Some(addr) => Some(addr),
                    None => {
                        self.error(
                            r.span(),
                            format!(
                                "`{}` is not a resolver address (expected \"IP\" or \"IP:PORT\")",
                                r.get_ref()
                            ),
                        );
                        None
                    }
                })
                .collect()
        });
        let ttl_min = self.duration(&global.dns_ttl_min, defaults::DNS_TTL_MIN);
        let ttl_max = self.duration(&global.dns_ttl_max, defaults::DNS_TTL_MAX);
        if ttl_max < ttl_min {
            let at = global
                .dns_ttl_max
                .as_ref()
                .or(global.dns_ttl_min.as_ref())
                .map_or(0..0, |v| v.span());
            self.error(
                at,
                format!("dns_ttl_max ({ttl_max:?}) is shorter than dns_ttl_min ({ttl_min:?})"),
            );
        }
        DnsSettings {
            resolvers,
            ttl_min,
            ttl_max,
            grace: self.duration(&global.dns_grace, defaults::DNS_GRACE),
            hold: self.duration(&global.dns_hold, defaults::DNS_HOLD),
        }
    }
}

/// `"IP"` (port 53) or `"IP:PORT"` (`"[IPv6]:PORT"`).
fn parse_resolver(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    text.parse::<SocketAddr>().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_resolver;

    #[test]
    fn resolvers_are_addresses_with_port_53_by_default() {
        assert_eq!(parse_resolver("10.0.0.2"), Some("10.0.0.2:53".parse().unwrap()));
        assert_eq!(
            parse_resolver("127.0.0.1:5353"),
            Some("127.0.0.1:5353".parse().unwrap())
        );
        assert_eq!(parse_resolver("::1"), Some("[::1]:53".parse().unwrap()));
        assert_eq!(parse_resolver("[::1]:5353"), Some("[::1]:5353".parse().unwrap()));
        assert_eq!(parse_resolver("dns.internal"), None);
    }
}
