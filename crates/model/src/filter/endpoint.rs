//! Where a filter's own HTTP requests go: a JWKS document (`jwt`), an auth service
//! (`forward_auth`). An [`HttpEndpoint`] is an `http://` or `https://` URL taken apart once at
//! config load; [`EndpointTls`] is what an `https://` one needs to connect.

use std::sync::Arc;

use crate::tls::TargetTlsName;

/// For an `https://` endpoint: the client configuration (trust roots) and the name the server's
/// certificate must carry.
pub type EndpointTls = (Arc<rustls::ClientConfig>, TargetTlsName);

/// An `http://` or `https://` URL as a filter's requests use it: host, port, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpEndpoint {
    /// The URL as configured (for logs).
    pub url: String,
    pub https: bool,
    /// Host name or IP address (no brackets), to connect to.
    pub host: String,
    pub port: u16,
    /// The `Host` field: host (bracketed for IPv6) and the port when not the scheme's default.
    pub host_header: String,
    /// Path and query of the request target (`/` when the URL has none).
    pub path: String,
}

impl HttpEndpoint {
    /// Reads an `http://` or `https://` URL (no user info, no fragment).
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("`{url}` is not an http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .filter(|a| !a.as_str().is_empty())
            .ok_or_else(|| format!("`{url}` names no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!("`{url}`: user info in the URL is not supported"));
        }
        let bracketed = authority.host();
        let host = bracketed.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{url}` names no host"));
        }
        let default_port = if https { 443 } else { 80 };
        let port = authority.port_u16().unwrap_or(default_port);
        let host_header = if port == default_port {
            bracketed.to_string()
        } else {
            format!("{bracketed}:{port}")
        };
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        Ok(HttpEndpoint {
            url: url.to_string(),
            https,
            host: host.to_string(),
            port,
            host_header,
            path: if path.is_empty() { "/".into() } else { path.into() },
        })
    }

    /// The TLS side of this endpoint: `None` for `http://`; for `https://`, `config` paired with
    /// the name the certificate must carry (an error without a configuration).
    pub fn client_tls(&self, config: Option<Arc<rustls::ClientConfig>>) -> Result<Option<EndpointTls>, String> {
        match (self.https, config) {
            (true, Some(config)) => {
                let name = TargetTlsName::try_from(self.host.clone())
                    .map_err(|_| format!("`{}` is not a name a certificate can carry", self.host))?;
                Ok(Some((config, name)))
            }
            (true, None) => Err(format!("`{}`: https needs a TLS client configuration", self.url)),
            (false, _) => Ok(None),
        }
    }

    /// The URL without its query (which may carry a token), for logs.
    pub fn log_url(&self) -> String {
        let path = self.path.split('?').next().unwrap_or("/");
        format!(
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.host_header,
            path
        )
    }
}
