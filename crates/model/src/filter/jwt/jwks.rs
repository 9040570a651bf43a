//! JWKS documents (RFC 7517) into key sets. A document comes from an identity provider over the
//! network and is parsed again at every refresh, so this is runtime code, not config loading.
//!
//! Keys are read leniently, one by one: a key of a kind Rampart does not verify (`RSA-OAEP`
//! encryption keys, P-521, Ed448, ...) or meant for something else (`use` other than `sig`,
//! `key_ops` without `verify`) is left out with a note in [`JwtKeySet::skipped`], and the set
//! fails only when no usable key remains. Notes name a key by its position and `kid` (escaped and
//! cut short: the document is not trusted text), never by its content.

use std::str::FromStr;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use serde_json::{Map, Value};

use super::{JwtAlgorithm, JwtKey, JwtKeyKind, JwtKeySet};

/// Why a JWKS document gave no key set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Not JSON (serde_json's message: a position and what was expected, no content).
    #[error("not a JSON document: {0}")]
    NotJson(String),
    #[error("no `keys` array")]
    NoKeys,
    /// Every key was left out; the notes say why.
    #[error("no usable key ({})", .0.join("; "))]
    NoUsableKey(Vec<String>),
}

/// base64url as JWK writes it: no padding, though padding is tolerated.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl JwtKeySet {
    /// The signature keys of a JWKS document (`{"keys": [...]}`).
    pub fn from_jwks(document: &[u8]) -> Result<JwtKeySet, JwksError> {
        let doc: Value = serde_json::from_slice(document).map_err(|e| JwksError::NotJson(e.to_string()))?;
        let Some(list) = doc.get("keys").and_then(Value::as_array) else {
            return Err(JwksError::NoKeys);
        };
        let mut set = JwtKeySet::default();
        for (i, entry) in list.iter().enumerate() {
            let Some(fields) = entry.as_object() else {
                set.skipped.push(format!("key {}: not a JSON object", i + 1));
                continue;
            };
            match key(fields) {
                Ok(k) => set.keys.push(k),
                Err(why) => set.skipped.push(format!("key {}{}: {why}", i + 1, kid_note(fields))),
            }
        }
        if set.keys.is_empty() {
            return Err(JwksError::NoUsableKey(set.skipped));
        }
        Ok(set)
    }
}

/// ` (kid "...")`, escaped and at most 40 characters, or nothing.
fn kid_note(fields: &Map<String, Value>) -> String {
    match fields.get("kid").and_then(Value::as_str) {
        Some(kid) => {
            let short: String = kid.chars().take(40).collect();
            let cut = if short.len() < kid.len() { "..." } else { "" };
            format!(" (kid {short:?}{cut})")
        }
        None => String::new(),
    }
}

/// One JWK, or why it is left out.
fn key(fields: &Map<String, Value>) -> Result<JwtKey, String> {
    let text = |name: &str| -> Result<Option<&str>, String> {
        match fields.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("`{name}` is not a string")),
        }
    };
    let bytes = |name: &str| -> Result<Vec<u8>, String> {
        let s = text(name)?.ok_or_else(|| format!("no `{name}`"))?;
        BASE64URL.decode(s).map_err(|_| format!("`{name}` is not base64url"))
    };
    if let Some(usage) = text("use")? {
        if usage != "sig" {
            return Err(format!("`use` is {:?}, not \"sig\"", short(usage)));
        }
    }
    if let Some(ops) = fields.get("key_ops") {
        let verifies = ops
            .as_array()
            .is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some("verify")));
        if !verifies {
            return Err("`key_ops` does not include \"verify\"".into());
        }
    }
    let kty = text("kty")?.ok_or("no `kty`")?;
    let key = match kty {
        "RSA" => JwtKey::rsa(&bytes("n")?, &bytes("e")?),
        "EC" => {
            let kind = match text("crv")? {
                Some("P-256") => JwtKeyKind::EcP256,
                Some("P-384") => JwtKeyKind::EcP384,
                Some(other) => return Err(format!("EC curve {:?} is not supported", short(other))),
                None => return Err("no `crv`".into()),
            };
            let mut point = vec![4];
            point.extend_from_slice(&bytes("x")?);
            point.extend_from_slice(&bytes("y")?);
            JwtKey::ec(kind, &point)
        }
        "OKP" => match text("crv")? {
            Some("Ed25519") => JwtKey::ed25519(&bytes("x")?),
            Some(other) => return Err(format!("OKP curve {:?} is not supported", short(other))),
            None => return Err("no `crv`".into()),
        },
        "oct" => JwtKey::hmac(&bytes("k")?),
        other => return Err(format!("kty {:?} is not supported", short(other))),
    };
    let mut key = key.map_err(|e| e.to_string())?;
    if let Some(alg) = text("alg")? {
        let alg = JwtAlgorithm::from_str(alg).map_err(|_| format!("alg {:?} is not supported", short(alg)))?;
        key = key.with_algorithm(alg).map_err(|e| e.to_string())?;
    }
    if let Some(kid) = text("kid")? {
        key = key.with_kid(kid);
    }
    Ok(key)
}

/// At most 20 characters of an untrusted string, for a note.
fn short(s: &str) -> String {
    s.chars().take(20).collect()
}
