//! The compiled configuration: what workers run on.
//!
//! A [`Snapshot`] is immutable once built. Workers take the current one when they accept a
//! connection and keep it until that connection closes, so a reload never changes the rules under
//! an open connection. Names are resolved to indices at compile time.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use rampart_proto::proxy_protocol::ProxyVersion;

use crate::balance::{client_hash, BalancePolicy, HashKey, Maglev};
use crate::defaults;
pub use crate::health::{PassiveHealth, TargetHealth};
use crate::metrics::{ListenerCells, PerWorker, RouteCells, TargetCells, UpstreamCells};
use crate::net::IpNet;
use crate::tcp_route::TcpRouting;
use crate::tls::{ListenerTls, TargetTlsName, UpstreamTls};

/// Everything the data plane needs, compiled from one config file (or command line).
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every successful load; workers rebuild per-snapshot state when it changes.
    pub generation: u64,
    /// Shared with the snapshots that DNS answers derive from this one (they change targets only).
    pub listeners: Arc<Vec<Listener>>,
    pub upstreams: Vec<Upstream>,
    /// How the names of targets written by name are resolved.
    pub dns: crate::discovery::DnsSettings,
    /// `[acme]`: where listeners' `acme` names get their certificates.
    pub acme: Option<crate::acme::AcmeSettings>,
    /// Where session records go, if anywhere.
    pub session_log: Option<Arc<std::path::Path>>,
    /// How long open connections may run on after SIGTERM/SIGINT.
    pub drain_timeout: Duration,
    /// How long a binary upgrade waits for the new process to be ready before it kills it.
    pub upgrade_timeout: Duration,
    /// `[tracing]`: W3C Trace Context on proxied requests, if on.
    pub tracing: Option<Arc<crate::trace::TraceSettings>>,
}

/// One listener. Every worker binds its own socket for it (SO_REUSEPORT), unless it has no `bind`
/// and takes only connections that a TCP listener's route hands over.
#[derive(Debug)]
pub struct Listener {
    pub name: String,
    /// The address it listens on; `None` for a listener reached only by hand-over.
    pub bind: Option<SocketAddr>,
    /// What the listener speaks, and where its connections go.
    pub protocol: ListenerProtocol,
    /// Open connections allowed at once across all workers; past it, new ones are closed at once.
    pub max_connections: usize,
    /// Open connections now, shared by the workers. Kept across reloads for the same bind address.
    pub open_connections: Arc<AtomicUsize>,
    /// A connection with no byte in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Size of each relay buffer (one per direction while a connection copies through user space).
    pub buffer_size: usize,
    /// Clients from these networks must begin with a PROXY protocol header (v1 or v2).
    pub proxy_protocol_from: Vec<IpNet>,
    /// How long a trusted client has to send its PROXY header.
    pub proxy_header_timeout: Duration,
    /// TLS terminated here (after any PROXY header), if configured.
    pub tls: Option<Arc<ListenerTls>>,
    /// Traffic counters, kept across reloads for the same listener name.
    pub metrics: Arc<PerWorker<ListenerCells>>,
    /// Whether its requests (or TCP sessions) are traced, with `[tracing]` on (`tracing = false`
    /// on the listener turns it off).
    pub traced: bool,
}

/// How a connection knows its listener across reloads: by the address it was accepted on, or by
/// name for a listener without one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenerKey {
    /// By its transport and address: a UDP listener (QUIC, later) and a TCP one may share one.
    Bound(Transport, SocketAddr),
    Unbound(Arc<str>),
}

/// What a listener's socket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Tcp,
    /// Datagrams: QUIC for an HTTP listener's HTTP/3 (whose connections still know their
    /// listener by its TCP key), UDP load balancing.
    Udp,
}

impl Snapshot {
    /// The index of the listener `key` names, if this snapshot has it.
    pub fn listener_index(&self, key: &ListenerKey) -> Option<usize> {
        self.listeners.iter().position(|l| l.is(key))
    }

