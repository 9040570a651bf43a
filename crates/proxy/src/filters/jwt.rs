//! `jwt`: requests must carry a valid JSON Web Token. The token is looked for in the configured
//! header (`Authorization: Bearer TOKEN` by default), query parameter or cookie; verified with
//! [`verify`] against the filter's key set (from files, or a JWKS URL the control plane fetches),
//! each worker remembering the tokens it verified ([`VerifiedTokenCache`]), so a client sending
//! the same token on every request costs one signature check, not one per request.
//!
//! A request without a token, or with one that fails, gets 401 with `WWW-Authenticate: Bearer`
//! (RFC 6750: `error="invalid_token"` for a token that failed) and a short reason in the body and
//! the access log (`jwt_expired`, `jwt_bad_signature`, ...); neither names any part of the token
//! or of a key. A token whose `kid` the key set does not know asks the JWKS fetcher for an early
//! refresh (the issuer may have rotated its keys). While a JWKS URL has given no key yet, tokens
//! get 503 (`jwt_keys_unavailable`): the fault is the gateway's, and the client may retry.
//!
//! A verified token's subject becomes the request's user (logged); the claims in `forward` go
//! upstream as headers, replacing whatever the client sent under those names (a claim the token
//! lacks removes the header, so it cannot be forged); the token itself is left in the request's
//! extensions (an `Rc<VerifiedToken>`, found as a `VerifiedToken`) for later filters (a
//! `rate_limit` keyed on a claim).

use std::time::{SystemTime, UNIX_EPOCH};

use rampart_model::filter::jwt::Jwt;

use super::auth::jwt::{verify, ClaimValue, JwtRejection};
use super::auth::jwt_cache::VerifiedTokenCache;
use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};

impl HttpFilter for Jwt {
    type State = ();
    /// The worker's verified-token cache, made at the filter's size on first use.
    type WorkerState = Option<VerifiedTokenCache>;

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let Some((token, in_header)) = find_token(self, req) else {
            return Verdict::Respond(self.refuse(None));
        };
        let now = unix_now();
        let leeway = self.settings.leeway;
        let generation = self.keys.generation();
        let outcome = cx.worker.builtin_state(self, |cache| {
            let cache = cache.get_or_insert_with(|| VerifiedTokenCache::new(self.cache_size));
            if let Some(hit) = cache.get(token, generation, now, leeway) {
                return Ok(hit.clone());
            }
            let keys = self.keys.current();
            match verify(token, &self.settings, &keys.keys, now) {
                Ok(verified) => Ok(cache.insert(token, keys.generation, verified, now, leeway)),
                Err(why) => Err(why),
            }
        });
        let verified = match outcome {
            Ok(verified) => verified,
            Err(why) => {
                if matches!(why, JwtRejection::UnknownKey | JwtRejection::KeysUnavailable) && self.jwks.is_some() {
                    self.keys.request_refresh();
                }
                return Verdict::Respond(self.refuse(Some(why)));
            }
        };
        for (forward, value) in self.settings.forward.iter().zip(verified.claims.iter()) {
            match value {
                ClaimValue::Text(text) => req.set_header(&forward.header, text),
                ClaimValue::Absent | ClaimValue::NotForwardable(_) => req.remove_header(&forward.header),
            };
        }
        if self.strip_token && in_header {
            if let Some(header) = &self.token.header {
                req.remove_header(header);
            }
        }
        cx.facts.user = verified.subject.as_deref().map(str::to_string);
        cx.facts.extensions.insert_shared(verified);
        Verdict::Continue
    }
}

/// The refusals of the filter, on its settings.
trait Refusal {
    fn refuse(&self, why: Option<JwtRejection>) -> Answer;
}

impl Refusal for Jwt {
    /// 401 with a `WWW-Authenticate` challenge (503 while no key set has been fetched).
    fn refuse(&self, why: Option<JwtRejection>) -> Answer {
        let Some(why) = why else {
            return Answer::plain(401, "jwt_missing", "a bearer token is required")
                .with_header("www-authenticate", format!("Bearer realm=\"{}\"", self.realm));
        };
        if why == JwtRejection::KeysUnavailable {
            return Answer::plain(503, log_reason(why), "token keys not available yet").with_header("retry-after", "1");
        }
        Answer::plain(401, log_reason(why), detail(why)).with_header(
            "www-authenticate",
            format!(
                "Bearer realm=\"{}\", error=\"invalid_token\", error_description=\"{}\"",
                self.realm,
                detail(why)
            ),
        )
    }
}

