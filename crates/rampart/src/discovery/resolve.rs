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
/// no address: that is an answer (an empty upstream), not a failure.
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

/// An empty answer for "no such name" and "no such record", else the failure.
fn nothing(e: ResolveError) -> Result<Answer, String> {
    if e.is_nx_domain() || e.is_no_records_found() {
        let ttl = e.proto().and_then(|p| match p.kind() {
            hickory_resolver::proto::ProtoErrorKind::NoRecordsFound { negative_ttl, .. } => {
                negative_ttl.map(|s| Duration::from_secs(u64::from(s)))
            }
            _ => None,
        });
        return Ok(Answer { found: Vec::new(), ttl });
    }
    Err(e.to_string())
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
