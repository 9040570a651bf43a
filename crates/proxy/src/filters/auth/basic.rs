//! `basic_auth`: HTTP Basic authentication (RFC 7617) against the users of an htpasswd file.
//!
//! A request needs `Authorization: Basic base64(user:password)`; every refusal is a 401 with
//! the filter's `WWW-Authenticate` challenge, a short reason for the access log, and never the
//! credentials themselves anywhere. A user the file does not list is checked against a decoy
//! hash of the file (and refused whatever the outcome), so the time of an answer does not say
//! which users exist; the access log still tells the two apart (`basic_auth_unknown_user`,
//! `basic_auth_wrong_password`).
//!
//! A hash check costs tens of milliseconds of CPU by design, so it never runs on the worker's
//! thread: each worker keeps, per filter, [`PasswordChecks`]:
//!
//! - the [`PasswordCache`] of recent outcomes, asked first (a hit answers at once);
//! - the checks in flight by credential digest: a request whose credentials are being checked
//!   already waits for that check instead of starting another (a browser opening six connections
//!   with the same login costs one check);
//! - a count of checks queued or running on the worker's blocking pool: past
//!   `max_pending_checks`, a request that needs a new check gets 503 with `Retry-After: 1`
//!   (`basic_auth_busy`), so a flood of wrong passwords cannot queue unbounded work, while users
//!   whose outcome is cached are still served.
//!
//! The outcome of a check reaches the worker through a `watch` channel written by the blocking
//! thread itself, so a check whose requests all went away (clients that closed) still ends in the
//! cache: the next check started on the worker sweeps it in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use rampart_model::filter::auth::PasswordHash;
use rampart_model::filter::BasicAuth;
use tokio::sync::watch;

use super::password::{credential_digest, verify_password, CredentialDigest, PasswordCache};
use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, Verdict};

/// The longest `Authorization: Basic` token read (base64 of user and password).
const MAX_TOKEN_LEN: usize = 4096;

/// Standard base64, with or without padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl HttpFilter for BasicAuth {
    type State = ();
    type WorkerState = PasswordChecks;

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let decoded = match basic_credentials(req) {
            Ok(decoded) => decoded,
            Err(reason) => return refuse(self, reason),
        };
        let (user, password) = decoded.user_password();
        let (hash, known) = match (self.users.get(user), self.users.decoy()) {
            (Some(hash), _) => (hash, true),
            (None, Some(decoy)) => (decoy, false),
            (None, None) => return refuse(self, "basic_auth_unknown_user"),
        };
        let digest = credential_digest(user, password, hash);
        let step = cx.worker.builtin_state(self, |checks| {
            checks.begin(digest, Instant::now(), hash, password, self.max_pending_checks)
        });
        let matched = match step {
            Step::Known(matched) => matched,
            Step::Busy => {
                return Verdict::Respond(
                    Answer::plain(503, "basic_auth_busy", "too many logins being checked, retry")
                        .with_header("retry-after", "1"),
                )
            }
            Step::Wait(outcome) => {
                // Boxed: the wait stays out of the chain's future.
                let matched = Box::pin(outcome_of(outcome)).await;
                cx.worker
                    .builtin_state(self, |checks| checks.finish(digest, matched, Instant::now()));
                match matched {
                    Some(matched) => matched,
                    None => return Verdict::Respond(Answer::plain(503, "basic_auth_unavailable", "")),
                }
            }
        };
        if !known {
            return refuse(self, "basic_auth_unknown_user");
        }
        if !matched {
            return refuse(self, "basic_auth_wrong_password");
        }
        // The file's names are UTF-8, and this one matched.
        let user = String::from_utf8_lossy(user).into_owned();
        if let Some(header) = &self.forward_user_header {
            req.set_header(header, &user);
        }
        if self.hide_credentials {
            req.remove_header("authorization");
        }
        cx.facts.user = Some(user);
        Verdict::Continue
    }
}

/// A 401 with the challenge; `reason` goes to the access log.
fn refuse(f: &BasicAuth, reason: &'static str) -> Verdict {
    let detail = match reason {
        "basic_auth_missing" => "credentials required",
        "basic_auth_malformed" => "malformed Authorization header",
        _ => "invalid user name or password",
    };
    Verdict::Respond(Answer::plain(401, reason, detail).with_header("www-authenticate", f.challenge.clone()))
}

/// The decoded `user:password` of a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BasicCredentials {
    decoded: Vec<u8>,
    /// Where the first `:` is.
    colon: usize,
}

impl BasicCredentials {
    pub(crate) fn user_password(&self) -> (&[u8], &[u8]) {
        (&self.decoded[..self.colon], &self.decoded[self.colon + 1..])
    }
}

