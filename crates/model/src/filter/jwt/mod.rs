//! The `jwt` filter's compiled settings and keys.
//!
//! - [`JwtSettings`]: which algorithms, issuers and audiences are accepted, clock leeway, required
//!   claims, and claims forwarded upstream as request headers.
//! - [`JwtKey`]: one public key (RSA, EC P-256/P-384, Ed25519) or HMAC secret, with the family of
//!   algorithms it may verify ([`JwtKeyKind`]) and, when its source says so, the one algorithm.
//!   A token's `alg` must be allowed by the settings *and* belong to the key: an RSA key never
//!   verifies an HS256 token (the classic confusion where the public key is used as the secret).
//! - [`JwtKeySet`]: the keys of one filter, chosen by `kid` (or, for a token without one, the first
//!   [`MAX_KEYS_TRIED`] keys of its algorithm; keys without a `kid` stand in for unknown ones).
//!   Built from a JWKS document ([`JwtKeySet::from_jwks`], in `jwks`), or by the config from PEM
//!   files and secrets.
//! - [`JwtKeySource`]: the key set as workers see it, swapped in by a JWKS fetcher (in `source`).
//! - [`Jwt`]: the filter as compiled: settings, key source, where the token is found.

use std::fmt;
use std::sync::Arc;

pub use jsonwebtoken::Algorithm as JwtAlgorithm;
use jsonwebtoken::DecodingKey;

use crate::defaults;

mod jwks;
mod source;
#[cfg(test)]
mod tests;

pub use jwks::JwksError;
pub use source::{JwksEndpoint, JwksFetch, JwtKeySource, RefreshWaker, VersionedKeySet};

/// `jwt`: the filter as compiled.
#[derive(Debug)]
pub struct Jwt {
    pub settings: JwtSettings,
    /// The keys tokens are verified with (fixed, or refreshed from `jwks`).
    pub keys: Arc<JwtKeySource>,
    /// The JWKS document the keys come from, fetched by the control plane; `None` for keys from
    /// files.
    pub jwks: Option<JwksFetch>,
    /// Where a request carries its token.
    pub token: TokenLocation,
    /// Remove the token from the request sent upstream.
    pub strip_token: bool,
    /// The realm named in `WWW-Authenticate`.
    pub realm: String,
    /// Verified tokens each worker remembers.
    pub cache_size: usize,
}

/// Where a request's token is looked for, in this order: the header, the query parameter, the
/// cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenLocation {
    /// A header, lower-case. `authorization` holds `Bearer TOKEN`; any other header holds the
    /// token itself (a `Bearer ` before it is allowed).
    pub header: Option<String>,
    /// A query parameter.
    pub query: Option<String>,
    /// A cookie.
    pub cookie: Option<String>,
}

impl Default for TokenLocation {
    /// `Authorization: Bearer TOKEN`.
    fn default() -> Self {
        TokenLocation {
            header: Some("authorization".into()),
            query: None,
            cookie: None,
        }
    }
}

/// The most keys a token without a `kid` is tried against.
pub const MAX_KEYS_TRIED: usize = 4;

/// What the `jwt` filter accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// The `alg` values a token may have (never empty).
    pub algorithms: Vec<JwtAlgorithm>,
    /// `iss` must be one of these; empty: any issuer, or none.
    pub issuers: Vec<String>,
    /// `aud` (a string or an array) must name one of these; empty: any audience, or none.
    pub audiences: Vec<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway: u64,
    /// Whether a token without `exp` is refused.
    pub require_exp: bool,
    /// Claims a token must have (any value).
    pub required_claims: Vec<String>,
    /// Claims sent upstream as request headers.
    pub forward: Vec<ClaimHeader>,
    /// Longest token read, in bytes.
    pub max_token_len: usize,
}

impl JwtSettings {
    /// Settings for `algorithms` with every other setting at its default: any issuer and
    /// audience, `exp` required, the default leeway and token length, nothing forwarded.
    pub fn new(algorithms: Vec<JwtAlgorithm>) -> Self {
        JwtSettings {
            algorithms,
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: defaults::JWT_LEEWAY.as_secs(),
            require_exp: true,
            required_claims: Vec::new(),
            forward: Vec::new(),
            max_token_len: defaults::JWT_MAX_TOKEN_LEN,
        }
    }
}

