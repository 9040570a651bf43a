//! `[acme]` and listeners' `acme` names: certificates obtained from an ACME CA by the control
//! plane, and the route that answers the CA's HTTP-01 challenges on every HTTP listener.
//! `[acme.dns01]` (DNS-01 through dynamic updates) is in [`dns01`].

mod dns01;

use std::path::PathBuf;

use base64::Engine;
use rampart_model::acme::{
    AcmeChallenge, AcmeSettings, AcmeStorage, ExternalAccount, OnDemand, HTTP01_PREFIX, LETS_ENCRYPT,
    MAX_CONCURRENT_ORDERS,
};
use rampart_model::filter::rate_limit::RedisEndpoint;
use rampart_model::route::{PathMatch, RedirectTo, Route, RouteAction, RouteMatcher};
use rampart_model::{Listener, ListenerProtocol};
use toml::Spanned;

use super::{Checker, LiveState};
use crate::raw::{RawAcme, RawEab, RawOnDemand};

/// Where the account and certificates are kept when `[acme] storage` is not given.
const DEFAULT_STORAGE: &str = "/var/lib/rampart/acme";

/// What listeners' `acme` names are checked against when `[acme.dns01]` is given.
pub(super) struct Dns01Scope {
    /// The zone updated, when `zone` says it.
    zone: Option<String>,
    /// Whether every name uses DNS-01 (`challenge = "dns-01"`), not only wildcards.
    every_name: bool,
}

/// The name of the route that answers HTTP-01 challenges.
pub const HTTP01_ROUTE: &str = "acme-http-01";