/// The credentials of the request's one `Authorization: Basic` field; the log reason when there
/// is none (`basic_auth_missing`: no field, or another scheme) or it cannot be read
/// (`basic_auth_malformed`: several fields, bad base64, no `:`).
pub(crate) fn basic_credentials(req: &RequestParts<'_>) -> Result<BasicCredentials, &'static str> {
    let mut fields = req.header_values("authorization");
    let Some(value) = fields.next() else {
        return Err("basic_auth_missing");
    };
    if fields.next().is_some() {
        return Err("basic_auth_malformed");
    }
    let value = value.trim_ascii();
    let (scheme, token) = match value.iter().position(|&b| b == b' ' || b == b'\t') {
        Some(at) => (&value[..at], value[at..].trim_ascii()),
        None => (value, &b""[..]),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err("basic_auth_missing");
    }
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err("basic_auth_malformed");
    }
    let decoded = BASE64.decode(token).map_err(|_| "basic_auth_malformed")?;
    let colon = decoded.iter().position(|&b| b == b':').ok_or("basic_auth_malformed")?;
    Ok(BasicCredentials { decoded, colon })
}

/// What a worker keeps for one `basic_auth` filter.
#[derive(Default)]
pub struct PasswordChecks {
    cache: PasswordCache,
    /// Checks started and not yet recorded, by digest; each receiver sees `Some(outcome)` once
    /// its check ends.
    in_flight: HashMap<CredentialDigest, watch::Receiver<Option<bool>>>,
    /// Checks queued or running on the blocking pool; a check's thread lowers it as it ends.
    pending: Arc<AtomicUsize>,
}

/// The first step of a request's password check.
pub(crate) enum Step {
    /// The cache knows: matched or not.
    Known(bool),
    /// A check runs: its outcome comes through this.
    Wait(watch::Receiver<Option<bool>>),
    /// Too many checks queued already.
    Busy,
}

/// Lowers the count of pending checks when a check ends (or is dropped unrun).
struct PendingGuard(Arc<AtomicUsize>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PasswordChecks {
    /// The cached outcome for `digest`, the check in flight for it, or a new check of `password`
    /// against `hash` on the blocking pool (unless `max_pending` checks are pending).
    pub(crate) fn begin(
        &mut self,
        digest: CredentialDigest,
        now: Instant,
        hash: &PasswordHash,
        password: &[u8],
        max_pending: usize,
    ) -> Step {
        if let Some(matched) = self.cache.lookup(&digest, now) {
            return Step::Known(matched);
        }
        if let Some(outcome) = self.in_flight.get(&digest) {
            return Step::Wait(outcome.clone());
        }
        self.sweep(now);
        if self.pending.load(Ordering::Acquire) >= max_pending {
            return Step::Busy;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let guard = PendingGuard(self.pending.clone());
        let (tx, rx) = watch::channel(None);
        let (hash, password) = (hash.clone(), password.to_vec());
        // Not awaited: the outcome comes through the channel. The count goes down before the
        // outcome is sent, so a request that sees the outcome sees the check gone too. (A check
        // that never runs, the runtime going away, drops the guard and the sender unrun.)
        drop(tokio::task::spawn_blocking(move || {
            let matched = verify_password(&hash, &password);
            drop(guard);
            let _ = tx.send(Some(matched));
        }));
        self.in_flight.insert(digest, rx.clone());
        Step::Wait(rx)
    }

    /// A check's outcome (`None`: it ended without one) as a waiting request saw it.
    pub(crate) fn finish(&mut self, digest: CredentialDigest, outcome: Option<bool>, now: Instant) {
        self.in_flight.remove(&digest);
        if let Some(matched) = outcome {
            self.cache.record(digest, matched, now);
        }
    }

    /// Moves the outcomes of ended checks that no request recorded into the cache, and forgets
    /// checks that ended without one.
    fn sweep(&mut self, now: Instant) {
        let cache = &mut self.cache;
        self.in_flight.retain(|digest, outcome| {
            let done = *outcome.borrow();
            match done {
                Some(matched) => {
                    cache.record(*digest, matched, now);
                    false
                }
                None => outcome.has_changed().is_ok(),
            }
        });
    }

    /// Checks queued or running.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

/// Waits for a check's outcome; `None` when it ended without one.
async fn outcome_of(mut outcome: watch::Receiver<Option<bool>>) -> Option<bool> {
    let seen = outcome.wait_for(Option::is_some).await.ok()?;
    *seen
}

#[cfg(test)]
mod tests;
