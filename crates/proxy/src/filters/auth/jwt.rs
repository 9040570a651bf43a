//! JWT verification for the `jwt` filter.
//!
//! [`verify`] takes a token (compact JWS: `header.payload.signature`, base64url without padding),
//! the filter's settings and its current key set, and the time, and says either what the token
//! grants ([`VerifiedToken`]) or why it is refused ([`JwtRejection`]). In order:
//!
//! 1. length (at most [`JwtSettings::max_token_len`]) before anything is decoded;
//! 2. three base64url parts; a header that is a JSON object with a string `alg` and no `crit`
//!    (Rampart understands no extension);
//! 3. `alg` among the settings' algorithms (`none` never is);
//! 4. keys: by `kid`, of the token's algorithm family only ([`JwtKeySet::candidates`]), so an
//!    RSA or EC public key is never used as an HMAC secret;
//! 5. the signature (jsonwebtoken, over aws-lc-rs);
//! 6. claims: `exp` and `nbf` (NumericDate, with leeway), `iss`, `aud`, required claims.
//!
//! Nothing here logs; rejections carry no part of the token or of any key.
//!
//! Verification costs tens of microseconds for RSA and EC; the filter asks its
//! [`VerifiedTokenCache`](super::jwt_cache::VerifiedTokenCache) first.

use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rampart_model::filter::jwt::{JwtAlgorithm, JwtKeySet, JwtSettings, KeyChoiceError};
use serde_json::{Map, Value};

/// Why a token is refused. Each has a short reason for logs and metrics
/// ([`JwtRejection::reason`]); the filter answers 401 whichever it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JwtRejection {
    /// Longer than the settings allow (not decoded).
    #[error("too_long")]
    TooLong,
    /// Not three base64url parts, a header or payload that is not a JSON object, a header without
    /// `alg` or with `crit`, a claim of the wrong type.
    #[error("malformed")]
    Malformed,
    /// `alg` is not among the settings' algorithms (or not one Rampart knows, `none` included).
    #[error("algorithm_not_allowed")]
    AlgorithmNotAllowed,
    /// The token's `kid` names no key (nor are there keys without a `kid` to fall back on).
    #[error("unknown_key")]
    UnknownKey,
    /// No key (of that `kid`) goes with the token's algorithm: the sign of an algorithm
    /// confusion attempt, or of a misconfigured issuer.
    #[error("no_key_for_algorithm")]
    NoKeyForAlgorithm,
    /// The key set is empty (a JWKS not fetched yet).
    #[error("keys_unavailable")]
    KeysUnavailable,
    /// No candidate key verified the signature.
    #[error("bad_signature")]
    BadSignature,
    /// `exp` has passed (leeway included).
    #[error("expired")]
    Expired,
    /// `nbf` is still ahead (leeway included).
    #[error("not_yet_valid")]
    NotYetValid,
    #[error("wrong_issuer")]
    WrongIssuer,
    #[error("wrong_audience")]
    WrongAudience,
    /// A claim the settings need (`exp` when required, `iss` or `aud` when restricted, a required
    /// claim) is absent or null.
    #[error("missing_claim")]
    MissingClaim,
}

impl JwtRejection {
    /// The short reason: `malformed`, `bad_signature`, `expired`, ...
    pub fn reason(self) -> &'static str {
        match self {
            JwtRejection::TooLong => "too_long",
            JwtRejection::Malformed => "malformed",
            JwtRejection::AlgorithmNotAllowed => "algorithm_not_allowed",
            JwtRejection::UnknownKey => "unknown_key",
            JwtRejection::NoKeyForAlgorithm => "no_key_for_algorithm",
            JwtRejection::KeysUnavailable => "keys_unavailable",
            JwtRejection::BadSignature => "bad_signature",
            JwtRejection::Expired => "expired",
            JwtRejection::NotYetValid => "not_yet_valid",
            JwtRejection::WrongIssuer => "wrong_issuer",
            JwtRejection::WrongAudience => "wrong_audience",
            JwtRejection::MissingClaim => "missing_claim",
        }
    }
}