    /// Every HTTP filter of every route (a listener's filters once per route that inherits them).
    pub fn http_filters(&self) -> impl Iterator<Item = &crate::filter::Filter> {
        self.listeners
            .iter()
            .filter_map(|l| l.http())
            .flat_map(|h| &h.routes)
            .flat_map(|r| &r.filters.filters)
            .map(|f| &f.filter)
    }

    /// The slot of every HTTP filter of every route (a listener's filters once per route that
    /// inherits them).
    pub fn http_filter_slots(&self) -> impl Iterator<Item = crate::filter::FilterSlot> + '_ {
        self.listeners
            .iter()
            .filter_map(|l| l.http())
            .flat_map(|h| &h.routes)
            .flat_map(|r| &r.filters.filters)
            .map(|f| f.slot)
    }
}

impl Listener {
    /// The key connections of this listener are known by.
    pub fn key(&self) -> ListenerKey {
        match self.bind {
            Some(bind) => ListenerKey::Bound(self.transport(), bind),
            None => ListenerKey::Unbound(Arc::from(self.name.as_str())),
        }
    }

    /// What its socket carries: datagrams for a UDP listener, a stream for the others (an HTTP
    /// listener's HTTP/3 socket is one more, see [`Listener::sockets`]).
    pub fn transport(&self) -> Transport {
        match self.protocol {
            ListenerProtocol::Udp { .. } => Transport::Udp,
            _ => Transport::Tcp,
        }
    }

    /// The replies after which a UDP listener's session ends, if set.
    pub fn udp_responses(&self) -> Option<u32> {
        match self.protocol {
            ListenerProtocol::Udp { responses, .. } => responses,
            _ => None,
        }
    }

    /// The upstream of a UDP listener.
    pub fn udp_upstream(&self) -> Option<usize> {
        match self.protocol {
            ListenerProtocol::Udp { upstream, .. } => Some(upstream),
            _ => None,
        }
    }

    /// The sockets it listens on: its transport's at `bind`, and UDP beside TCP for HTTP/3.
    pub fn sockets(&self) -> impl Iterator<Item = (Transport, SocketAddr)> + '_ {
        let http3 = self.http().is_some_and(|h| h.http3.is_some());
        let main = self.bind.map(|bind| (self.transport(), bind));
        let quic = self.bind.filter(|_| http3).map(|bind| (Transport::Udp, bind));
        main.into_iter().chain(quic)
    }

    /// Whether `key` names this listener.
    pub fn is(&self, key: &ListenerKey) -> bool {
        match key {
            ListenerKey::Bound(transport, bind) => *transport == self.transport() && self.bind == Some(*bind),
            ListenerKey::Unbound(name) => self.bind.is_none() && *self.name == **name,
        }
    }

    /// The default upstream of a TCP listener (the one its routes fall back to).
    pub fn tcp_upstream(&self) -> Option<usize> {
        match self.protocol {
            ListenerProtocol::Tcp { upstream, .. } => upstream,
            ListenerProtocol::Http(_) | ListenerProtocol::Udp { .. } => None,
        }
    }

    /// The routes of a TCP listener, if it has any.
    pub fn tcp_routing(&self) -> Option<&TcpRouting> {
        match &self.protocol {
            ListenerProtocol::Tcp { routing, .. } => routing.as_deref(),
            ListenerProtocol::Http(_) | ListenerProtocol::Udp { .. } => None,
        }
    }

    /// The settings of an HTTP listener.
    pub fn http(&self) -> Option<&HttpListener> {
        self.http_shared().map(|h| &**h)
    }

    /// The settings of an HTTP listener to change, while nothing else holds them (as the compiler
    /// does before a snapshot is published).
    pub fn http_mut(&mut self) -> Option<&mut HttpListener> {
        match &mut self.protocol {
            ListenerProtocol::Http(http) => Arc::get_mut(http),
            ListenerProtocol::Tcp { .. } | ListenerProtocol::Udp { .. } => None,
        }
    }

    /// The settings of an HTTP listener, to hold.
    pub fn http_shared(&self) -> Option<&Arc<HttpListener>> {
        match &self.protocol {
            ListenerProtocol::Http(http) => Some(http),
            ListenerProtocol::Tcp { .. } | ListenerProtocol::Udp { .. } => None,
        }
    }

    /// Whether a client at `ip` must send a PROXY header first.
    pub fn expects_proxy_header(&self, ip: std::net::IpAddr) -> bool {
        self.proxy_protocol_from.iter().any(|net| net.contains(ip))
    }
}

