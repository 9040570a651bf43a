//! Validation and compilation of a config into a data-plane snapshot.

use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use rampart_model::balance::{BalancePolicy, Maglev};
use rampart_model::defaults;
use rampart_model::net::IpNet;
use rampart_model::{Listener, ListenerProtocol, Snapshot, Target, INTERNAL_UPSTREAM_PREFIX};
use toml::Spanned;

use crate::error::{toml_error, ConfigError, ConfigErrors, SourceMap};
use crate::raw::{RawConfig, RawGlobal, RawListener};
use crate::units::{parse_duration, parse_size};

/// A compiled config: the snapshot plus process settings that only apply at start.
#[derive(Debug)]
pub struct Compiled {
    pub snapshot: Snapshot,
    /// `[global] workers` as written (`None`: left out).
    pub workers: Option<usize>,
    pub pin: bool,
    /// Problems that do not stop the load (a certificate close to expiry, `verify = false`).
    pub warnings: Vec<ConfigError>,
    /// `[admin]`, if the file has one.
    pub admin: Option<AdminSettings>,
    /// `[global] log_level` and `log_format`.
    pub log: LogSettings,
    /// The files the config names and reads besides its own text (certificates, keys, CAs,
    /// credential and key files), in the order read.
    pub files: Vec<std::path::PathBuf>,
}

/// Parses, validates and compiles the TOML text `src` read from `file`: one text as it is
/// (no `include`, no `${VAR}`; [`crate::load::compile_config`] reads a config file with both).
pub fn compile_toml(file: &str, src: &str, live: &mut LiveState) -> Result<Compiled, ConfigErrors> {
    let map = SourceMap::new(file, src);
    let raw: RawConfig = toml::from_str(src).map_err(|e| ConfigErrors(vec![toml_error(&map, &e)]))?;
    if let Some(first) = raw.include.first() {
        return Err(ConfigErrors(vec![
            map.error(first.span(), "`include` is read from config files only")
        ]));
    }
    compile_raw(&map, raw, live)
}

/// Validates and compiles a parsed config whose spans `map` knows.
pub(crate) fn compile_raw(map: &SourceMap, raw: RawConfig, live: &mut LiveState) -> Result<Compiled, ConfigErrors> {
    let mut cx = Checker {
        map,
        errors: Vec::new(),
        warnings: Vec::new(),
        files: Vec::new(),
        filter_scope: String::new(),
        filter_definition: None,
        acme_configured: false,
        otlp_configured: false,
        acme_dns01: None,
        internal: Default::default(),
        caches: Default::default(),
    };
    live.begin_filter_slots();
    let compiled = cx.config(raw, live);
    let order = |e: &ConfigError| (map.file_index(&e.file), e.line, e.col);
    if !cx.errors.is_empty() {
        cx.errors.sort_by_key(order);
        return Err(ConfigErrors(cx.errors));
    }
    let mut compiled = compiled.expect("a config without errors compiles");
    cx.warnings.sort_by_key(order);
    compiled.warnings = cx.warnings;
    compiled.files = cx.files;
    live.keep_only(&compiled.snapshot);
    Ok(compiled)
}

fn build_maglev(policy: BalancePolicy, targets: &[Target]) -> Option<Maglev> {
    if policy != BalancePolicy::ConsistentHash {
        return None;
    }
    let keys: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let weights: Vec<u32> = targets.iter().map(|t| t.weight).collect();
    Maglev::build(&keys, &weights)
}

/// Collects every error of one file rather than stopping at the first.
struct Checker<'a> {
    map: &'a SourceMap,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    /// The files read so far (see [`Compiled::files`]).
    files: Vec<std::path::PathBuf>,
    /// Where the filter being compiled sits (`LISTENER#N` or `LISTENER/ROUTE#N`): the identity
    /// under which a reload keeps a filter's state (a local rate limit's buckets).
    filter_scope: String,
    /// The definition of the filter being compiled, while it is: the files it reads are added.
    filter_definition: Option<filter_slots::DefinitionDigest>,
    /// Whether the config has an `[acme]` table (listeners' `acme` names need one).
    acme_configured: bool,
    /// `[tracing]` names an OTLP collector (logs may go to `otlp`).
    otlp_configured: bool,
    /// With an `[acme.dns01]` table (wildcards need one): which names it must cover.
    acme_dns01: Option<acme::Dns01Scope>,
    /// The upstreams made for Rampart's own requests (`forward_auth` services), placed after
    /// the configured ones.
    internal: internal::InternalUpstreams,
    /// `[caches]`, compiled: the routes' `cache` name them.
    caches: cache::Caches,
}