impl Checker<'_> {
    /// The `[acme]` table.
    pub(super) fn acme(&mut self, raw: &Spanned<RawAcme>) -> AcmeSettings {
        let a = raw.get_ref();
        let directory = match &a.directory {
            Some(d) if d.get_ref().starts_with("https://") || d.get_ref().starts_with("http://") => d.get_ref().clone(),
            Some(d) => {
                self.error(d.span(), format!("directory `{}` is not an http(s) URL", d.get_ref()));
                String::new()
            }
            None => LETS_ENCRYPT.to_string(),
        };
        let contact = match &a.email {
            Some(e) if e.get_ref().contains('@') && !e.get_ref().contains(char::is_whitespace) => {
                vec![format!("mailto:{}", e.get_ref())]
            }
            Some(e) => {
                self.error(e.span(), format!("email `{}` is not an address", e.get_ref()));
                Vec::new()
            }
            None => Vec::new(),
        };
        let ca = a.ca.as_ref().map(|c| {
            let path = self.path(c);
            if let Err(e) = std::fs::metadata(&path) {
                self.error(c.span(), format!("ca {}: {e}", c.get_ref()));
            }
            path
        });
        let storage = match &a.storage {
            Some(s) if s.get_ref().starts_with("redis://") => match RedisEndpoint::parse(s.get_ref()) {
                Ok(endpoint) => AcmeStorage::Redis(endpoint),
                Err(e) => {
                    self.error(s.span(), e);
                    AcmeStorage::Dir(PathBuf::from(DEFAULT_STORAGE))
                }
            },
            Some(s) if s.get_ref() == "etcd" => AcmeStorage::Etcd,
            Some(s) => AcmeStorage::Dir(self.path(s)),
            None => AcmeStorage::Dir(PathBuf::from(DEFAULT_STORAGE)),
        };
        let dns01 = a.dns01.as_ref().and_then(|d| self.dns01(d));
        let challenge = match a.challenge.as_ref().map(|c| (c, c.get_ref().to_ascii_lowercase())) {
            None => AcmeChallenge::Http01,
            Some((_, c)) if c == "http-01" => AcmeChallenge::Http01,
            Some((_, c)) if c == "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
            Some((c, d)) if d == "dns-01" => {
                if a.dns01.is_none() {
                    self.error(
                        c.span(),
                        "challenge `dns-01` needs an [acme.dns01] table (server and TSIG key)",
                    );
                }
                AcmeChallenge::Dns01
            }
            Some((c, _)) => {
                self.error(
                    c.span(),
                    format!(
                        "unknown challenge `{}` (expected \"http-01\", \"tls-alpn-01\" or \"dns-01\")",
                        c.get_ref()
                    ),
                );
                AcmeChallenge::Http01
            }
        };
        self.acme_dns01 = a.dns01.as_ref().map(|d| Dns01Scope {
            zone: d.get_ref().zone.as_ref().map(|z| dns01::zone_name(z.get_ref())),
            every_name: challenge == AcmeChallenge::Dns01,
        });
        let eab = a.eab.as_ref().and_then(|e| self.eab(e));
        let profile = a.profile.as_ref().map(|p| {
            let name = p.get_ref().trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                self.error(p.span(), format!("profile `{}` is not a profile name", p.get_ref()));
            }
            name.to_string()
        });
        let max_concurrent_orders = match &a.max_concurrent_orders {
            Some(n) => self
                .count(n, "max_concurrent_orders", 1, 1000)
                .unwrap_or(MAX_CONCURRENT_ORDERS),
            None => MAX_CONCURRENT_ORDERS,
        };
        AcmeSettings {
            directory,
            contact,
            ca,
            storage,
            challenge,
            dns01,
            eab,
            profile,
            max_concurrent_orders,
        }
    }

    /// `[acme.eab]`; `None` after an error (reported).
    fn eab(&mut self, raw: &Spanned<RawEab>) -> Option<ExternalAccount> {
        let e = raw.get_ref();
        let kid = e.kid.get_ref().trim().to_string();
        if kid.is_empty() {
            self.error(e.kid.span(), "kid is empty");
        }
        let (span, text) = match (&e.hmac_key, &e.hmac_key_file) {
            (Some(_), Some(file)) => {
                self.error(file.span(), "use either `hmac_key` or `hmac_key_file`, not both");
                return None;
            }
            (Some(key), None) => (key.span(), key.get_ref().clone()),
            (None, Some(file)) => match std::fs::read_to_string(self.path(file)) {
                Ok(text) => (file.span(), text),
                Err(e) => {
                    self.error(
                        file.span(),
                        format!("hmac_key_file {}: cannot read: {e}", file.get_ref()),
                    );
                    return None;
                }
            },
            (None, None) => {
                self.error(
                    raw.span(),
                    "[acme.eab] needs the HMAC key the CA gave: `hmac_key_file` (or `hmac_key`)",
                );
                return None;
            }
        };
        match decode_mac_key(text.trim()) {
            Some(hmac_key) if !kid.is_empty() => Some(ExternalAccount { kid, hmac_key }),
            Some(_) => None,
            None => {
                self.error(span, "the HMAC key is not base64url (as the CA gives it)");
                None
            }
        }
    }

    /// A TLS listener's `acme` names, checked: DNS names, each once; wildcards (`*.b.example`)
    /// need `[acme.dns01]`, and with a `zone` there, a wildcard's name must be in it.
    pub(super) fn acme_names(&mut self, listener: &str, raw: Option<&Spanned<Vec<Spanned<String>>>>) -> Vec<String> {
        let Some(list) = raw else { return Vec::new() };
        if !self.acme_configured {
            self.error(
                list.span(),
                format!(
                    "listener `{listener}`: `acme` names need an [acme] table (`[acme]` alone will do: Let's Encrypt, \
                     certificates kept in {DEFAULT_STORAGE}; `email` is optional, for the CA's expiry warnings)"
                ),
            );
        }
        let mut names: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for n in list.get_ref() {
            let name = n.get_ref().trim_end_matches('.').to_ascii_lowercase();
            let wildcard = name.strip_prefix("*.");
            if wildcard.is_some() && self.acme_dns01.is_none() && self.acme_configured {
                self.error(
                    n.span(),
                    format!(
                        "`{}`: a wildcard needs the DNS-01 challenge: add an [acme.dns01] table",
                        n.get_ref()
                    ),
                );
                continue;
            }
            if let Err(e) = host_name(wildcard.unwrap_or(&name)) {
                self.error(n.span(), format!("`{}` is not a host name: {e}", n.get_ref()));
                continue;
            }
            let in_zone = self.acme_dns01.as_ref().and_then(|scope| {
                let zone = scope.zone.as_ref().filter(|_| wildcard.is_some() || scope.every_name)?;
                let owner = wildcard.unwrap_or(&name);
                Some((owner == zone || owner.ends_with(&format!(".{zone}")), zone.clone()))
            });
            if let Some((false, zone)) = in_zone {
                self.error(
                    n.span(),
                    format!("`{}` is not in the [acme.dns01] zone `{zone}`", n.get_ref()),
                );
                continue;
            }
            if !seen.insert(name.clone()) {
                self.error(n.span(), format!("`{}` is listed twice", n.get_ref()));
                continue;
            }
            names.push(name);
        }
        // Sorted: a handshake's name is looked up by binary search (`ListenerTls::knows`).
        names.sort_unstable();
        names
    }
}

