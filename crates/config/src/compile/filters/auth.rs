//! The auth filters' keys: `basic_auth`, `api_key`, `forward_auth`.
//!
//! Files (`users_file`, `keys_file`, `ca`) are named relative to the directory of the config file
//! they are written in and read on every load, so a reload picks up a file changed in place. A file that cannot be read
//! is an error at the key that names it; a bad line of it is an error at its own
//! `FILE:LINE:COL` (see [`super::auth_files`]).

use rampart_model::defaults;
use rampart_model::filter::auth::ApiKeySet;
use rampart_model::filter::endpoint::HttpEndpoint;
use rampart_model::filter::forward_auth::is_hop_by_hop;
use rampart_model::filter::{ApiKey, BasicAuth, Filter, ForwardAuth};
use toml::Spanned;

use super::auth_files::{parse_api_keys, parse_htpasswd};
use super::basic::is_token;
use super::FilterTable;
use crate::compile::{Checker, LiveState};
use crate::error::ConfigErrors;

/// The largest `forward_auth` denial body that may be configured.
const MAX_DENIAL_BODY: u64 = 16 << 20;

impl Checker<'_> {
    pub(super) fn basic_auth_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        // Every key is read before any error returns, so that none is taken for an unknown one.
        let file = self.filter_string(t, "users_file");
        let realm = match self.filter_string(t, "realm") {
            Some(r) if r.get_ref().chars().all(|c| c == ' ' || c.is_ascii_graphic()) && !r.get_ref().is_empty() => {
                Some(r.into_inner())
            }
            Some(r) => {
                self.error(r.span(), "`realm` is printable ASCII (it goes into a header)");
                None
            }
            None => Some(defaults::BASIC_AUTH_REALM.to_string()),
        };
        let forward_user_header = self.header_name(t, "forward_user_header");
        let hide_credentials = self.filter_bool(t, "hide_credentials", false);
        let max_pending_checks = self.filter_int(
            t,
            "max_pending_checks",
            defaults::BASIC_AUTH_MAX_PENDING_CHECKS as i64,
            1,
            4096,
        ) as usize;
        let file = self.filter_required(t, "users_file", file)?;
        let users = self.auth_file(&file, parse_htpasswd)?;
        Some(Filter::BasicAuth(BasicAuth {
            users,
            challenge: BasicAuth::challenge_for(&realm?),
            forward_user_header: forward_user_header?,
            hide_credentials,
            max_pending_checks,
        }))
    }

    pub(super) fn api_key_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let file = self.filter_string(t, "keys_file");
        let header = self.header_name(t, "header");
        let query = match self.filter_string(t, "query") {
            Some(q)
                if !q.get_ref().is_empty()
                    && q.get_ref()
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && !b"&=#?%+".contains(&b)) =>
            {
                Some(Some(q.into_inner()))
            }
            Some(q) => {
                self.error(q.span(), format!("`{}` is not a query parameter name", q.get_ref()));
                None
            }
            None => Some(None),
        };
        let bearer = self.filter_bool(t, "bearer", false);
        let hide_credentials = self.filter_bool(t, "hide_credentials", true);
        let forward_name_header = self.header_name(t, "forward_name_header");
        let file = self.filter_required(t, "keys_file", file)?;
        let keys: ApiKeySet = self.auth_file(&file, parse_api_keys)?;
        let (mut header, query) = (header?, query?);
        // The default place, when the table names none.
        if header.is_none() && query.is_none() && !bearer {
            header = Some(defaults::API_KEY_HEADER.to_string());
        }
        Some(Filter::ApiKey(ApiKey {
            keys,
            header,
            query,
            bearer,
            hide_credentials,
            forward_name_header: forward_name_header?,
        }))
    }

    pub(super) fn forward_auth_filter(&mut self, t: &mut FilterTable<'_>, live: &mut LiveState) -> Option<Filter> {
        let url = self.filter_string(t, "url");
        let timeout = self
            .filter_duration(t, "timeout")
            .unwrap_or(defaults::FORWARD_AUTH_TIMEOUT);
        let request_headers = self.header_list(t, "request_headers", false);
        let response_headers = self.header_list(t, "response_headers", true);
        let user_header = self.header_name(t, "user_header");
        let max_body = self
            .filter_size(t, "max_body")
            .map_or(defaults::FORWARD_AUTH_MAX_BODY as u64, |n| n.min(MAX_DENIAL_BODY)) as usize;
        let ca = self.filter_string(t, "ca");
        let url = self.filter_required(t, "url", url)?;
        let endpoint = match HttpEndpoint::parse(url.get_ref()) {
            Ok(e) => e,
            Err(e) => {
                self.error(url.span(), e);
                return None;
            }
        };
        let tls = self.endpoint_tls(&endpoint, ca.as_ref(), ("url", url.span()))?;
        let roots = ca.as_ref().map(|c| c.get_ref().as_str());
        let upstream = self.internal_upstream("forward_auth", &endpoint, (tls.as_ref(), roots), url.span(), live)?;
        Some(Filter::ForwardAuth(ForwardAuth {
            endpoint,
            tls,
            upstream,
            timeout,
            request_headers: request_headers?.map(Spanned::into_inner),
            response_headers: response_headers?.map(Spanned::into_inner).unwrap_or_default(),
            user_header: user_header?,
            max_body,
        }))
    }

    /// A header name (lower-cased); `Some(None)` when the key is absent, `None` after an error.
    fn header_name(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<Option<String>> {
        match self.filter_string(t, key) {
            None => Some(None),
            Some(h) if is_token(h.get_ref()) => Some(Some(h.get_ref().to_ascii_lowercase())),
            Some(h) => {
                self.error(h.span(), format!("`{}` is not a header name", h.get_ref()));
                None
            }
        }
    }

    /// A list of header names (lower-cased); `Some(None)` when the key is absent, `None` after an
    /// error. `copied`: the fields are set on the request sent upstream, so hop-by-hop fields
    /// and the ones that frame or route a request are refused.
    fn header_list(
        &mut self,
        t: &mut FilterTable<'_>,
        key: &str,
        copied: bool,
    ) -> Option<Option<Spanned<Vec<String>>>> {
        let Some(list) = self.filter_strings(t, key) else {
            return Some(None);
        };
        for name in list.get_ref() {
            let refused = copied
                && (is_hop_by_hop(name.as_bytes())
                    || ["host", "content-length", "expect"]
                        .iter()
                        .any(|h| name.eq_ignore_ascii_case(h)));
            if !is_token(name) || refused {
                let why = if refused {
                    "cannot be copied onto a request"
                } else {
                    "is not a header name"
                };
                self.error(list.span(), format!("`{key}`: `{name}` {why}"));
                return None;
            }
        }
        let span = list.span();
        let names = list.into_inner().iter().map(|n| n.to_ascii_lowercase()).collect();
        Some(Some(Spanned::new(span, names)))
    }

    /// Reads and parses a credential file named at `file`: an unreadable file is an error at
    /// the key, a bad line an error at its own place in the file.
    fn auth_file<T>(&mut self, file: &Spanned<String>, parse: fn(&str, &str) -> Result<T, ConfigErrors>) -> Option<T> {
        let path = self.path(file);
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => {
                self.note_filter_file(text.as_bytes());
                text
            }
            Err(e) => {
                self.error(file.span(), format!("{}: {e}", file.get_ref()));
                return None;
            }
        };
        match parse(&shown, &text) {
            Ok(parsed) => Some(parsed),
            Err(errors) => {
                self.errors.extend(errors.0);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