impl Checker<'_> {
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.errors.push(self.map.error(span, message));
    }

    fn warn(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.warnings.push(self.map.error(span, message));
    }

    /// A file named at `file`: relative to the directory of the config file it is written in.
    /// It is recorded as one the config reads.
    fn path(&mut self, file: &Spanned<String>) -> std::path::PathBuf {
        self.path_at(file.get_ref(), file.span())
    }

    /// A path named at `file`, relative to the directory of the config file it is written in
    /// (a file the config writes or serves from: not recorded as one it reads).
    fn relative_path(&self, file: &Spanned<String>) -> std::path::PathBuf {
        self.map.dir_at(file.span().start).join(file.get_ref())
    }

    /// [`Checker::path`] for a name written at `span`.
    fn path_at(&mut self, file: &str, span: Range<usize>) -> std::path::PathBuf {
        let path = self.map.dir_at(span.start).join(file);
        if !self.files.contains(&path) {
            self.files.push(path.clone());
        }
        path
    }

    /// Adds the content of a file read for the filter being compiled (if one is) to its
    /// definition: a file changed in place makes it a new filter (see [`filter_slots`]).
    fn note_filter_file(&mut self, bytes: &[u8]) {
        if let Some(definition) = &mut self.filter_definition {
            definition.add_file(bytes);
        }
    }

    fn config(&mut self, raw: RawConfig, live: &mut LiveState) -> Option<Compiled> {
        let default_global = RawGlobal::default();
        let global = raw.global.as_ref().map_or(&default_global, |g| g.get_ref());
        let workers = global.workers.as_ref().and_then(|w| self.count(w, "workers", 1, 1024));
        live.fix_workers(workers);
        let drain_timeout = self.duration(&global.drain_timeout, defaults::DRAIN_TIMEOUT);
        let upgrade_timeout = self.duration(&global.upgrade_timeout, defaults::UPGRADE_TIMEOUT);
        let log = self.log_settings(global);
        self.otlp_configured = raw.tracing.as_ref().is_some_and(|t| t.get_ref().endpoint.is_some());
        let session_log = global
            .session_log
            .as_ref()
            .map(|path| Arc::from(self.log_file("session log", path)));
        let dns = self.dns_settings(global);
        self.acme_configured = raw.acme.is_some();
        let mut acme = raw.acme.as_ref().map(|a| self.acme(a));

        self.caches(&raw.caches, live);
        let upstream_names: Vec<&str> = raw.upstreams.keys().map(|k| k.get_ref().as_str()).collect();
        // Upstreams that hash on a request header or cookie, which TCP listeners do not have.
        let request_keyed: Vec<bool> = raw
            .upstreams
            .values()
            .map(|u| {
                u.hash_key
                    .as_ref()
                    .is_some_and(|k| k.get_ref().trim() != "client_address")
            })
            .collect();
        let mut upstreams = Vec::new();
        self.internal.configured = raw.upstreams.len();
        for (name, up) in &raw.upstreams {
            if name.get_ref().starts_with(INTERNAL_UPSTREAM_PREFIX) {
                self.error(
                    name.span(),
                    format!("upstream names beginning `{INTERNAL_UPSTREAM_PREFIX}` are Rampart's own"),
                );
                continue;
            }
            if let Some(u) = self.upstream(name.get_ref(), up, live) {
                upstreams.push(u);
            }
        }
        if raw.listeners.is_empty() {
            self.error(
                0..0,
                "no listeners defined: add a [listeners.NAME] table with bind and upstream",
            );
        }
        let (listener_kinds, handed_to) = tcp::listener_kinds(&raw);
        let names = tcp::Names {
            upstreams: &upstream_names,
            request_keyed: &request_keyed,
            listeners: &listener_kinds,
        };
        let mut listeners: Vec<Listener> = Vec::new();
        for (name, l) in &raw.listeners {
            self.tcp_listener_keys(name.get_ref(), l);
            if let Some(listener) = self.listener(name, l, &names, &handed_to, live) {
                listeners.push(listener);
            }
        }
        let tracing = raw.tracing.as_ref().map(|t| Arc::new(self.tracing(t.get_ref(), live)));
        // After the configured upstreams, where the filters that use them were told.
        upstreams.extend(std::mem::take(&mut self.internal.made).into_iter().map(|(_, u)| u));
        if let Some(settings) = acme.as_mut() {
            if raw.acme.as_ref().is_some_and(|a| a.get_ref().challenge.is_none()) {
                settings.challenge = acme::challenge_that_can_work(&listeners);
            }
            acme::answer_http01(&mut listeners, live);
        }
        let admin = raw.admin.as_ref().and_then(|a| self.admin(a));
        self.overlapping_binds(&raw.listeners);
        self.tcp_upstream_keys(&raw);
        self.udp_upstream_keys(&raw);
        if !self.errors.is_empty() {
            return None;
        }
        Some(Compiled {
            snapshot: Snapshot {
                generation: live.next_generation(),
                listeners: Arc::new(listeners),
                upstreams,
                dns,
                acme,
                session_log,
                drain_timeout,
                upgrade_timeout,
                tracing,
            },
            workers,
            pin: global.pin.unwrap_or(false),
            warnings: Vec::new(),
            admin,
            log,
            files: Vec::new(),
        })
    }

    fn listener(
        &mut self,
        name: &Spanned<String>,
        l: &RawListener,
        names: &tcp::Names<'_>,
        handed_to: &[&str],
        live: &mut LiveState,
    ) -> Option<Listener> {
        let bind = match &l.bind {
            Some(bind) => Some(self.bind_address(bind)),
            None => {
                self.unbound_listener(name, l, handed_to);
                None
            }
        };
        let udp = udp::is_udp(l);
        if let (false, Some(n)) = (udp, &l.session_responses) {
            self.error(
                n.span(),
                format!(
                    "`session_responses` is for UDP listeners; listener `{}` is not one",
                    name.get_ref()
                ),
            );
        }
        let protocol = match checks::is_http(l) {
            _ if udp => self.udp_listener(name.get_ref(), l, names.upstreams),
            Some(true) => {
                let known = if names.upstreams.is_empty() {
                    "none defined".to_string()
                } else {
                    names.upstreams.join(", ")
                };
                let index = |u: &str| names.upstreams.iter().position(|x| *x == u);
                self.http_listener(name.get_ref(), l, &index, &known, live)
                    .map(|h| ListenerProtocol::Http(std::sync::Arc::new(h)))
            }
            Some(false) => self.tcp_listener(name, l, names, live),
            None => {
                if let Some(p) = &l.protocol {
                    self.error(
                        p.span(),
                        format!(
                            "unsupported protocol `{}` (expected \"tcp\", \"http\" or \"udp\")",
                            p.get_ref()
                        ),
                    );
                }
                None
            }
        };
        let http = checks::is_http(l) == Some(true);
        let max_connections = l.max_connections.as_ref().map_or(Some(defaults::MAX_CONNECTIONS), |m| {
            self.count(m, "max_connections", 1, 10_000_000)
        });
        let idle_default = if udp {
            defaults::UDP_IDLE_TIMEOUT
        } else {
            defaults::IDLE_TIMEOUT
        };
        let idle_timeout = self.duration(&l.idle_timeout, idle_default);
        let buffer_size = self.size(&l.buffer_size, defaults::BUFFER_SIZE, 1024, 16 << 20);
        let proxy_header_timeout = self.duration(&l.proxy_header_timeout, defaults::PROXY_HEADER_TIMEOUT);
        let mut proxy_protocol_from = Vec::new();
        for net in &l.proxy_protocol_from {
            match net.get_ref().parse::<IpNet>() {
                Ok(n) => proxy_protocol_from.push(n),
                Err(e) => self.error(net.span(), e.to_string()),
            }
        }
        // HTTP/2 by ALPN on HTTP listeners that have not turned it off.
        let h2 = http && l.http2.as_ref().is_none_or(|on| on.get_ref().on());
        let tls = l
            .tls
            .as_ref()
            .map(|t| self.listener_tls(name.get_ref(), bind.flatten(), t, http, h2, live));
        let tls = match tls {
            Some(None) => return None,
            Some(t) => t,
            None => None,
        };
        let bind = match bind {
            Some(bind) => Some(bind?),
            None => None,
        };
        let mut protocol = protocol;
        if let Some(ListenerProtocol::Http(settings)) = &mut protocol {
            if let Some(settings) = std::sync::Arc::get_mut(settings) {
                (settings.http3, settings.alt_svc) = self.http3(l, tls.is_some(), bind);
                if let Some(alt_svc) = &settings.alt_svc {
                    // Every response of every route advertises it, as Caddy's do (an upstream's
                    // own `Alt-Svc` is replaced: the listener says which protocols its port has).
                    for route in &mut settings.routes {
                        let edits = &mut route.filters.response_edits;
                        edits.on_success.set("alt-svc", alt_svc);
                        edits.on_any_status.set("alt-svc", alt_svc);
                    }
                }
            }
        }
        Some(Listener {
            name: name.get_ref().clone(),
            bind,
            protocol: protocol?,
            max_connections: max_connections?,
            open_connections: match bind {
                Some(bind) => live.open_connections(
                    if udp {
                        rampart_model::Transport::Udp
                    } else {
                        rampart_model::Transport::Tcp
                    },
                    bind,
                ),
                None => Default::default(),
            },
            metrics: live.listener_metrics(name.get_ref()),
            idle_timeout,
            buffer_size,
            proxy_protocol_from,
            proxy_header_timeout,
            tls,
            traced: l.tracing.as_ref().is_none_or(|t| *t.get_ref()),
        })
    }

    fn bind_address(&mut self, bind: &Spanned<String>) -> Option<SocketAddr> {
        match parse_bind(bind.get_ref()) {
            Ok(a) => Some(a),
            Err(e) => {
                self.error(bind.span(), e);
                None
            }
        }
    }

    fn duration(&mut self, value: &Option<Spanned<String>>, default: Duration) -> Duration {
        let Some(v) = value else { return default };
        match parse_duration(v.get_ref()) {
            Ok(d) if d.is_zero() => {
                self.error(v.span(), "duration must be greater than zero");
                default
            }
            Ok(d) => d,
            Err(e) => {
                self.error(v.span(), e);
                default
            }
        }
    }

    /// A duration that may be zero (`"0s"`: the thing it times is off).
    fn duration_or_zero(&mut self, value: &Option<Spanned<String>>, default: Duration) -> Duration {
        let Some(v) = value else { return default };
        parse_duration(v.get_ref()).unwrap_or_else(|e| {
            self.error(v.span(), e);
            default
        })
    }

    fn size(&mut self, value: &Option<Spanned<String>>, default: usize, min: u64, max: u64) -> usize {
        let Some(v) = value else { return default };
        match parse_size(v.get_ref()) {
            Ok(s) if (min..=max).contains(&s) => s as usize,
            Ok(s) => {
                self.error(v.span(), format!("size {s} is out of range ({min} to {max} bytes)"));
                default
            }
            Err(e) => {
                self.error(v.span(), e);
                default
            }
        }
    }

    fn count(&mut self, value: &Spanned<i64>, what: &str, min: i64, max: i64) -> Option<usize> {
        let n = *value.get_ref();
        if (min..=max).contains(&n) {
            Some(n as usize)
        } else {
            self.error(value.span(), format!("{what} = {n} is out of range ({min} to {max})"));
            None
        }
    }
}