impl Checker<'_> {
    /// A TLS listener's `acme_on_demand` table.
    pub(super) fn on_demand(&mut self, listener: &str, raw: &Spanned<RawOnDemand>) -> Option<OnDemand> {
        let od = raw.get_ref();
        if !self.acme_configured {
            self.error(
                raw.span(),
                format!("listener `{listener}`: `acme_on_demand` needs an [acme] table"),
            );
        }
        if od.allow.get_ref().is_empty() {
            self.error(
                od.allow.span(),
                "allow is empty: list the names (or `*.DOMAIN`) certificates may be obtained for",
            );
        }
        let mut allow = Vec::new();
        for a in od.allow.get_ref() {
            let name = a.get_ref().trim_end_matches('.').to_ascii_lowercase();
            let bare = name.strip_prefix("*.").unwrap_or(&name);
            if let Err(e) = host_name(bare) {
                self.error(a.span(), format!("`{}` is not a host name: {e}", a.get_ref()));
                continue;
            }
            allow.push(name);
        }
        let ask = od.ask.as_ref().and_then(|a| {
            if a.get_ref().starts_with("http://") {
                Some(a.get_ref().clone())
            } else {
                self.error(a.span(), format!("ask `{}` is not an http:// URL", a.get_ref()));
                None
            }
        });
        let per_minute = match &od.per_minute {
            Some(n) => self.count(n, "per_minute", 1, 10_000)? as u32,
            None => 10,
        };
        Some(OnDemand { allow, ask, per_minute })
    }
}

/// The challenge when `challenge` is not given: HTTP-01 when a plain HTTP listener can answer
/// it (the CA connects to port 80, which may be forwarded to any port here), else TLS-ALPN-01,
/// which the TLS listeners answer themselves. Wildcards use DNS-01 either way.
pub(super) fn challenge_that_can_work(listeners: &[Listener]) -> AcmeChallenge {
    let plain_http = listeners
        .iter()
        .any(|l| l.tls.is_none() && matches!(l.protocol, ListenerProtocol::Http(_)));
    if plain_http {
        AcmeChallenge::Http01
    } else {
        AcmeChallenge::TlsAlpn01
    }
}

/// The name of the route of a plain HTTP listener with no routes of its own in a config with
/// `[acme]`: everything but the HTTP-01 answers is redirected to HTTPS.
pub const HTTPS_REDIRECT_ROUTE: &str = "acme-https-redirect";

