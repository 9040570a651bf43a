//! The files of the `basic_auth` and `api_key` filters, read at config load.
//!
//! **htpasswd** (`user:hash` per line, `#` comments, blank lines): only bcrypt (`$2y$`, `$2b$`,
//! `$2a$`) and argon2 (`$argon2id$`, `$argon2i$`, `$argon2d$`) hashes. SHA-1 (`{SHA}`), MD5
//! (`$apr1$`), crypt and plain text are refused with the line that has them: they are fast to
//! brute-force. Each hash is parsed here (bcrypt cost and salt, argon2 PHC string and parameters)
//! so that a bad line fails the load instead of every request; a user listed twice is an error.
//!
//! **API keys** (one per line, `KEY` or `NAME KEY` separated by whitespace, `#` comments):
//! keys are kept only as SHA-256 digests. A key listed without a name is logged (and forwarded)
//! under [`ApiKeySet::label`] (`sha256:` and 8 hex digits of its digest), never by its text. A key
//! listed twice, or shorter than [`MIN_API_KEY_LEN`] characters (an empty key among them), is an
//! error. Names and keys are visible ASCII: they travel in HTTP fields.
//!
//! Every error is a [`ConfigError`] at a 1-based line and column (in characters); no message
//! quotes a key or a hash.

use rampart_model::filter::auth::{ApiKeySet, PasswordFile, PasswordHash};

use crate::error::{ConfigError, ConfigErrors};

/// Shortest API key accepted: anything shorter is guessable.
pub(crate) const MIN_API_KEY_LEN: usize = 8;

/// Argon2 memory cost (KiB) above which a hash is refused: every check of it would allocate
/// that much on the data plane.
pub(crate) const MAX_ARGON2_MEMORY_KIB: u32 = 256 * 1024;

/// What to say instead of a weak hash.
const USE_INSTEAD: &str = "use bcrypt: htpasswd -B, or argon2";

/// Lines of a text file with their 1-based numbers, content (line end and surrounding blanks
/// removed) and the 1-based column the content starts at; blank and `#` lines left out.
fn entries(src: &str) -> impl Iterator<Item = (usize, usize, &str)> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    src.lines().enumerate().filter_map(|(i, line)| {
        let entry = line.trim();
        if entry.is_empty() || entry.starts_with('#') {
            return None;
        }
        let col = line[..line.len() - line.trim_start().len()].chars().count() + 1;
        Some((i + 1, col, entry))
    })
}

fn error(file: &str, line: usize, col: usize, message: String) -> ConfigError {
    ConfigError {
        file: file.to_string(),
        line,
        col,
        message,
    }
}

/// Parses an htpasswd file's text; `file` names it in errors.
pub(crate) fn parse_htpasswd(file: &str, src: &str) -> Result<PasswordFile, ConfigErrors> {
    let mut users = PasswordFile::default();
    let mut first_line: Vec<(String, usize)> = Vec::new();
    let mut errors = Vec::new();
    for (line, col, entry) in entries(src) {
        let Some((user, hash)) = entry.split_once(':') else {
            errors.push(error(file, line, col, "expected user:hash".into()));
            continue;
        };
        let hash_col = col + user.chars().count() + 1 + (hash.len() - hash.trim_start().len());
        let (user, hash) = (user.trim_end(), hash.trim());
        if user.is_empty() {
            errors.push(error(file, line, col, "no user name before `:`".into()));
            continue;
        }
        if user.chars().any(char::is_control) {
            errors.push(error(
                file,
                line,
                col,
                "a user name cannot hold control characters".into(),
            ));
            continue;
        }
        let parsed = match password_hash(user, hash) {
            Ok(parsed) => parsed,
            Err(why) => {
                errors.push(error(file, line, hash_col, why));
                continue;
            }
        };
        if !users.insert(user, parsed) {
            let first = first_line.iter().find(|(u, _)| u == user).map_or(0, |(_, l)| *l);
            errors.push(error(
                file,
                line,
                col,
                format!("user {user:?} is already listed on line {first}"),
            ));
            continue;
        }
        first_line.push((user.to_string(), line));
    }
    if errors.is_empty() && users.is_empty() {
        errors.push(error(file, 1, 1, "no users: add user:hash lines (htpasswd -B)".into()));
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// `user`'s hash, of a kind Rampart verifies and checked for form; or what is wrong with it.
fn password_hash(user: &str, hash: &str) -> Result<PasswordHash, String> {
    if hash.is_empty() {
        return Err(format!("no password hash for user {user:?}"));
    }
    if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
        let parts: bcrypt::HashParts = hash
            .parse()
            .map_err(|e| format!("malformed bcrypt hash for user {user:?}: {e}"))?;
        let cost = parts.get_cost();
        if !(4..=31).contains(&cost) {
            return Err(format!("bcrypt hash for user {user:?}: cost {cost} is outside 4-31"));
        }
        return Ok(PasswordHash::Bcrypt(hash.to_string()));
    }
    if ["$argon2id$", "$argon2i$", "$argon2d$"]
        .iter()
        .any(|p| hash.starts_with(p))
    {
        check_argon2(hash).map_err(|e| format!("malformed argon2 hash for user {user:?}: {e}"))?;
        return Ok(PasswordHash::Argon2(hash.to_string()));
    }
    let kind = if hash.starts_with("{SHA}") {
        "SHA-1 ({SHA})"
    } else if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
        "MD5"
    } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
        "SHA-crypt"
    } else if hash.starts_with("$2x$") {
        "bcrypt $2x$ (the variant with the sign-extension bug)"
    } else if hash.starts_with('$') {
        "crypt"
    } else if hash.len() == 13
        && hash
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    {
        "DES crypt or plain text"
    } else {
        "plain text"
    };
    Err(format!("unsupported hash for user {user:?}: {kind} ({USE_INSTEAD})"))
}

