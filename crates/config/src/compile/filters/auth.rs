//! The auth filters' keys: `basic_auth`, `api_key`.
//!
//! Files (`users_file`, `keys_file`) are named relative to the config file's directory and
//! read on every load, so a reload picks up a file changed in place. A file that cannot be read
//! is an error at the key that names it; a bad line of it is an error at its own
//! `FILE:LINE:COL` (see [`super::auth_files`]).

use rampart_model::defaults;
use rampart_model::filter::auth::ApiKeySet;
use rampart_model::filter::{ApiKey, BasicAuth, Filter, FilterId};
use toml::Spanned;

use super::auth_files::{parse_api_keys, parse_htpasswd};
use super::basic::is_token;
use super::FilterTable;
use crate::compile::Checker;
use crate::error::ConfigErrors;

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
            id: FilterId::new(),
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

    /// Reads and parses a credential file named at `file`: an unreadable file is an error at
    /// the key, a bad line an error at its own place in the file.
    fn auth_file<T>(&mut self, file: &Spanned<String>, parse: fn(&str, &str) -> Result<T, ConfigErrors>) -> Option<T> {
        let path = self.path(file.get_ref());
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
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