/// Parses a listen address: `ADDR:PORT`, `[V6]:PORT`, `*:PORT`, `:PORT` or `PORT` (all addresses).
pub fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    let bad = || {
        format!(
            "`{s}` is not a listen address (expected ADDR:PORT such as 0.0.0.0:7777, localhost:7777 or [::]:7777, or a port)"
        )
    };
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let any = s.strip_prefix("*:").or_else(|| s.strip_prefix(':'));
    if let Some(port) = any {
        return port
            .parse::<u16>()
            .map(|p| SocketAddr::from(([0, 0, 0, 0], p)))
            .map_err(|_| bad());
    }
    // `localhost` is the IPv4 loopback address, whatever the resolver says (no other name is
    // looked up for a listen address: a listener binds where its config says, not where DNS
    // pointed at start).
    if let Some((host, port)) = s.rsplit_once(':') {
        if host.eq_ignore_ascii_case("localhost") {
            return port
                .parse::<u16>()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
                .map_err(|_| bad());
        }
    }
    s.parse::<SocketAddr>().map_err(|_| bad())
}

/// Resolves `host:port` to one address (the first the resolver returns).
pub fn resolve(address: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = address.parse::<SocketAddr>() {
        return Ok(a);
    }
    // nginx's `server http://...` habit: the upstream's `protocol` says how to speak to it.
    if let Some((scheme, rest)) = address.split_once("://").filter(|(scheme, _)| !scheme.is_empty()) {
        let host = rest.split('/').next().unwrap_or(rest);
        let port = match (host.contains(':'), scheme.eq_ignore_ascii_case("https")) {
            (true, _) => "",
            (false, true) => ":443",
            (false, false) => ":80",
        };
        return Err(format!(
            "`{address}`: a target has no scheme; write `{host}{port}` (an upstream's `protocol` and `tls` say how to speak to it)"
        ));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("`{address}` is not host:port"));
    };
    let Ok(port) = port.parse::<u16>() else {
        return Err(format!("`{address}` has no valid port"));
    };
    if host.is_empty() {
        return Err(format!("`{address}` has no host"));
    }
    match (host, port).to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| format!("`{host}` resolves to no address")),
        Err(e) => Err(format!("cannot resolve `{host}`: {e}")),
    }
}

mod acme;
mod admin;
mod cache;
mod checks;
mod command_line;
pub mod discovered;
mod dns;
mod error_pages;
mod filter_slots;
mod filters;
mod http;
mod http3;
mod internal;
mod live;
mod log;
pub(crate) mod suggest;
mod tcp;
mod tls;
mod tracing;
mod udp;
pub use tls::files::Leaf;
mod retry;
mod split;
mod upstream;
mod wire;

pub use admin::{AdminAddress, AdminSettings};
pub(crate) use command_line::toml_string;
pub use command_line::{simple_l4, SimpleAcme, SimpleL4, SimpleTracing};
pub use live::LiveState;
pub use log::{LogFormat, LogLevel, LogSettings};

#[cfg(test)]
mod settings_tests;
#[cfg(test)]
mod tests;