/// One claim forwarded upstream: its value (a string as it is, a number or boolean as JSON text,
/// an array of strings joined with commas) replaces any `header` the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimHeader {
    pub claim: String,
    /// Lower-case header name.
    pub header: String,
}

/// The kind of a key, which fixes the algorithms it can verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtKeyKind {
    /// A shared secret: HS256, HS384, HS512.
    Hmac,
    /// RS256, RS384, RS512, PS256, PS384, PS512.
    Rsa,
    /// ES256.
    EcP256,
    /// ES384.
    EcP384,
    /// EdDSA.
    Ed25519,
}

impl JwtKeyKind {
    /// The algorithms a key of this kind verifies.
    pub fn algorithms(self) -> &'static [JwtAlgorithm] {
        use JwtAlgorithm::*;
        match self {
            JwtKeyKind::Hmac => &[HS256, HS384, HS512],
            JwtKeyKind::Rsa => &[RS256, RS384, RS512, PS256, PS384, PS512],
            JwtKeyKind::EcP256 => &[ES256],
            JwtKeyKind::EcP384 => &[ES384],
            JwtKeyKind::Ed25519 => &[EdDSA],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JwtKeyKind::Hmac => "HMAC",
            JwtKeyKind::Rsa => "RSA",
            JwtKeyKind::EcP256 => "EC P-256",
            JwtKeyKind::EcP384 => "EC P-384",
            JwtKeyKind::Ed25519 => "Ed25519",
        }
    }
}

/// Why key material cannot make a [`JwtKey`]. No message carries key bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtKeyError {
    #[error("an HMAC secret needs at least 32 bytes (this one has {0})")]
    ShortSecret(usize),
    #[error("an RSA key needs at least 2048 bits and at most 8192 (this one has {0})")]
    RsaSize(usize),
    #[error("an RSA key needs a public exponent")]
    NoExponent,
    #[error("an {kind} public key is {expected} bytes (this one has {len})")]
    Length {
        kind: &'static str,
        expected: usize,
        len: usize,
    },
    #[error("an EC public key must be an uncompressed point (starting with 0x04)")]
    CompressedPoint,
    #[error("algorithm {alg:?} does not go with an {kind} key")]
    AlgorithmMismatch { alg: JwtAlgorithm, kind: &'static str },
}

/// One verification key.
#[derive(Clone)]
pub struct JwtKey {
    kid: Option<Box<str>>,
    kind: JwtKeyKind,
    /// The one algorithm this key is for, when its source names one (JWKS `alg`).
    algorithm: Option<JwtAlgorithm>,
    key: DecodingKey,
}

impl JwtKey {
    /// An HMAC secret (at least 32 bytes, as RFC 7518 asks of HS256 keys).
    pub fn hmac(secret: &[u8]) -> Result<Self, JwtKeyError> {
        if secret.len() < 32 {
            return Err(JwtKeyError::ShortSecret(secret.len()));
        }
        Ok(Self::of(JwtKeyKind::Hmac, DecodingKey::from_secret(secret)))
    }

    /// An RSA public key from its modulus and exponent (big-endian; leading zeros allowed).
    pub fn rsa(modulus: &[u8], exponent: &[u8]) -> Result<Self, JwtKeyError> {
        let n = strip_zeros(modulus);
        let e = strip_zeros(exponent);
        let bits = match n.first() {
            Some(top) => n.len() * 8 - top.leading_zeros() as usize,
            None => 0,
        };
        if !(2048..=8192).contains(&bits) {
            return Err(JwtKeyError::RsaSize(bits));
        }
        if e.is_empty() {
            return Err(JwtKeyError::NoExponent);
        }
        Ok(Self::of(JwtKeyKind::Rsa, DecodingKey::from_rsa_raw_components(n, e)))
    }

    /// An EC public key (`kind` is [`JwtKeyKind::EcP256`] or [`JwtKeyKind::EcP384`]) from its
    /// uncompressed point: `0x04`, x, y.
    pub fn ec(kind: JwtKeyKind, point: &[u8]) -> Result<Self, JwtKeyError> {
        let expected = match kind {
            JwtKeyKind::EcP256 => 65,
            JwtKeyKind::EcP384 => 97,
            _ => {
                return Err(JwtKeyError::AlgorithmMismatch {
                    alg: JwtAlgorithm::ES256,
                    kind: kind.name(),
                })
            }
        };
        if point.first().is_some_and(|b| *b != 4) {
            return Err(JwtKeyError::CompressedPoint);
        }
        if point.len() != expected {
            return Err(JwtKeyError::Length {
                kind: kind.name(),
                expected,
                len: point.len(),
            });
        }
        Ok(Self::of(kind, DecodingKey::from_ec_der(point)))
    }

