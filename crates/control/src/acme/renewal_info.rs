//! ACME Renewal Information (ARI, RFC 9773): the CA says when it wants a certificate renewed (a
//! window), earlier than usual when it must revoke one. Asked for every certificate served, again
//! as often as the CA's `Retry-After` says (kept between a minute and a day), when the directory
//! offers it; without it a certificate is renewed at two thirds of its lifetime.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use instant_acme::{Account, CertificateIdentifier};

use super::store::Issued;

/// The shortest and longest waits before asking again, whatever `Retry-After` says.
const RECHECK_MIN: Duration = Duration::from_secs(60);
const RECHECK_MAX: Duration = Duration::from_secs(24 * 3600);
/// How soon to ask again after the CA could not be asked.
pub(super) const RECHECK_AFTER_ERROR: Duration = Duration::from_secs(3600);

/// When to renew one certificate, as its CA said.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// The window the CA suggested.
    pub start: SystemTime,
    pub end: SystemTime,
    /// The moment chosen in it (at random, so that a fleet's certificates do not all renew at
    /// once; in the past when the window has opened).
    pub at: SystemTime,
    /// When to ask again.
    pub recheck: Duration,
    /// The CA's page explaining the window, when it gives one.
    pub explanation: Option<String>,
}

/// The identifier ARI and an order's `replaces` name `issued` by (its leaf's authority key
/// identifier and serial number).
pub(super) fn certificate_id(issued: &Issued) -> anyhow::Result<CertificateIdentifier<'static>> {
    let leaf = issued.key.cert.first().context("a certificate chain without a leaf")?;
    let id = CertificateIdentifier::try_from(leaf)
        .map_err(|e| anyhow::anyhow!("the certificate's identifier for renewal information: {e}"))?;
    Ok(id.into_owned())
}

/// The CA's renewal window for `id`; `None` when its directory offers no renewal information.
pub(super) async fn ask(account: &Account, id: &CertificateIdentifier<'_>) -> anyhow::Result<Option<Plan>> {
    let (info, retry_after) = match account.renewal_info(id).await {
        Err(instant_acme::Error::Unsupported(_)) => return Ok(None),
        other => other.context("renewal information")?,
    };
    let start = SystemTime::from(info.suggested_window.start);
    let end = SystemTime::from(info.suggested_window.end);
    if end <= start {
        bail!("renewal information: the window ends before it starts");
    }
    let span = end.duration_since(start).unwrap_or_default();
    Ok(Some(Plan {
        start,
        end,
        at: start + span.mul_f64(random_fraction()),
        recheck: retry_after.clamp(RECHECK_MIN, RECHECK_MAX),
        explanation: info.explanation_url,
    }))
}

impl Plan {
    /// This plan, keeping the moment chosen by `earlier` when it lies in the new window (RFC
    /// 9773 section 4.2: a client need not draw again when the window has not moved).
    pub(super) fn keeping(mut self, earlier: Option<&Plan>) -> Plan {
        if let Some(earlier) = earlier.filter(|e| e.at >= self.start && e.at <= self.end) {
            self.at = earlier.at;
        }
        self
    }
}

/// A number in [0, 1), different in every process and call (std's randomly keyed hasher).
pub(super) fn random_fraction() -> f64 {
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(start: u64, end: u64, at: u64) -> Plan {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        Plan {
            start: t(start),
            end: t(end),
            at: t(at),
            recheck: RECHECK_MIN,
            explanation: None,
        }
    }

    #[test]
    fn a_moment_chosen_inside_the_new_window_is_kept_and_one_outside_is_not() {
        let new = plan(100, 200, 150);
        assert_eq!(new.clone().keeping(Some(&plan(0, 300, 120))).at, plan(0, 0, 120).at);
        assert_eq!(new.clone().keeping(Some(&plan(0, 300, 250))).at, plan(0, 0, 150).at);
        assert_eq!(new.keeping(None).at, plan(0, 0, 150).at);
    }

    #[test]
    fn random_fractions_stay_below_one_and_vary() {
        let draws: Vec<f64> = (0..64).map(|_| random_fraction()).collect();
        assert!(draws.iter().all(|f| (0.0..1.0).contains(f)));
        assert!(draws.iter().any(|f| *f != draws[0]));
    }
}