/// A claim's value as it may go upstream in a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimValue {
    /// The token does not have the claim (or has it as `null`).
    Absent,
    /// A string as it is; a number or boolean as JSON text; an array of strings joined with `,`.
    Text(Box<str>),
    /// The claim is there but cannot be a header value; says why (`an object`, `an array of
    /// other than strings`, `control characters`). The filter sends no header for it.
    NotForwardable(&'static str),
}

/// What a verified token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// `exp`, for the cache (which checks it again at every use).
    pub exp: Option<u64>,
    pub nbf: Option<u64>,
    /// `sub`, when it is a string.
    pub subject: Option<Box<str>>,
    /// One value per [`JwtSettings::forward`] entry, in the same order.
    pub claims: Box<[ClaimValue]>,
    /// The token's top-level claims whose values are strings, numbers or booleans (as text,
    /// like [`ClaimValue::Text`]), at most [`KEPT_CLAIMS`] of them, each at most
    /// [`KEPT_CLAIM_LEN`] bytes: what later filters (a `rate_limit` keyed on a claim) read
    /// through [`VerifiedToken::claim`].
    pub kept: Box<[(Box<str>, Box<str>)]>,
}

/// The most claims a verified token keeps for other filters.
pub const KEPT_CLAIMS: usize = 32;
/// The longest claim value kept for other filters.
pub const KEPT_CLAIM_LEN: usize = 512;

impl VerifiedToken {
    /// Whether the token is still within `exp` and past `nbf` at `now` (leeway included).
    pub fn is_current(&self, now: u64, leeway: u64) -> bool {
        self.exp.is_none_or(|exp| now < exp.saturating_add(leeway))
            && self.nbf.is_none_or(|nbf| now.saturating_add(leeway) >= nbf)
    }

    /// The value of top-level claim `name`, when it is a string, number or boolean the token
    /// keeps (see [`VerifiedToken::kept`]).
    pub fn claim(&self, name: &str) -> Option<&str> {
        self.kept.iter().find(|(n, _)| &**n == name).map(|(_, v)| &**v)
    }
}

/// Verifies `token` against `settings` and `keys` at `now` (seconds since the Unix epoch).
pub fn verify(token: &[u8], settings: &JwtSettings, keys: &JwtKeySet, now: u64) -> Result<VerifiedToken, JwtRejection> {
    if token.len() > settings.max_token_len {
        return Err(JwtRejection::TooLong);
    }
    let token = std::str::from_utf8(token).map_err(|_| JwtRejection::Malformed)?;
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtRejection::Malformed);
    };
    if signature_b64.is_empty() {
        return Err(JwtRejection::Malformed);
    }
    let header = json_object(header_b64)?;
    let alg = match header.get("alg") {
        Some(Value::String(alg)) => alg,
        _ => return Err(JwtRejection::Malformed),
    };
    if header.contains_key("crit") {
        return Err(JwtRejection::Malformed);
    }
    let alg = JwtAlgorithm::from_str(alg).map_err(|_| JwtRejection::AlgorithmNotAllowed)?;
    if !settings.algorithms.contains(&alg) {
        return Err(JwtRejection::AlgorithmNotAllowed);
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.as_str()),
        Some(_) => return Err(JwtRejection::Malformed),
    };
    // Both parts must decode before any key is tried.
    URL_SAFE_NO_PAD
        .decode(signature_b64)
        .map_err(|_| JwtRejection::Malformed)?;
    let payload = URL_SAFE_NO_PAD
        .decode(payload_b64)
        .map_err(|_| JwtRejection::Malformed)?;
    if keys.is_empty() {
        return Err(JwtRejection::KeysUnavailable);
    }
    let mut candidates = keys.candidates(kid, alg).map_err(|e| match e {
        KeyChoiceError::UnknownKid => JwtRejection::UnknownKey,
        KeyChoiceError::NoKeyForAlgorithm => JwtRejection::NoKeyForAlgorithm,
    })?;
    let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    let verified = candidates
        .any(|key| jsonwebtoken::crypto::verify(signature_b64, signed, key.decoding_key(), alg).unwrap_or(false));
    if !verified {
        return Err(JwtRejection::BadSignature);
    }
    let claims: Map<String, Value> = serde_json::from_slice(&payload).map_err(|_| JwtRejection::Malformed)?;
    check_claims(&claims, settings, now)
}

