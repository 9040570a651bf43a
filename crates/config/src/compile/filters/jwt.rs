//! The `jwt` filter's keys: where its keys come from (`keys` files or a `jwks_url`), what it
//! accepts (`algorithms`, `issuers`, `audiences`, `leeway`, `require_exp`, `required_claims`,
//! `max_token_len`), where a request carries the token (`header`, `query`, `cookie`), what goes
//! upstream (`forward_claims`, `strip_token`), the challenge's `realm`, and `cache_size`.

use std::str::FromStr;
use std::sync::Arc;

use rampart_model::defaults;
use rampart_model::filter::jwt::{
    ClaimHeader, JwksFetch, Jwt, JwtAlgorithm, JwtKey, JwtKeySet, JwtKeySource, JwtSettings, TokenLocation,
};
use rampart_model::filter::Filter;
use toml::Spanned;

use super::basic::is_token;
use super::jwt_key_files::{jwt_hmac_secret, jwt_keys_from_pem};
use super::FilterTable;
use crate::compile::{Checker, LiveState};

/// Every algorithm Rampart verifies: the default of `algorithms` (a key verifies only its own
/// family's, so this lets the keys decide).
const ALL_ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl Checker<'_> {
    pub(super) fn jwt_filter(&mut self, t: &mut FilterTable<'_>, live: &mut LiveState) -> Option<Filter> {
        // Every key is read (and so checked) before any error ends the filter.
        let algorithms = self.jwt_algorithms(t);
        let mut settings = JwtSettings::new(Vec::new());
        settings.issuers = self.list_or_one(t, "issuers", "issuer");
        settings.audiences = self.list_or_one(t, "audiences", "audience");
        if let Some(leeway) = self.filter_duration_or_zero(t, "leeway") {
            settings.leeway = leeway.as_secs();
        }
        settings.require_exp = self.filter_bool(t, "require_exp", true);
        settings.required_claims = self
            .filter_strings(t, "required_claims")
            .map(Spanned::into_inner)
            .unwrap_or_default();
        if let Some(max) = self.filter_size(t, "max_token_len") {
            settings.max_token_len = max.clamp(64, 1 << 20) as usize;
        }
        if let Some(table) = self.filter_string_table(t, "forward_claims") {
            for (claim, header) in table.get_ref() {
                if !is_token(header) {
                    self.error(table.span(), format!("`{header}` is not a header name"));
                    continue;
                }
                settings.forward.push(ClaimHeader {
                    claim: claim.clone(),
                    header: header.to_ascii_lowercase(),
                });
            }
        }
        let token = self.jwt_token_location(t);
        let strip_token = self.filter_bool(t, "strip_token", false);
        let realm = match self.filter_string(t, "realm") {
            Some(r)
                if r.get_ref()
                    .chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ') =>
            {
                r.into_inner()
            }
            Some(r) => {
                self.error(r.span(), "`realm` is printable ASCII without quotes or backslashes");
                String::new()
            }
            None => "rampart".to_string(),
        };
        let cache_size = self.filter_int(t, "cache_size", defaults::JWT_CACHE_SIZE as i64, 1, 1 << 20) as usize;
        let keys = self.jwt_keys(t, live);
        let (Some(algorithms), Some(token), Some((keys, jwks))) = (algorithms, token, keys) else {
            return None;
        };
        settings.algorithms = algorithms;
        Some(Filter::Jwt(Jwt {
            settings,
            keys,
            jwks,
            token,
            strip_token,
            realm,
            cache_size,
        }))
    }

    /// `algorithms`: names as in a token's `alg` (`none` is never one).
    fn jwt_algorithms(&mut self, t: &mut FilterTable<'_>) -> Option<Vec<JwtAlgorithm>> {
        let Some(list) = self.filter_strings(t, "algorithms") else {
            return Some(
                ALL_ALGORITHMS
                    .iter()
                    .filter_map(|a| JwtAlgorithm::from_str(a).ok())
                    .collect(),
            );
        };
        let mut out = Vec::new();
        for name in list.get_ref() {
            match JwtAlgorithm::from_str(name) {
                Ok(alg) if ALL_ALGORITHMS.contains(&name.as_str()) => out.push(alg),
                _ => {
                    self.error(
                        list.span(),
                        format!("`{name}` is not an algorithm (one of {})", ALL_ALGORITHMS.join(", ")),
                    );
                    return None;
                }
            }
        }
        if out.is_empty() {
            self.error(list.span(), "`algorithms` needs at least one algorithm");
            return None;
        }
        Some(out)
    }

    /// A list under `plural`, or one string under `singular` (not both).
    fn list_or_one(&mut self, t: &mut FilterTable<'_>, plural: &str, singular: &str) -> Vec<String> {
        let many = self.filter_strings(t, plural);
        let one = self.filter_strings(t, singular);
        match (many, one) {
            (Some(_), Some(one)) => {
                self.error(one.span(), format!("give `{plural}` or `{singular}`, not both"));
                Vec::new()
            }
            (Some(list), None) | (None, Some(list)) => list.into_inner(),
            (None, None) => Vec::new(),
        }
    }

    /// A duration that may be zero (`leeway = "0s"`).
    fn filter_duration_or_zero(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<std::time::Duration> {
        let v = self.filter_string(t, key)?;
        match crate::units::parse_duration(v.get_ref()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(v.span(), e);
                None
            }
        }
    }

    /// `header` (default `authorization`, or `""` for none), `query`, `cookie`.
    fn jwt_token_location(&mut self, t: &mut FilterTable<'_>) -> Option<TokenLocation> {
        let mut location = TokenLocation::default();
        if let Some(h) = self.filter_string(t, "header") {
            location.header = match h.get_ref().as_str() {
                "" => None,
                name if is_token(name) => Some(name.to_ascii_lowercase()),
                name => {
                    self.error(h.span(), format!("`{name}` is not a header name"));
                    return None;
                }
            };
        }
        location.query = self.filter_string(t, "query").map(Spanned::into_inner);
        location.cookie = self.filter_string(t, "cookie").and_then(|c| {
            if is_token(c.get_ref()) {
                return Some(c.into_inner());
            }
            self.error(
                c.span(),
                format!("`cookie`: `{}` is not a cookie name", c.get_ref().escape_debug()),
            );
            None
        });
        if location.header.is_none() && location.query.is_none() && location.cookie.is_none() {
            self.error(
                t.span.clone(),
                "a `jwt` filter needs somewhere to find the token: `header`, `query` or `cookie`",
            );
            return None;
        }
        Some(location)
    }

    /// The key source: `keys` (files: PEM public keys and certificates, or an HMAC secret) or a
    /// `jwks_url` (kept across reloads, so a reload neither forgets the fetched keys nor fetches
    /// before it must), with `jwks_refresh` and, for `https://`, `jwks_ca`.
    fn jwt_keys(
        &mut self,
        t: &mut FilterTable<'_>,
        live: &mut LiveState,
    ) -> Option<(Arc<JwtKeySource>, Option<JwksFetch>)> {
        let files = self.filter_strings(t, "keys");
        let url = self.filter_string(t, "jwks_url");
        let refresh = self.filter_duration(t, "jwks_refresh");
        let ca = self.filter_string(t, "jwks_ca");
        match (files, url) {
            (Some(_), Some(url)) => {
                self.error(url.span(), "give `keys` (files) or `jwks_url`, not both");
                None
            }
            (None, None) => {
                self.error(t.span.clone(), "a `jwt` filter needs `keys` (key files) or `jwks_url`");
                None
            }
            (Some(files), None) => {
                for (key, value) in [("jwks_refresh", refresh.is_some()), ("jwks_ca", ca.is_some())] {
                    if value {
                        self.error(files.span(), format!("`{key}` goes with `jwks_url`, not `keys`"));
                    }
                }
                let mut keys: Vec<JwtKey> = Vec::new();
                for file in files.get_ref() {
                    let path = self.path_at(file, files.span());
                    let bytes = match std::fs::read(&path) {
                        Ok(b) => {
                            self.note_filter_file(&b);
                            b
                        }
                        Err(e) => {
                            self.error(files.span(), format!("key file {file}: {e}"));
                            continue;
                        }
                    };
                    let shown = path.display().to_string();
                    let parsed = if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                        jwt_keys_from_pem(&shown, &bytes)
                    } else {
                        jwt_hmac_secret(&shown, &bytes).map(|k| vec![k])
                    };
                    match parsed {
                        Ok(found) => keys.extend(found),
                        Err(errors) => self.errors.extend(errors.0),
                    }
                }
                if keys.is_empty() {
                    return None;
                }
                Some((Arc::new(JwtKeySource::fixed(JwtKeySet::new(keys))), None))
            }
            (None, Some(url)) => {
                let tls = if url.get_ref().starts_with("https://") {
                    let roots = match &ca {
                        Some(ca) => self.roots(ca)?,
                        None => self.system_roots(t.span.clone()),
                    };
                    Some(Arc::new(
                        rustls::ClientConfig::builder_with_provider(crate::compile::tls::provider())
                            .with_safe_default_protocol_versions()
                            .ok()?
                            .with_root_certificates(roots)
                            .with_no_client_auth(),
                    ))
                } else {
                    if let Some(ca) = &ca {
                        self.error(ca.span(), "`jwks_ca` is for an https:// `jwks_url`");
                    }
                    None
                };
                let mut fetch = match JwksFetch::new(url.get_ref(), tls) {
                    Ok(f) => f,
                    Err(e) => {
                        self.error(url.span(), e);
                        return None;
                    }
                };
                if let Some(refresh) = refresh {
                    fetch.refresh = refresh;
                    fetch.min_refresh = fetch.min_refresh.min(refresh);
                }
                // Fetched through the internal client, from an upstream of Rampart's own.
                let roots = ca.as_ref().map(|c| c.get_ref().as_str());
                let tls = (fetch.tls.as_ref(), roots);
                fetch.upstream = Some(self.internal_upstream("jwks", &fetch.endpoint, tls, url.span(), live)?);
                Some((live.jwks_source(url.get_ref()), Some(fetch)))
            }
        }
    }
}
