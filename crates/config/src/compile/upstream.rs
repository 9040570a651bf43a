//! Compiling upstreams: targets, balancing, health checks, HTTP settings.

use std::time::Duration;

use rampart_model::balance::{BalancePolicy, HashKey};
use rampart_model::discovery::{Lookup, Query};
use rampart_model::{HealthCheck, HttpCheck, HttpUpstream, PassiveHealth, Target, Upstream, UpstreamProtocol};
use rampart_proto::proxy_protocol::ProxyVersion;

use super::wire::is_token;
use super::{build_maglev, resolve, Checker, LiveState};
use crate::raw::{RawTarget, RawUpstream};
use rampart_model::defaults;
use toml::Spanned;

impl Checker<'_> {
    pub(super) fn upstream(&mut self, name: &str, up: &RawUpstream, live: &mut LiveState) -> Option<Upstream> {
        let policy = match &up.balance {
            None => BalancePolicy::RoundRobin,
            Some(b) => BalancePolicy::from_name(b.get_ref()).unwrap_or_else(|| {
                self.error(
                    b.span(),
                    format!(
                        "unknown balance policy `{}` {}",
                        b.get_ref(),
                        super::suggest::hint(b.get_ref(), BalancePolicy::NAMES.iter().copied())
                    ),
                );
                BalancePolicy::RoundRobin
            }),
        };
        if up.targets.get_ref().is_empty() {
            self.error(up.targets.span(), format!("upstream `{name}` has no targets"));
        } else if up
            .targets
            .get_ref()
            .iter()
            .all(|t| matches!(t.get_ref(), RawTarget::Detailed(d) if d.backup))
        {
            self.error(
                up.targets.span(),
                format!("every target of upstream `{name}` is a backup: backups stand in for primary targets, so at least one must not be"),
            );
        }
        let (mut targets, lookups) = self.targets(name, up, live);
        let connect_timeout = self.duration(&up.connect_timeout, defaults::CONNECT_TIMEOUT);
        let connect_attempts = up
            .connect_attempts
            .as_ref()
            .map_or(Some(defaults::CONNECT_ATTEMPTS), |a| {
                self.count(a, "connect_attempts", 1, 8)
            });
        let send_proxy_protocol = match &up.send_proxy_protocol {
            None => None,
            Some(v) => match v.get_ref().as_str() {
                "v1" => Some(ProxyVersion::V1),
                "v2" => Some(ProxyVersion::V2),
                other => {
                    self.error(
                        v.span(),
                        format!("unknown PROXY protocol version `{other}` (expected \"v1\" or \"v2\")"),
                    );
                    None
                }
            },
        };
        let passive_health = PassiveHealth {
            base_backoff: self.duration(&up.passive_backoff, defaults::PASSIVE_BACKOFF),
            max_backoff: self.duration(&up.passive_backoff_max, defaults::PASSIVE_BACKOFF_MAX),
        };
        let health_check = up.health_check.as_ref().map(|h| HealthCheck {
            interval: self.duration(&h.interval, defaults::CHECK_INTERVAL),
            timeout: self.duration(&h.timeout, defaults::CHECK_TIMEOUT),
            rise: h
                .rise
                .as_ref()
                .and_then(|r| self.count(r, "rise", 1, 100))
                .unwrap_or(defaults::CHECK_RISE as usize) as u32,
            fall: h
                .fall
                .as_ref()
                .and_then(|f| self.count(f, "fall", 1, 100))
                .unwrap_or(defaults::CHECK_FALL as usize) as u32,
            http: h.http_path.as_ref().and_then(|path| {
                if !path.get_ref().starts_with('/') {
                    self.error(path.span(), format!("http_path `{}` must start with /", path.get_ref()));
                    return None;
                }
                let expect_status = match &h.expect_status {
                    None => (200, 399),
                    Some(s) => match parse_status_range(s.get_ref()) {
                        Some(r) => r,
                        None => {
                            self.error(
                                s.span(),
                                format!(
                                    "`{}` is not a status range (expected \"200-399\" or \"204\")",
                                    s.get_ref()
                                ),
                            );
                            return None;
                        }
                    },
                };
                Some(HttpCheck {
                    path: path.get_ref().clone(),
                    host: h.http_host.clone().unwrap_or_else(|| name.to_string()),
                    expect_status,
                })
            }),
            dns: h
                .dns_query
                .as_ref()
                .and_then(|q| self.dns_query_name(q, h.http_path.is_some())),
        });
        let d = HttpUpstream::default();
        let protocol = self.upstream_protocol(name, up);
        let http = HttpUpstream {
            response_header_timeout: self.duration(&up.response_header_timeout, d.response_header_timeout),
            read_timeout: self.duration(&up.read_timeout, d.read_timeout),
            write_timeout: self.duration(&up.write_timeout, d.write_timeout),
            pool_max_idle: up
                .pool_max_idle
                .as_ref()
                .map_or(Some(d.pool_max_idle), |p| self.count(p, "pool_max_idle", 0, 100_000))
                .unwrap_or(d.pool_max_idle),
            pool_idle_timeout: self.duration(&up.pool_idle_timeout, d.pool_idle_timeout),
            retries: up
                .retries
                .as_ref()
                .map_or(Some(d.retries), |r| self.count(r, "retries", 0, 8))
                .unwrap_or(d.retries),
            retry_on: up.retry_on.as_ref().map_or(d.retry_on, |r| self.retry_on(r)),
            retry_body_max: self.size(&up.retry_max_body_size, d.retry_body_max, 0, 1 << 30),
            retry_budget: up
                .retry_budget
                .as_ref()
                .map_or(d.retry_budget, |b| self.retry_budget(b.get_ref())),
            retry_pass_over: self.duration_or_zero(&up.retry_pass_over, d.retry_pass_over),
            request_timeout: up
                .request_timeout
                .is_some()
                .then(|| self.duration(&up.request_timeout, Duration::ZERO)),
            protocol: UpstreamProtocol::Http1,
        };
        let http = HttpUpstream { protocol, ..http };
        let hash_key = self.hash_key(up, policy);
        let tls = match &up.tls {
            Some(raw) => {
                let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
                let (tls, tls_names) = self.upstream_tls(name, raw, &names, protocol)?;
                for (target, tls_name) in targets.iter_mut().zip(tls_names) {
                    target.tls_name = Some(tls_name);
                }
                Some(tls)
            }
            None => None,
        };
        let maglev = build_maglev(policy, &targets);
        Some(Upstream {
            name: name.to_string(),
            policy,
            targets,
            lookups,
            maglev,
            hash_key,
            connect_timeout,
            connect_attempts: connect_attempts?,
            send_proxy_protocol,
            passive_health,
            outlier: up
                .outlier_detection
                .as_ref()
                .map(|o| self.outlier_detection(o.get_ref())),
            sticky: up.sticky_cookie.as_ref().map(|c| self.sticky_cookie(c.get_ref())),
            limits: self.request_limits(up),
            slow_start: up
                .slow_start
                .is_some()
                .then(|| self.duration(&up.slow_start, Duration::ZERO)),
            health_check,
            http,
            tls,
            metrics: live.upstream_metrics(name),
        })
    }

    /// The targets written as addresses (resolved now, once) and the DNS questions of those
    /// written by name (asked by the control plane, which publishes what they answer).
    fn targets(&mut self, name: &str, up: &RawUpstream, live: &mut LiveState) -> (Vec<Target>, Vec<Lookup>) {
        let mut targets: Vec<Target> = Vec::new();
        let mut lookups: Vec<Lookup> = Vec::new();
        for t in up.targets.get_ref() {
            let Some((spec, weight, backup)) = self.target_spec(t) else {
                continue;
            };
            if !(1..=1000).contains(&weight) {
                self.error(t.span(), format!("weight {weight} is out of range (1 to 1000)"));
                continue;
            }
            match spec {
                TargetSpec::Lookup(query) => {
                    if lookups.iter().any(|l| l.query == query) {
                        self.error(
                            t.span(),
                            format!("target `{query}` is listed twice in upstream `{name}`"),
                        );
                        continue;
                    }
                    lookups.push(Lookup {
                        query,
                        weight: weight as u32,
                        backup,
                    });
                }
                TargetSpec::Address(address) => match resolve(&address) {
                    Ok(addr) => {
                        if targets.iter().any(|x| x.addr == addr) {
                            self.error(
                                t.span(),
                                format!("target `{address}` is listed twice in upstream `{name}`"),
                            );
                            continue;
                        }
                        targets.push(Target {
                            metrics: live.target_metrics(name, &address),
                            name: address,
                            addr,
                            weight: weight as u32,
                            backup,
                            health: live.target_health(name, addr),
                            tls_name: None,
                            lookup: None,
                        })
                    }
                    Err(e) => self.error(t.span(), e),
                },
            }
        }
        (targets, lookups)
    }

    /// What one target names, with its weight and whether it is a backup.
    fn target_spec(&mut self, t: &Spanned<RawTarget>) -> Option<(TargetSpec, i64, bool)> {
        let spec = |text: &str| match Query::parse(text) {
            None => Ok(TargetSpec::Address(text.to_string())),
            Some(q) => q.map(TargetSpec::Lookup),
        };
        let (spec, weight, backup) = match t.get_ref() {
            RawTarget::Address(a) => (spec(a), 1, false),
            RawTarget::Detailed(d) => {
                let spec = match (&d.address, &d.dns, &d.port, &d.srv) {
                    (Some(a), None, None, None) => spec(a),
                    (None, Some(dns), Some(port), None) => match u16::try_from(*port) {
                        Ok(port) if port > 0 => Query::host(dns, port).map(TargetSpec::Lookup),
                        _ => Err(format!("port {port} is out of range (1 to 65535)")),
                    },
                    (None, Some(dns), None, None) => Err(format!("`dns = \"{dns}\"` needs a `port`")),
                    (None, None, None, Some(_)) if d.weight.is_some() => Err(
                        "`weight` does not apply to an `srv` target: its records carry their own weights".to_string(),
                    ),
                    (None, None, None, Some(srv)) => Query::srv(srv).map(TargetSpec::Lookup),
                    (None, None, None, None) => {
                        Err("a target needs `address`, `dns` (with `port`) or `srv`".to_string())
                    }
                    _ => Err("a target has one of `address`, `dns` (with `port`) or `srv`".to_string()),
                };
                (spec, d.weight.unwrap_or(1), d.backup)
            }
        };
        match spec {
            Ok(spec) => Some((spec, weight, backup)),
            Err(e) => {
                self.error(t.span(), e);
                None
            }
        }
    }

    /// `protocol`: `"http1"` (the default), `"h2c"`, `"h2"` (needs `tls`) or `"auto"`.
    fn upstream_protocol(&mut self, name: &str, up: &RawUpstream) -> UpstreamProtocol {
        let Some(p) = &up.protocol else {
            return UpstreamProtocol::Http1;
        };
        let protocol = match p.get_ref().as_str() {
            "http1" => UpstreamProtocol::Http1,
            "h2c" => UpstreamProtocol::H2c,
            "h2" => UpstreamProtocol::H2,
            "auto" => UpstreamProtocol::Auto,
            other => {
                self.error(
                    p.span(),
                    format!("unknown protocol `{other}` (expected \"http1\", \"h2c\", \"h2\" or \"auto\")"),
                );
                return UpstreamProtocol::Http1;
            }
        };
        match (protocol, up.tls.is_some()) {
            (UpstreamProtocol::H2, false) => self.error(
                p.span(),
                format!("upstream `{name}`: protocol \"h2\" is HTTP/2 over TLS and needs [upstreams.{name}.tls] (\"h2c\" is HTTP/2 in clear)"),
            ),
            (UpstreamProtocol::H2c, true) => self.error(
                p.span(),
                format!("upstream `{name}`: protocol \"h2c\" is HTTP/2 in clear; with TLS use \"h2\" or \"auto\""),
            ),
            _ => {}
        }
        protocol
    }

    /// `hash_key`: `"client_address"` (the default), `"header:NAME"` or `"cookie:NAME"`.
    fn hash_key(&mut self, up: &RawUpstream, policy: BalancePolicy) -> HashKey {
        let Some(key) = &up.hash_key else {
            return HashKey::ClientAddress;
        };
        if policy != BalancePolicy::ConsistentHash {
            self.error(key.span(), "hash_key needs balance = \"consistent_hash\"");
            return HashKey::ClientAddress;
        }
        let text = key.get_ref().trim();
        let parsed = match text.split_once(':') {
            None if text == "client_address" => Some(HashKey::ClientAddress),
            Some(("header", name)) if is_token(name) => Some(HashKey::Header(name.to_ascii_lowercase().into())),
            Some(("cookie", name)) if is_token(name) => Some(HashKey::Cookie(name.into())),
            _ => None,
        };
        parsed.unwrap_or_else(|| {
            self.error(
                key.span(),
                format!("`{text}` is not a hash key (expected \"client_address\", \"header:NAME\" or \"cookie:NAME\")"),
            );
            HashKey::ClientAddress
        })
    }
}

/// `"200-399"` or `"204"`.
fn parse_status_range(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let (lo, hi) = (lo.trim().parse::<u16>().ok()?, hi.trim().parse::<u16>().ok()?);
    ((100..=599).contains(&lo) && (lo..=599).contains(&hi)).then_some((lo, hi))
}

/// A target as written: an address, or a DNS question.
enum TargetSpec {
    Address(String),
    Lookup(Query),
}