/// A base64url part holding a JSON object.
fn json_object(part: &str) -> Result<Map<String, Value>, JwtRejection> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| JwtRejection::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| JwtRejection::Malformed)
}

/// The claims of a token whose signature is good, checked against the settings.
fn check_claims(claims: &Map<String, Value>, settings: &JwtSettings, now: u64) -> Result<VerifiedToken, JwtRejection> {
    let present = |name: &str| claims.get(name).filter(|v| !v.is_null());
    let exp = numeric_date(present("exp"))?;
    let nbf = numeric_date(present("nbf"))?;
    match exp {
        None if settings.require_exp => return Err(JwtRejection::MissingClaim),
        Some(exp) if now >= exp.saturating_add(settings.leeway) => return Err(JwtRejection::Expired),
        _ => {}
    }
    if nbf.is_some_and(|nbf| now.saturating_add(settings.leeway) < nbf) {
        return Err(JwtRejection::NotYetValid);
    }
    if !settings.issuers.is_empty() {
        match present("iss") {
            None => return Err(JwtRejection::MissingClaim),
            Some(Value::String(iss)) if settings.issuers.iter().any(|i| i == iss) => {}
            Some(_) => return Err(JwtRejection::WrongIssuer),
        }
    }
    if !settings.audiences.is_empty() {
        let allowed = |aud: &Value| aud.as_str().is_some_and(|a| settings.audiences.iter().any(|s| s == a));
        match present("aud") {
            None => return Err(JwtRejection::MissingClaim),
            Some(Value::Array(list)) if list.iter().any(allowed) => {}
            Some(aud) if allowed(aud) => {}
            Some(_) => return Err(JwtRejection::WrongAudience),
        }
    }
    if settings.required_claims.iter().any(|name| present(name).is_none()) {
        return Err(JwtRejection::MissingClaim);
    }
    Ok(VerifiedToken {
        exp,
        nbf,
        subject: present("sub").and_then(Value::as_str).map(Box::from),
        claims: settings
            .forward
            .iter()
            .map(|f| claim_value(present(&f.claim)))
            .collect(),
        kept: claims
            .iter()
            .filter_map(|(name, value)| match claim_value(Some(value)) {
                ClaimValue::Text(text) if matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_)) => {
                    (text.len() <= KEPT_CLAIM_LEN).then(|| (Box::from(name.as_str()), text))
                }
                _ => None,
            })
            .take(KEPT_CLAIMS)
            .collect(),
    })
}

/// A NumericDate (seconds, possibly fractional; the fraction is dropped).
fn numeric_date(value: Option<&Value>) -> Result<Option<u64>, JwtRejection> {
    let Some(value) = value else { return Ok(None) };
    if let Some(secs) = value.as_u64() {
        return Ok(Some(secs));
    }
    match value.as_f64() {
        Some(secs) if secs.is_finite() && secs >= 0.0 => Ok(Some(secs as u64)),
        _ => Err(JwtRejection::Malformed),
    }
}

/// A claim as a header value.
fn claim_value(value: Option<&Value>) -> ClaimValue {
    let text = |s: String| {
        if s.chars().any(|c| c.is_control() && c != '\t') {
            ClaimValue::NotForwardable("control characters")
        } else {
            ClaimValue::Text(s.into_boxed_str())
        }
    };
    match value {
        None | Some(Value::Null) => ClaimValue::Absent,
        Some(Value::String(s)) => text(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => ClaimValue::Text(v.to_string().into_boxed_str()),
        Some(Value::Array(list)) => {
            let strings: Option<Vec<&str>> = list.iter().map(Value::as_str).collect();
            match strings {
                Some(strings) => text(strings.join(",")),
                None => ClaimValue::NotForwardable("an array of other than strings"),
            }
        }
        Some(Value::Object(_)) => ClaimValue::NotForwardable("an object"),
    }
}

#[cfg(test)]
mod tests;