/// The route of an ACME-only plain listener: `301` to the same host, path and query over HTTPS
/// (its port is set by [`answer_http01`], once every listener is known).
pub(super) fn https_redirect(listener: &str, live: &mut LiveState) -> Route {
    Route {
        name: HTTPS_REDIRECT_ROUTE.to_string(),
        matcher: RouteMatcher::default(),
        action: RouteAction::Redirect {
            status: 301,
            to: RedirectTo::Scheme {
                scheme: "https".to_string(),
                port: None,
            },
        },
        filters: Default::default(),
        mirror: None,
        cache: None,
        retry: Default::default(),
        error_pages: None,
        traced: true,
        metrics: live.route_metrics(listener, HTTPS_REDIRECT_ROUTE),
    }
}

/// The port that ACME-only plain listeners redirect to: that of the TLS listeners that obtain
/// certificates, when they all have one and it is not 443 (else 443, left out of the URL).
fn https_port(listeners: &[Listener]) -> Option<u16> {
    let mut ports = listeners
        .iter()
        .filter(|l| {
            l.tls
                .as_ref()
                .is_some_and(|t| !t.acme_names.is_empty() || t.on_demand.is_some())
        })
        .filter_map(|l| l.bind.map(|b| b.port()));
    let first = ports.next()?;
    (first != 443 && ports.all(|p| p == first)).then_some(first)
}

/// Puts the HTTP-01 route first on every HTTP listener, so that the CA's validation reaches
/// whichever listener on port 80 it connects to; points ACME-only listeners' redirects at the
/// HTTPS port.
pub(super) fn answer_http01(listeners: &mut [Listener], live: &mut LiveState) {
    let https_port = https_port(listeners);
    for listener in listeners {
        let name = listener.name.clone();
        // Compiled just now, so not shared yet: `get_mut` finds it.
        if let Some(http) = listener.http_mut() {
            for route in http.routes.iter_mut().filter(|r| r.name == HTTPS_REDIRECT_ROUTE) {
                if let RouteAction::Redirect {
                    to: RedirectTo::Scheme { port, .. },
                    ..
                } = &mut route.action
                {
                    *port = https_port;
                }
            }
            http.routes.insert(
                0,
                Route {
                    name: HTTP01_ROUTE.to_string(),
                    matcher: RouteMatcher {
                        path: Some(PathMatch::Prefix(HTTP01_PREFIX.to_string())),
                        ..Default::default()
                    },
                    action: RouteAction::AcmeChallenge(live.acme()),
                    filters: Default::default(),
                    mirror: None,
                    cache: None,
                    retry: Default::default(),
                    error_pages: None,
                    traced: true,
                    metrics: live.route_metrics(&name, HTTP01_ROUTE),
                },
            );
        }
    }
}

/// Checks that `name` (lowercase, no final dot, a wildcard's `*.` taken off) is a host name as
/// certificates carry them: labels of letters, digits and `-`, not starting or ending with `-`,
/// 1 to 63 characters each, 253 in all (RFC 1123 section 2.1, RFC 5280 section 4.2.1.6). The CA
/// refuses any other name in every order.
fn host_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_string());
    }
    if name.len() > 253 {
        return Err(format!("{} characters, more than 253", name.len()));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("it has an empty label (two dots in a row, or a dot first)".to_string());
        }
        if label.len() > 63 {
            return Err(format!(
                "the label `{label}` has {} characters, more than 63",
                label.len()
            ));
        }
        if label == "*" {
            return Err("`*` may only be the whole first label (`*.example.com`)".to_string());
        }
        if let Some(c) = label.chars().find(|c| !c.is_ascii_alphanumeric() && *c != '-') {
            return Err(format!(
                "the label `{label}` has `{c}`: only letters, digits and `-` are allowed"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label `{label}` starts or ends with `-`"));
        }
    }
    Ok(())
}

/// An EAB MAC key as CAs write it: base64url without padding; padded or standard base64 is
/// taken too. `None`: not base64, or empty.
fn decode_mac_key(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let key = URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .or_else(|_| STANDARD.decode(text))
        .ok()?;
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests;