/// A listener's protocol.
#[derive(Debug)]
pub enum ListenerProtocol {
    /// Relay bytes: to the first of `routing`'s routes that takes the connection, else to the
    /// upstream with index `upstream` in [`Snapshot::upstreams`] (else close).
    Tcp {
        upstream: Option<usize>,
        routing: Option<Box<TcpRouting>>,
    },
    /// Parse HTTP/1.x and route each request. Shared: an HTTP connection holds its listener's
    /// settings as they were in the snapshot its current request was routed with, with no index
    /// into that snapshot to go stale.
    Http(Arc<HttpListener>),
    /// Relay datagrams: those from one client address form a session bound to one target of the
    /// upstream with index `upstream`, whose replies go back from the listener's socket. The
    /// listener's `max_connections` bounds its sessions, `idle_timeout` ends them, and so does
    /// the `responses`-th reply when set (nginx's `proxy_responses`: 1 for DNS).
    Udp { upstream: usize, responses: Option<u32> },
}

/// How `X-Forwarded-For`, `-Proto` and `-Host` are written on proxied requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedHeaders {
    /// Keep what the client sent and append ours (`X-Forwarded-For: client-sent, 192.0.2.7`).
    Append,
    /// Drop what the client sent; write ours.
    Replace,
    /// Pass the client's through untouched; add nothing.
    Off,
}

/// Settings of an HTTP listener.
#[derive(Debug)]
pub struct HttpListener {
    pub routes: Vec<crate::route::Route>,
    pub forwarded: ForwardedHeaders,
    pub limits: rampart_proto::h1::Limits,
    /// Time a client has to send a whole request head once its first byte arrived.
    pub client_header_timeout: Duration,
    /// Time an idle keep-alive client connection is kept between requests.
    pub keepalive_timeout: Duration,
    /// Where and how this listener logs requests, if it does.
    pub access_log: Option<(Arc<std::path::Path>, AccessLogFormat)>,
    /// Counters of the requests that matched no route (and of those whose head could not be read).
    pub unrouted: Arc<PerWorker<RouteCells>>,
    /// HTTP/2 (prior knowledge in clear, `h2` by ALPN over TLS); `None` when turned off.
    pub http2: Option<Http2Settings>,
    /// HTTP/3 over QUIC on UDP at the same address (`http3 = true`, TLS listeners only); `None`
    /// when off.
    pub http3: Option<crate::http3::Http3Settings>,
    /// The `Alt-Svc` value added to the responses of every route (over HTTP/1.x, HTTP/2 and
    /// HTTP/3 alike, as Caddy does), if any: `h3=":PORT"; ma=86400` with HTTP/3 on, unless
    /// configured.
    pub alt_svc: Option<Box<str>>,
    /// Proxies whose `X-Forwarded-For` filters believe: from a connection out of these networks,
    /// the client address filters see is the right-most `X-Forwarded-For` entry outside them.
    pub trusted_proxies: Vec<IpNet>,
    /// Pages for its answers of Rampart's own that no route's pages cover (the 404 of a request
    /// no route takes among them).
    pub error_pages: Option<Arc<crate::error_pages::ErrorPages>>,
}

