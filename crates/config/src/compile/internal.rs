//! Upstreams of Rampart's own: each `forward_auth` service and each `jwt` filter's JWKS URL
//! becomes an upstream of the snapshot, so that its checks and fetches go through the internal
//! client (pooled connections, TLS, HTTP/2 by ALPN,
//! DNS targets, timeouts) like any proxied request. Its name begins with
//! [`INTERNAL_UPSTREAM_PREFIX`], which configured upstreams may not use, and the admin side leaves
//! such upstreams out. Filters of one kind that name the same service (scheme, host, port and
//! trust roots) share one.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;

use rampart_model::filter::endpoint::{EndpointTls, HttpEndpoint};
use rampart_model::tls::UpstreamTls;
use rampart_model::{Upstream, INTERNAL_UPSTREAM_PREFIX};
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawTarget, RawTargetTable, RawUpstream};

/// The internal upstreams made so far, in the order they follow the configured ones.
#[derive(Default)]
pub(super) struct InternalUpstreams {
    /// How many upstreams the config has: the first internal one's index.
    pub configured: usize,
    /// Each with what it was made for (`kind`, URL scheme, host and port, trust roots).
    pub made: Vec<(String, Upstream)>,
}

impl Checker<'_> {
    /// The TLS side of a service of Rampart's own at `endpoint`, written in the key `url_key`
    /// (whose value is at `at`): for `https://`, trust roots from `ca` (a PEM file) or the
    /// system's; for `http://`, none, and `ca` beside it is an error. `None` after an error.
    pub(super) fn endpoint_tls(
        &mut self,
        endpoint: &HttpEndpoint,
        ca: Option<&Spanned<String>>,
        (url_key, at): (&str, Range<usize>),
    ) -> Option<Option<EndpointTls>> {
        let config = match (ca, endpoint.https) {
            (Some(ca), false) => {
                self.error(ca.span(), format!("`ca` is for an https:// `{url_key}`"));
                return None;
            }
            (_, true) => Some(self.filter_client_tls(ca, at.clone())?),
            (None, false) => None,
        };
        match endpoint.client_tls(config) {
            Ok(tls) => Some(tls),
            Err(e) => {
                self.error(at, e);
                None
            }
        }
    }

    /// The snapshot index of the internal upstream for a `kind` filter's service at `endpoint`
    /// (`tls` for `https://`, `roots` naming its trust roots), made on first use; errors at `at`.
    /// Its protocol is `auto` (HTTP/2 where TLS offers it).
    pub(super) fn internal_upstream(
        &mut self,
        kind: &str,
        endpoint: &HttpEndpoint,
        tls: (Option<&EndpointTls>, Option<&str>),
        at: Range<usize>,
        live: &mut LiveState,
    ) -> Option<usize> {
        self.internal_upstream_speaking(kind, endpoint, tls, ("auto", at), live)
    }

    /// [`Checker::internal_upstream`] with the upstream `protocol` given (`h2c`: HTTP/2 in clear
    /// by prior knowledge, as an OTLP/gRPC collector without TLS needs).
    pub(super) fn internal_upstream_speaking(
        &mut self,
        kind: &str,
        endpoint: &HttpEndpoint,
        (tls, roots): (Option<&EndpointTls>, Option<&str>),
        (protocol, at): (&str, Range<usize>),
        live: &mut LiveState,
    ) -> Option<usize> {
        let scheme = if endpoint.https { "https" } else { "http" };
        let key = format!("{kind} {scheme} {} {} {roots:?}", endpoint.host, endpoint.port);
        if let Some(i) = self.internal.made.iter().position(|(k, _)| *k == key) {
            return Some(self.internal.configured + i);
        }
        let base = format!("{INTERNAL_UPSTREAM_PREFIX}{kind}:{scheme}://{}", endpoint.host_header);
        let taken = |name: &str| self.internal.made.iter().any(|(_, u)| u.name == name);
        let name = (1..)
            .map(|n| if n == 1 { base.clone() } else { format!("{base}#{n}") })
            .find(|n| !taken(n))?;
        let target = match endpoint.host.parse::<IpAddr>() {
            Ok(ip) => RawTarget::Address(SocketAddr::new(ip, endpoint.port).to_string()),
            // A name: asked of DNS by the control plane, as a configured `dns` target is.
            Err(_) => RawTarget::Detailed(RawTargetTable {
                address: None,
                dns: Some(endpoint.host.clone()),
                port: Some(i64::from(endpoint.port)),
                srv: None,
                weight: None,
                backup: false,
            }),
        };
        let mut raw: RawUpstream = toml::from_str("targets = []").ok()?;
        raw.targets = Spanned::new(at.clone(), vec![Spanned::new(at.clone(), target)]);
        raw.protocol = Some(Spanned::new(at, protocol.to_string()));
        let mut up = self.upstream(&name, &raw, live)?;
        if let Some((config, tls_name)) = tls {
            // HTTP/2 when the service offers it, else HTTP/1.1.
            let mut config = rustls::ClientConfig::clone(config);
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            up.tls = Some(UpstreamTls {
                config: Arc::new(config),
                sni: None,
            });
            for target in &mut up.targets {
                target.tls_name = Some(tls_name.clone());
            }
        }
        self.internal.made.push((key, up));
        Some(self.internal.configured + self.internal.made.len() - 1)
    }
}
