//! One DNS question asked with hickory-resolver: a target's A and AAAA records, or its SRV
//! records and the addresses of the hosts they name.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, NameServerConfigGroup, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::{ResolveError, TokioResolver};
use rampart_model::discovery::{DnsSettings, Found, Query};

/// What one question answered.
#[derive(Debug)]
pub struct Answer {
    /// Sorted, so that the same records give the same targets in the same order.
    pub found: Vec<Found>,
    /// How long the answer holds (the shortest TTL among its records; the negative TTL, or
    /// none, when the name has no address).
    pub ttl: Option<Duration>,
}

/// A resolver for `settings`: its `resolvers`, else those of `/etc/resolv.conf`. Every question
/// goes to the servers (no cache: it is asked again only when its TTL has run out), for both A
/// and AAAA records.
pub fn resolver(settings: &DnsSettings) -> Result<TokioResolver, String> {
    let provider = TokioConnectionProvider::default();
    let mut builder = match &settings.resolvers {
        Some(servers) => {
            let group: Vec<NameServerConfig> = servers
                .iter()
                .flat_map(|addr| {
                    [
                        NameServerConfig::new(*addr, Protocol::Udp),
                        NameServerConfig::new(*addr, Protocol::Tcp),
                    ]
                })
                .collect();
            let config = ResolverConfig::from_parts(None, Vec::new(), NameServerConfigGroup::from(group));
            TokioResolver::builder_with_config(config, provider)
        }
        None => TokioResolver::builder(provider).map_err(|e| format!("cannot read /etc/resolv.conf: {e}"))?,
    };
    let options: &mut ResolverOpts = builder.options_mut();
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    options.cache_size = 0;
    options.timeout = Duration::from_secs(1);
    options.attempts = 2;
    Ok(builder.build())
}

/// Asks `query`. A name that does not exist, or has no record of the type asked, answers with
/// no address: that is an answer, not a failure. A server that fails (SERVFAIL, REFUSED, a
/// timeout) is a failure: the caller keeps the last answer.
pub async fn ask(resolver: &TokioResolver, query: &Query) -> Result<Answer, String> {
    match query {
        Query::Host { name, port } => {
            let (found, ttl) = addresses(resolver, name, *port, 0, 0).await?;
            Ok(sorted(found, ttl))
        }
        Query::Srv { name } => {
            let records = match resolver.srv_lookup(absolute(name)).await {
                Ok(records) => records,
                Err(e) => return nothing(e),
            };
            let mut ttl = left(records.as_lookup().valid_until());
            let mut found = Vec::new();
            for srv in records.iter() {
                let host = srv.target().to_utf8();
                let host = host.trim_end_matches('.');
                // A target of "." says the service is not offered there.
                if host.is_empty() {
                    continue;
                }
                let (mut addrs, host_ttl) = addresses(resolver, host, srv.port(), srv.priority(), srv.weight()).await?;
                ttl = shortest(ttl, host_ttl);
                found.append(&mut addrs);
            }
            Ok(sorted(found, ttl))
        }
    }
}

/// The A and AAAA records of `host`, each as an address at `port`.
async fn addresses(
    resolver: &TokioResolver,
    host: &str,
    port: u16,
    priority: u16,
    weight: u16,
) -> Result<(Vec<Found>, Option<Duration>), String> {
    match resolver.lookup_ip(absolute(host)).await {
        Ok(ips) => {
            let found = ips
                .iter()
                .map(|ip| Found {
                    addr: SocketAddr::new(ip, port),
                    host: host.to_string(),
                    priority,
                    weight,
                })
                .collect();
            Ok((found, left(ips.valid_until())))
        }
        Err(e) => nothing(e).map(|a| (a.found, a.ttl)),
    }
}

/// An empty answer when a server answered that the name does not exist (NXDOMAIN) or has no
/// record of the type asked (NOERROR with no answer), else the failure. Any other response code
/// (SERVFAIL, REFUSED, NOTIMP, ...) says the server could not answer, not that there is no
/// address: a recursive resolver answers SERVFAIL whenever the authoritative server is out of
/// reach, so taking it as "no address" would empty the upstream on every DNS outage.
fn nothing(e: ResolveError) -> Result<Answer, String> {
    use hickory_resolver::proto::op::ResponseCode;
    use hickory_resolver::proto::ProtoErrorKind;
    if let Some(ProtoErrorKind::NoRecordsFound {
        response_code,
        negative_ttl,
        ..
    }) = e.proto().map(|p| p.kind())
    {
        return match *response_code {
            ResponseCode::NXDomain | ResponseCode::NoError => Ok(Answer {
                found: Vec::new(),
                ttl: negative_ttl.map(|s| Duration::from_secs(u64::from(s))),
            }),
            code => Err(format!("the server answered {}", rcode_name(code))),
        };
    }
    Err(e.to_string())
}

/// A response code as DNS tools print it (`SERVFAIL`, `REFUSED`).
fn rcode_name(code: hickory_resolver::proto::op::ResponseCode) -> String {
    use hickory_resolver::proto::op::ResponseCode;
    match code {
        ResponseCode::ServFail => "SERVFAIL".to_string(),
        ResponseCode::Refused => "REFUSED".to_string(),
        ResponseCode::NotImp => "NOTIMP".to_string(),
        ResponseCode::FormErr => "FORMERR".to_string(),
        other => format!("response code {}", u16::from(other)),
    }
}

/// The name with a final dot: asked as written, never under a search domain.
fn absolute(name: &str) -> String {
    format!("{name}.")
}

fn left(until: Instant) -> Option<Duration> {
    Some(until.saturating_duration_since(Instant::now()))
}

fn shortest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn sorted(mut found: Vec<Found>, ttl: Option<Duration>) -> Answer {
    found.sort();
    found.dedup_by(|a, b| a.addr == b.addr);
    Answer { found, ttl }
}