/// The limits of a listener's HTTP/2 connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Settings {
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest decoded header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE).
    pub max_header_list_size: u32,
    /// Flow-control window of each stream, and of the whole connection.
    pub stream_window: u32,
    pub connection_window: u32,
    /// Streams a client may reset in one second before the connection gets GOAWAY
    /// ENHANCE_YOUR_CALM (CVE-2023-44487, "rapid reset").
    pub max_resets_per_second: u32,
    /// `http2 = "only"`: in clear the port speaks HTTP/2 by prior knowledge and nothing else
    /// (bytes that are not the preface close the connection without an HTTP/1.1 answer).
    pub prior_knowledge_only: bool,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            max_concurrent_streams: defaults::HTTP2_MAX_CONCURRENT_STREAMS,
            max_header_list_size: defaults::HTTP2_MAX_HEADER_LIST_SIZE,
            stream_window: defaults::HTTP2_STREAM_WINDOW,
            connection_window: defaults::HTTP2_CONNECTION_WINDOW,
            max_resets_per_second: defaults::HTTP2_MAX_RESETS_PER_SECOND,
            prior_knowledge_only: false,
        }
    }
}

/// The protocol spoken to an upstream's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamProtocol {
    #[default]
    Http1,
    /// HTTP/2 in clear, with prior knowledge.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2,
    /// Over TLS, whatever ALPN gives (`h2` offered first); HTTP/1.1 in clear.
    Auto,
}

/// Whether a log file path means the process's standard output: `-`, as most tools take it, or
/// `/dev/stdout` (written through the process's own stdout, not opened as a file).
pub fn is_stdout_path(path: &std::path::Path) -> bool {
    path.as_os_str() == "-" || path.as_os_str() == "/dev/stdout"
}

/// Access log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    Json,
    /// The combined log format, extended with route, target and times (see docs/operations.md).
    Combined,
}

/// HTTP settings of an upstream (ignored by TCP listeners).
#[derive(Debug, Clone, Copy)]
pub struct HttpUpstream {
    /// Time from the end of the request to the end of the response head.
    pub response_header_timeout: Duration,
    /// Longest wait for the next bytes of a response body.
    pub read_timeout: Duration,
    /// Longest wait for the upstream to take more request bytes.
    pub write_timeout: Duration,
    /// Idle keep-alive connections kept per target by each worker.
    pub pool_max_idle: usize,
    /// An idle pooled connection older than this is closed instead of reused.
    pub pool_idle_timeout: Duration,
    /// Extra attempts on another target (or a fresh connection) for failures before any
    /// response byte: connect failures always, resets only for idempotent requests whose
    /// body was not streamed.
    pub retries: usize,
    /// What besides connect failures is tried again (`retry_on`).
    pub retry_on: crate::retry::RetryOn,
    /// Request bodies up to this many bytes are kept as they go to a target, so that a retry can
    /// send them again (`retry_max_body_size`; 0: none kept, a request with a body is not retried).
    pub retry_body_max: usize,
    /// How many retries the upstream's requests may add (`retry_budget`).
    pub retry_budget: crate::retry::RetryBudget,
    /// How long a worker's first picks pass over a target that just failed a request
    /// (`retry_pass_over`; zero: never).
    pub retry_pass_over: Duration,
    /// Longest time for a whole exchange, from choosing a target to the end of the response.
    pub request_timeout: Option<Duration>,
    pub protocol: UpstreamProtocol,
}

impl Default for HttpUpstream {
    /// The defaults documented in docs/config.md.
    fn default() -> Self {
        HttpUpstream {
            response_header_timeout: defaults::RESPONSE_HEADER_TIMEOUT,
            read_timeout: defaults::READ_TIMEOUT,
            write_timeout: defaults::WRITE_TIMEOUT,
            pool_max_idle: defaults::POOL_MAX_IDLE,
            pool_idle_timeout: defaults::POOL_IDLE_TIMEOUT,
            retries: defaults::RETRIES,
            retry_on: Default::default(),
            retry_body_max: defaults::RETRY_BODY_MAX,
            retry_budget: Default::default(),
            retry_pass_over: defaults::RETRY_PASS_OVER,
            request_timeout: None,
            protocol: UpstreamProtocol::Http1,
        }
    }
}

