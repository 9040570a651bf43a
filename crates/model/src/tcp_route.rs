//! Routes of TCP listeners (delayed binding): a connection is held until its first bytes say what
//! it is (a TLS ClientHello and its SNI/ALPN, an HTTP request and its Host, an SSH banner, ...),
//! then the first route whose matcher accepts it decides where it goes. Deciding is a pure
//! function of what has arrived ([`TcpRouting::decide`]), called again as more bytes come.
//!
//! Each condition of a route answers yes, no, or "not yet" (the bytes that would tell have not
//! arrived). Routes are tried in order: a route that says "not yet" before any that says yes holds
//! the connection, so a later route never wins over an earlier one that was still undecided. When
//! nothing more will come (the peek timeout struck, the peek limit was reached, or the client
//! ended its stream), "not yet" counts as no.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rampart_proto::detect::{Detected, Detection, Protocol, Wants};
use regex::bytes::Regex;

use crate::metrics::{PerWorker, TcpRouteCells};
use crate::net::IpNet;
use crate::route::HostMatch;

/// The routes of one TCP listener, and what happens to the connections none of them takes.
#[derive(Debug)]
pub struct TcpRouting {
    pub routes: Vec<TcpRoute>,
    /// How long a connection may take to send bytes that decide its route.
    pub peek_timeout: Duration,
    /// The most bytes held while deciding.
    pub peek_max: usize,
    /// What detection must read beyond the protocol (the whole HTTP head for `http_host`).
    pub wants: Wants,
    /// The counters of the connections that went to the listener's default (route `""`).
    pub default_metrics: Arc<PerWorker<TcpRouteCells>>,
}

/// One route of a TCP listener.
#[derive(Debug)]
pub struct TcpRoute {
    pub name: String,
    pub matcher: TcpMatcher,
    pub action: TcpAction,
    pub filters: L4Filters,
    /// Kept across reloads for the same listener and route name.
    pub metrics: Arc<PerWorker<TcpRouteCells>>,
}

/// Every condition present must hold.
#[derive(Debug, Default)]
pub struct TcpMatcher {
    pub protocol: Option<Protocol>,
    /// The connection began with a PROXY protocol header (from a trusted source).
    pub proxy_header: bool,
    /// The server name of a TLS ClientHello.
    pub sni: Option<HostMatch>,
    /// An ALPN protocol the ClientHello offers.
    pub alpn: Option<Vec<u8>>,
    /// The Host of the first HTTP/1.x request.
    pub http_host: Option<HostMatch>,
    /// The first bytes.
    pub prefix: Option<Vec<u8>>,
    /// A match anywhere in the bytes peeked.
    pub regex: Option<Regex>,
    /// The client's address is in one of these networks (empty: any).
    pub source: Vec<IpNet>,
}

/// What a route does with its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpAction {
    /// Relay to the upstream with this index in [`crate::Snapshot::upstreams`].
    Upstream(usize),
    /// Hand over to the listener with this index in [`crate::Snapshot::listeners`].
    Listener(usize),
    /// Close the connection.
    Reject,
}

/// The payload filters of a route. A route without any relays with the splice fast path.
#[derive(Debug, Default)]
pub struct L4Filters {
    /// Close the connection after this many bytes in either direction.
    pub max_bytes: Option<u64>,
    /// Close the connection when the client's stream matches.
    pub deny_regex: Option<DenyRegex>,
}

impl L4Filters {
    pub fn is_empty(&self) -> bool {
        self.max_bytes.is_none() && self.deny_regex.is_none()
    }
}

/// `deny_regex`: matched across read boundaries within a window of the latest bytes.
#[derive(Debug)]
pub struct DenyRegex {
    pub regex: Regex,
    /// How many of the latest bytes are kept to match across a read boundary: a match no longer
    /// than this is always found.
    pub window: usize,
}

/// What has arrived on a connection so far.
#[derive(Debug)]
pub struct Peeked<'a> {
    pub bytes: &'a [u8],
    pub detection: &'a Detection,
    pub client: IpAddr,
    pub proxy_header: bool,
    /// Nothing more will arrive in time: undecided conditions count as no.
    pub last: bool,
}

/// The outcome of [`TcpRouting::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait for more bytes.
    Wait,
    /// The route with this index.
    Route(usize),
    /// No route: the listener's default.
    Default,
}