    /// An Ed25519 public key (32 bytes).
    pub fn ed25519(public: &[u8]) -> Result<Self, JwtKeyError> {
        if public.len() != 32 {
            return Err(JwtKeyError::Length {
                kind: "Ed25519",
                expected: 32,
                len: public.len(),
            });
        }
        Ok(Self::of(JwtKeyKind::Ed25519, DecodingKey::from_ed_der(public)))
    }

    fn of(kind: JwtKeyKind, key: DecodingKey) -> Self {
        JwtKey {
            kid: None,
            kind,
            algorithm: None,
            key,
        }
    }

    /// The key under the id tokens name it by.
    pub fn with_kid(mut self, kid: &str) -> Self {
        self.kid = Some(kid.into());
        self
    }

    /// The key restricted to one algorithm of its kind.
    pub fn with_algorithm(mut self, alg: JwtAlgorithm) -> Result<Self, JwtKeyError> {
        if !self.kind.algorithms().contains(&alg) {
            return Err(JwtKeyError::AlgorithmMismatch {
                alg,
                kind: self.kind.name(),
            });
        }
        self.algorithm = Some(alg);
        Ok(self)
    }

    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    pub fn kind(&self) -> JwtKeyKind {
        self.kind
    }

    pub fn algorithm(&self) -> Option<JwtAlgorithm> {
        self.algorithm
    }

    /// Whether this key may verify a token signed with `alg`.
    pub fn accepts(&self, alg: JwtAlgorithm) -> bool {
        self.kind.algorithms().contains(&alg) && self.algorithm.is_none_or(|a| a == alg)
    }

    /// The key in jsonwebtoken's form.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.key
    }
}

/// Says the id and kind only.
impl fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtKey")
            .field("kid", &self.kid)
            .field("kind", &self.kind)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

/// Why no key of a set can verify a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChoiceError {
    /// The token's `kid` names no key of the set.
    UnknownKid,
    /// No key (of that `kid`, if the token names one) goes with the token's algorithm.
    NoKeyForAlgorithm,
}

/// The keys of one `jwt` filter.
#[derive(Debug, Clone, Default)]
pub struct JwtKeySet {
    keys: Vec<JwtKey>,
    /// Keys of a JWKS document that were left out, and why (for the log).
    skipped: Vec<String>,
}

impl JwtKeySet {
    pub fn new(keys: Vec<JwtKey>) -> Self {
        JwtKeySet {
            keys,
            skipped: Vec::new(),
        }
    }

    pub fn keys(&self) -> &[JwtKey] {
        &self.keys
    }

    /// One line per key of the source document that was left out (unsupported kind or curve,
    /// `use` other than `sig`, ...); it names the key by position and `kid`, never by content.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys to try, in order, for a token signed with `alg` that names `kid` (or none), at
    /// most [`MAX_KEYS_TRIED`]:
    ///
    /// - a token naming a `kid` that keys of the set carry: those keys that accept `alg`;
    /// - a token naming another `kid`, or none: the keys without a `kid` (PEM files and secrets
    ///   have none) that accept `alg`, or for a token without a `kid` any key that accepts it.
    pub fn candidates<'a>(
        &'a self,
        kid: Option<&'a str>,
        alg: JwtAlgorithm,
    ) -> Result<impl Iterator<Item = &'a JwtKey> + 'a, KeyChoiceError> {
        let known = kid.is_some_and(|id| self.keys.iter().any(|k| k.kid() == Some(id)));
        let named = move |k: &JwtKey| match kid {
            Some(id) if known => k.kid() == Some(id),
            Some(_) => k.kid().is_none(),
            None => true,
        };
        if kid.is_some() && !self.keys.iter().any(named) {
            return Err(KeyChoiceError::UnknownKid);
        }
        let usable = move |k: &&JwtKey| named(k) && k.accepts(alg);
        if !self.keys.iter().any(|k| usable(&k)) {
            return Err(KeyChoiceError::NoKeyForAlgorithm);
        }
        Ok(self.keys.iter().filter(usable).take(MAX_KEYS_TRIED))
    }
}
