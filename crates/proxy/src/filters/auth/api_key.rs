//! `api_key`: a request carries one of the keys of a key file, in a header, a query parameter or
//! (when allowed) `Authorization: Bearer KEY`; the places are tried in that order and the first
//! one present decides.
//!
//! A key is looked up by its SHA-256 digest ([`ApiKeySet::lookup`](rampart_model::filter::auth::ApiKeySet::lookup)):
//! one hash and one map probe, no per-worker state, nothing slow. The key's name (from the file,
//! or `sha256:` and 8 hex digits of its digest) is what the access log records as `user`, and
//! what `forward_name_header` sends upstream; the key itself never reaches a log (a key read from
//! the query is blanked in the access log's `target`). With `hide_credentials`, the place the key
//! was read from is removed from the request sent upstream: the header, the query parameter (the
//! rest of the query kept as it was), or `Authorization`.

use std::borrow::Cow;

use rampart_model::filter::ApiKey;

use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};

/// The longest key read; a longer one is no key of any file.
const MAX_KEY_LEN: usize = 1024;

/// Where a request's key was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyPlace {
    Header,
    Query,
    Bearer,
}

impl HttpFilter for ApiKey {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let (key, place) = match presented_key(self, req) {
            Ok(found) => found,
            Err(reason) => return refuse(self, reason),
        };
        let Some(name) = self.keys.lookup(&key) else {
            return refuse(self, "api_key_unknown");
        };
        if self.hide_credentials {
            match place {
                KeyPlace::Header => {
                    if let Some(header) = &self.header {
                        req.remove_header(header);
                    }
                }
                KeyPlace::Query => {
                    if let Some(param) = &self.query {
                        let target = without_query_param(&req.target, param);
                        req.target = Cow::Owned(target);
                    }
                }
                KeyPlace::Bearer => {
                    req.remove_header("authorization");
                }
            }
        }
        if let Some(header) = &self.forward_name_header {
            req.set_header(header, name);
        }
        cx.facts.user = Some(name.to_string());
        Verdict::Continue
    }
}

/// A 401 with the filter's challenge; `reason` goes to the access log.
fn refuse(f: &ApiKey, reason: &'static str) -> Verdict {
    let detail = match reason {
        "api_key_missing" => "an API key is required",
        "api_key_malformed" => "malformed API key",
        _ => "unknown API key",
    };
    Verdict::Respond(Answer::plain(401, reason, detail).with_header("www-authenticate", f.challenge()))
}

/// The key a request presents and where: the filter's header, then its query parameter, then
/// `Authorization: Bearer` (when allowed); the first place present decides. The log reason when
/// there is none (`api_key_missing`) or it cannot be read (`api_key_malformed`: the header twice,
/// an empty or overlong key, bad percent-encoding).
pub(crate) fn presented_key(f: &ApiKey, req: &RequestParts<'_>) -> Result<(Vec<u8>, KeyPlace), &'static str> {
    if let Some(header) = &f.header {
        let mut values = req.header_values(header);
        if let Some(value) = values.next() {
            if values.next().is_some() {
                return Err("api_key_malformed");
            }
            return Ok((sane_key(value.trim_ascii())?.to_vec(), KeyPlace::Header));
        }
    }
    if let Some(param) = &f.query {
        if let Some(value) = req.query_param(param) {
            let decoded = percent_decode(value).ok_or("api_key_malformed")?;
            sane_key(&decoded)?;
            return Ok((decoded, KeyPlace::Query));
        }
    }
    if f.bearer {
        if let Some(value) = req.header("authorization") {
            let value = value.trim_ascii();
            if value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer ") {
                return Ok((sane_key(value[7..].trim_ascii())?.to_vec(), KeyPlace::Bearer));
            }
        }
    }
    Err("api_key_missing")
}

/// A key of a sane length.
fn sane_key(key: &[u8]) -> Result<&[u8], &'static str> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        Err("api_key_malformed")
    } else {
        Ok(key)
    }
}

/// `%XX` escapes decoded (a `+` stays a `+`); `None` for a broken escape.
fn percent_decode(value: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' {
            let hex = value.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(value[i]);
            i += 1;
        }
    }
    Some(out)
}

/// `target` (path and query) without the parameters called `name`; the `?` goes too when no
/// parameter is left.
pub(crate) fn without_query_param(target: &[u8], name: &str) -> Vec<u8> {
    let Some(q) = target.iter().position(|&b| b == b'?') else {
        return target.to_vec();
    };
    let mut out = target[..q].to_vec();
    let mut first = true;
    for pair in target[q + 1..].split(|&b| b == b'&') {
        let key = pair.split(|&b| b == b'=').next().unwrap_or_default();
        if key == name.as_bytes() {
            continue;
        }
        out.push(if first { b'?' } else { b'&' });
        out.extend_from_slice(pair);
        first = false;
    }
    out
}

#[cfg(test)]
mod tests;