/// A condition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Yes,
    No,
    NotYet,
}

impl Answer {
    fn from(yes: bool) -> Answer {
        if yes {
            Answer::Yes
        } else {
            Answer::No
        }
    }

    /// Both must hold.
    fn and(self, other: impl FnOnce() -> Answer) -> Answer {
        match self {
            Answer::No => Answer::No,
            Answer::Yes => other(),
            Answer::NotYet => match other() {
                Answer::No => Answer::No,
                _ => Answer::NotYet,
            },
        }
    }
}

impl TcpRouting {
    /// Which route takes a connection that has sent `peeked`, or whether to wait for more.
    pub fn decide(&self, peeked: &Peeked<'_>) -> Decision {
        for (i, route) in self.routes.iter().enumerate() {
            match route.matcher.answer(peeked) {
                Answer::Yes => return Decision::Route(i),
                Answer::No => {}
                Answer::NotYet if peeked.last => {}
                Answer::NotYet => return Decision::Wait,
            }
        }
        Decision::Default
    }

    /// Whether deciding needs any byte from the client (a route that looks only at the source
    /// address or the PROXY header decides at once, and a server-speaks-first protocol behind it
    /// does not wait for `peek_timeout`).
    pub fn decides_without_bytes(&self, client: IpAddr, proxy_header: bool) -> Option<Decision> {
        let none = Detection::NeedMore;
        let peeked = Peeked {
            bytes: &[],
            detection: &none,
            client,
            proxy_header,
            last: false,
        };
        match self.decide(&peeked) {
            Decision::Wait => None,
            decided => Some(decided),
        }
    }
}

impl TcpMatcher {
    fn answer(&self, p: &Peeked<'_>) -> Answer {
        let at_once = (self.source.is_empty() || self.source.iter().any(|n| n.contains(p.client)))
            && (!self.proxy_header || p.proxy_header);
        Answer::from(at_once)
            .and(|| self.prefix_answer(p.bytes))
            .and(|| match p.detection {
                Detection::NeedMore if self.needs_detection() => Answer::NotYet,
                Detection::NeedMore => Answer::Yes,
                Detection::Done(d) => Answer::from(self.detected_matches(d)),
            })
            .and(|| match &self.regex {
                None => Answer::Yes,
                Some(r) if r.is_match(p.bytes) => Answer::Yes,
                Some(_) if matches!(p.detection, Detection::Done(_)) => Answer::No,
                Some(_) => Answer::NotYet,
            })
    }

    fn needs_detection(&self) -> bool {
        self.protocol.is_some() || self.sni.is_some() || self.alpn.is_some() || self.http_host.is_some()
    }

    fn prefix_answer(&self, bytes: &[u8]) -> Answer {
        let Some(prefix) = &self.prefix else { return Answer::Yes };
        if bytes.len() >= prefix.len() {
            Answer::from(bytes.starts_with(prefix))
        } else if prefix.starts_with(bytes) {
            Answer::NotYet
        } else {
            Answer::No
        }
    }

    fn detected_matches(&self, d: &Detected) -> bool {
        if self.protocol.is_some_and(|p| p != d.protocol) {
            return false;
        }
        if let Some(sni) = &self.sni {
            if !d.sni.as_deref().is_some_and(|name| host_matches(sni, name)) {
                return false;
            }
        }
        if let Some(alpn) = &self.alpn {
            if !d.alpn.iter().any(|offered| offered == alpn) {
                return false;
            }
        }
        if let Some(host) = &self.http_host {
            let Some(sent) = d.http_host.as_deref() else {
                return false;
            };
            if !host_matches(host, strip_port(sent)) {
                return false;
            }
        }
        true
    }
}

/// `name` against an exact or wildcard host, case-insensitively.
pub fn host_matches(host: &HostMatch, name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    match host {
        HostMatch::Exact(e) => name.eq_ignore_ascii_case(e),
        HostMatch::Suffix(s) => {
            name.len() > s.len()
                && name
                    .get(name.len() - s.len()..)
                    .is_some_and(|tail| tail.eq_ignore_ascii_case(s))
        }
    }
}

/// A Host header without its port (`example.com:8080`, `[::1]:80`).
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests;