/// A group of interchangeable targets and how to choose among them.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub policy: BalancePolicy,
    /// The targets written as addresses, then those the DNS answers to [`Upstream::lookups`] gave.
    pub targets: Vec<Target>,
    /// The DNS questions some of its targets come from (none: every target is an address).
    pub lookups: Vec<crate::discovery::Lookup>,
    /// Built for [`BalancePolicy::ConsistentHash`] only.
    pub maglev: Option<Maglev>,
    /// What consistent hashing hashes.
    pub hash_key: HashKey,
    pub connect_timeout: Duration,
    /// Connect attempts per client connection, each to a different target.
    pub connect_attempts: usize,
    /// Send a PROXY protocol header of this version first on every upstream connection.
    pub send_proxy_protocol: Option<ProxyVersion>,
    pub passive_health: PassiveHealth,
    /// `outlier_detection`: targets ejected for bad outcomes on real traffic (off when `None`).
    pub outlier: Option<crate::outlier::OutlierDetection>,
    /// `sticky_cookie`: a client's requests kept on the target that answered its first.
    pub sticky: Option<crate::sticky::StickyCookie>,
    /// `max_requests_per_target` and its `queue`.
    pub limits: Option<crate::retry::RequestLimits>,
    /// `slow_start`: how long a target that joins or comes back takes to reach its full share.
    pub slow_start: Option<Duration>,
    pub health_check: Option<HealthCheck>,
    pub http: HttpUpstream,
    /// TLS to the targets, if configured (then every target has a [`Target::tls_name`]).
    pub tls: Option<UpstreamTls>,
    /// Traffic counters, kept across reloads for the same upstream name.
    pub metrics: Arc<PerWorker<UpstreamCells>>,
}

/// The names of the upstreams the config compiler makes for Rampart's own requests (a
/// `forward_auth` service's: `internal:forward_auth:http://auth:9000`) begin with this; a
/// configured upstream's name may not.
pub const INTERNAL_UPSTREAM_PREFIX: &str = "internal:";

impl Upstream {
    /// Whether Rampart made it for its own requests (not configured): the admin API, the metrics
    /// and the status page leave it out.
    pub fn is_internal(&self) -> bool {
        self.name.starts_with(INTERNAL_UPSTREAM_PREFIX)
    }

    /// The consistent-hashing key of a connection from `client` (0 when the policy does not
    /// hash, so nothing is computed).
    pub fn client_key(&self, client: std::net::IpAddr) -> u64 {
        if self.policy == BalancePolicy::ConsistentHash {
            client_hash(client)
        } else {
            0
        }
    }
}

/// One backend address.
#[derive(Debug, Clone)]
pub struct Target {
    /// As written in the config (`host:port`), for logs and records.
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    /// Used only while no primary target can take a request or connection (every primary down,
    /// or already tried for it): HAProxy's and nginx's `backup`.
    pub backup: bool,
    /// Shared with the health checker; kept across reloads for the same upstream and address.
    pub health: Arc<TargetHealth>,
    /// The name its certificate is verified against, when the upstream speaks TLS.
    pub tls_name: Option<TargetTlsName>,
    /// Traffic counters, kept across reloads for the same upstream and target name.
    pub metrics: Arc<PerWorker<TargetCells>>,
    /// The index in [`Upstream::lookups`] of the DNS question that gave it (`None`: written as
    /// an address).
    pub lookup: Option<usize>,
}

/// Active TCP health checking of every target of an upstream.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a down target up.
    pub rise: u32,
    /// Consecutive failures that take an up target down.
    pub fall: u32,
    /// Check with an HTTP request instead of a bare TCP connect.
    pub http: Option<HttpCheck>,
    /// Check with a DNS query over UDP (`dns_query = "NAME"`): the target must answer it
    /// (NOERROR or NXDOMAIN). For UDP upstreams.
    pub dns: Option<String>,
}

/// An active HTTP health check: `GET path` must answer with a status in `expect_status`.
#[derive(Debug, Clone)]
pub struct HttpCheck {
    pub path: String,
    pub host: String,
    pub expect_status: (u16, u16),
}