/// Parses an argon2 PHC string the way verification will, and bounds its memory cost.
fn check_argon2(hash: &str) -> Result<(), String> {
    let parsed = argon2::PasswordHash::new(hash).map_err(|e| e.to_string())?;
    argon2::Algorithm::try_from(parsed.algorithm).map_err(|e| e.to_string())?;
    if let Some(version) = parsed.version {
        argon2::Version::try_from(version).map_err(|e| e.to_string())?;
    }
    let params = argon2::Params::try_from(&parsed).map_err(|e| e.to_string())?;
    if parsed.salt.is_none() || parsed.hash.is_none() {
        return Err("no salt or no hash".into());
    }
    if params.m_cost() > MAX_ARGON2_MEMORY_KIB {
        return Err(format!(
            "memory cost m={} KiB is above {MAX_ARGON2_MEMORY_KIB}, too much for a check per login",
            params.m_cost()
        ));
    }
    Ok(())
}

/// Parses an API key file's text; `file` names it in errors.
pub(crate) fn parse_api_keys(file: &str, src: &str) -> Result<ApiKeySet, ConfigErrors> {
    let mut keys = ApiKeySet::default();
    let mut first_line: Vec<(rampart_model::filter::auth::ApiKeyDigest, usize)> = Vec::new();
    let mut errors = Vec::new();
    for (line, col, entry) in entries(src) {
        // A `#` after a blank starts a comment.
        let entry = entry
            .find(" #")
            .or_else(|| entry.find("\t#"))
            .map_or(entry, |at| entry[..at].trim_end());
        let fields: Vec<(usize, &str)> = entry
            .split_whitespace()
            .map(|f| {
                (
                    col + entry[..f.as_ptr() as usize - entry.as_ptr() as usize].chars().count(),
                    f,
                )
            })
            .collect();
        let ((key_col, key), name) = match fields.as_slice() {
            [key] => (*key, None),
            [(_, name), key] => (*key, Some(*name)),
            _ => {
                let found = fields.len();
                errors.push(error(
                    file,
                    line,
                    col,
                    format!("expected KEY or NAME KEY, found {found} fields"),
                ));
                continue;
            }
        };
        if let Some(name) = name {
            if !name.bytes().all(|b| b.is_ascii_graphic()) {
                errors.push(error(file, line, col, "a key name must be visible ASCII".into()));
                continue;
            }
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            errors.push(error(file, line, key_col, "a key must be visible ASCII".into()));
            continue;
        }
        if key.len() < MIN_API_KEY_LEN {
            errors.push(error(
                file,
                line,
                key_col,
                format!(
                    "key too short ({} characters; at least {MIN_API_KEY_LEN}, better 32 random ones: openssl rand -hex 16)",
                    key.len()
                ),
            ));
            continue;
        }
        let digest = ApiKeySet::digest(key.as_bytes());
        let label;
        let name = match name {
            Some(name) => name,
            None => {
                label = ApiKeySet::label(&digest);
                &label
            }
        };
        if !keys.insert(digest, name) {
            let first = first_line.iter().find(|(d, _)| *d == digest).map_or(0, |(_, l)| *l);
            errors.push(error(
                file,
                line,
                key_col,
                format!("this key is already listed on line {first}"),
            ));
            continue;
        }
        first_line.push((digest, line));
    }
    if errors.is_empty() && keys.is_empty() {
        errors.push(error(file, 1, 1, "no keys: add one KEY or NAME KEY per line".into()));
    }
    if errors.is_empty() {
        Ok(keys)
    } else {
        Err(ConfigErrors(errors))
    }
}

#[cfg(test)]
mod tests;