/// The token of a request, and whether it came from the header.
fn find_token<'a>(f: &Jwt, req: &RequestParts<'a>) -> Option<(&'a [u8], bool)> {
    if let Some(header) = &f.token.header {
        if let Some(value) = req.header(header) {
            let token = if header == "authorization" {
                bearer(value)
            } else {
                Some(bearer(value).unwrap_or(value))
            };
            if let Some(token) = token.map(trim).filter(|t| !t.is_empty()) {
                return Some((token, true));
            }
        }
    }
    if let Some(name) = &f.token.query {
        if let Some(token) = req.query_param(name).filter(|t| !t.is_empty()) {
            return Some((token, false));
        }
    }
    if let Some(name) = &f.token.cookie {
        if let Some(token) = req.cookie(name) {
            return Some((token, false));
        }
    }
    None
}

/// The credentials of a `Bearer` authorization value (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = trim(value);
    (value.len() > 7 && value[..7].eq_ignore_ascii_case(b"bearer ")).then(|| &value[7..])
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The access log's `error` for a refusal.
fn log_reason(why: JwtRejection) -> &'static str {
    match why {
        JwtRejection::TooLong => "jwt_too_long",
        JwtRejection::Malformed => "jwt_malformed",
        JwtRejection::AlgorithmNotAllowed => "jwt_algorithm_not_allowed",
        JwtRejection::UnknownKey => "jwt_unknown_key",
        JwtRejection::NoKeyForAlgorithm => "jwt_no_key_for_algorithm",
        JwtRejection::KeysUnavailable => "jwt_keys_unavailable",
        JwtRejection::BadSignature => "jwt_bad_signature",
        JwtRejection::Expired => "jwt_expired",
        JwtRejection::NotYetValid => "jwt_not_yet_valid",
        JwtRejection::WrongIssuer => "jwt_wrong_issuer",
        JwtRejection::WrongAudience => "jwt_wrong_audience",
        JwtRejection::MissingClaim => "jwt_missing_claim",
    }
}

/// What the client is told (the body and `error_description`): short, nothing of the token.
fn detail(why: JwtRejection) -> &'static str {
    match why {
        JwtRejection::TooLong => "token too long",
        JwtRejection::Malformed => "malformed token",
        JwtRejection::AlgorithmNotAllowed => "algorithm not allowed",
        JwtRejection::UnknownKey => "unknown key",
        JwtRejection::NoKeyForAlgorithm => "no key for the algorithm",
        JwtRejection::KeysUnavailable => "token keys not available yet",
        JwtRejection::BadSignature => "bad signature",
        JwtRejection::Expired => "token expired",
        JwtRejection::NotYetValid => "token not yet valid",
        JwtRejection::WrongIssuer => "wrong issuer",
        JwtRejection::WrongAudience => "wrong audience",
        JwtRejection::MissingClaim => "missing claim",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_credentials_are_found_case_insensitively() {
        assert_eq!(bearer(b"Bearer abc.def.ghi"), Some(&b"abc.def.ghi"[..]));
        assert_eq!(bearer(b"  bearer   abc ").map(trim), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic dXNlcjpwYXNz"), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer "), None);
    }

    #[test]
    fn every_rejection_has_a_distinct_log_reason() {
        let all = [
            JwtRejection::TooLong,
            JwtRejection::Malformed,
            JwtRejection::AlgorithmNotAllowed,
            JwtRejection::UnknownKey,
            JwtRejection::NoKeyForAlgorithm,
            JwtRejection::KeysUnavailable,
            JwtRejection::BadSignature,
            JwtRejection::Expired,
            JwtRejection::NotYetValid,
            JwtRejection::WrongIssuer,
            JwtRejection::WrongAudience,
            JwtRejection::MissingClaim,
        ];
        let mut reasons: Vec<_> = all.iter().map(|w| log_reason(*w)).collect();
        for (w, r) in all.iter().zip(&reasons) {
            assert_eq!(*r, format!("jwt_{}", w.reason()));
        }
        reasons.sort();
        reasons.dedup();
        assert_eq!(reasons.len(), all.len());
    }
}
