//! One ACME order: the account it is placed with, the challenge answered, the certificate.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};
use rampart_model::acme::{AcmeChallenge, AcmeSettings, AcmeShared};

use super::dns01::Dns01;
use super::store::{issued, Issued, Store};
use super::tls_alpn;

/// How many times a request the CA refused for its nonce is sent again (with the fresh nonce the
/// refusal carried), as RFC 8555 section 6.5 asks of a client.
const NONCE_RETRIES: usize = 8;

/// `$call` (an ACME request, awaited), sent again while the CA refuses it as `badNonce`.
macro_rules! again_on_bad_nonce {
    ($call:expr) => {{
        let mut tries = 0;
        loop {
            match $call {
                Err(e) if is_bad_nonce(&e) && tries < NONCE_RETRIES => tries += 1,
                other => break other,
            }
        }
    }};
}

fn is_bad_nonce(e: &instant_acme::Error) -> bool {
    matches!(e, instant_acme::Error::Api(p) if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:badNonce"))
}

/// How long a fleet's instances are given to see a TLS-ALPN-01 answer put up in the shared store
/// before the CA is told to validate (they look every [`super::task::SYNC`]).
const PROPAGATION: Duration = Duration::from_millis(1200);

/// How long an instance waits for another one making the fleet's account (a lock it holds for
/// [`super::store::LOCK_FOR`] at most) before it says so and tries again later.
const ACCOUNT_WAIT: Duration = Duration::from_secs(130);
/// How often it looks meanwhile.
const ACCOUNT_LOOK: Duration = Duration::from_millis(100);

/// The account kept for the directory, or a new one (then kept). In a fleet one instance makes
/// it, under a lock (`owner`'s), and the others take the one it keeps: one account per fleet.
pub(super) async fn open_account(settings: &AcmeSettings, store: &mut Store, owner: &str) -> anyhow::Result<Account> {
    let deadline = Instant::now() + ACCOUNT_WAIT;
    loop {
        if let Some(kept) = store.account(&settings.directory).await? {
            return account_from(settings, kept).await;
        }
        if store.lock_account(&settings.directory, owner).await? {
            // Another instance may have kept one just before the lock was taken.
            let made = match store.account(&settings.directory).await {
                Ok(Some(kept)) => account_from(settings, kept).await,
                Ok(None) => new_account(settings, store).await,
                Err(e) => Err(e),
            };
            if let Err(e) = store.unlock_account(&settings.directory, owner).await {
                tracing::warn!("acme: cannot release the account lock: {e:#}");
            }
            return made;
        }
        if Instant::now() >= deadline {
            bail!(
                "another instance has been making the ACME account at {} for {ACCOUNT_WAIT:?}",
                settings.directory
            );
        }
        tokio::time::sleep(ACCOUNT_LOOK).await;
    }
}

/// The builder of accounts at the directory.
fn account_builder(settings: &AcmeSettings) -> anyhow::Result<instant_acme::AccountBuilder> {
    match &settings.ca {
        Some(ca) => Account::builder_with_root(ca).with_context(|| format!("ca {}", ca.display())),
        None => Account::builder().context("an HTTPS client for the ACME directory"),
    }
}

/// The account of the credentials `kept` (JSON).
async fn account_from(settings: &AcmeSettings, kept: serde_json::Value) -> anyhow::Result<Account> {
    again_on_bad_nonce!({
        let credentials: AccountCredentials = serde_json::from_value(kept.clone()).context("the kept ACME account")?;
        account_builder(settings)?.from_credentials(credentials).await
    })
    .with_context(|| format!("ACME directory {}", settings.directory))
}

/// A new account at the directory, kept in `store`.
async fn new_account(settings: &AcmeSettings, store: &mut Store) -> anyhow::Result<Account> {
    let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let binding = settings
        .eab
        .as_ref()
        .map(|eab| ExternalAccountKey::new(eab.kid.clone(), &eab.hmac_key));
    let (account, credentials) = again_on_bad_nonce!(
        account_builder(settings)?
            .create(&new, settings.directory.clone(), binding.as_ref())
            .await
    )
    .with_context(|| format!("ACME directory {}", settings.directory))?;
    store
        .keep_account(&settings.directory, &serde_json::to_value(&credentials)?)
        .await?;
    tracing::info!("acme: account {} made at {}", account.id(), settings.directory);
    Ok(account)
}

/// One order for `name`, validated by the configured challenge; `replaces` names the
/// certificate it renews (to a CA that offers renewal information).
pub(super) async fn obtain(
    account: &Account,
    name: &str,
    settings: &AcmeSettings,
    shared: &AcmeShared,
    store: &mut Store,
    replaces: Option<CertificateIdentifier<'static>>,
) -> anyhow::Result<Issued> {
    let challenge_kind = settings.challenge.for_name(name);
    let dns01 = match (challenge_kind, &settings.dns01) {
        (AcmeChallenge::Dns01, Some(d)) => Some(Dns01::new(d)?),
        (AcmeChallenge::Dns01, None) => bail!("DNS-01 needs an [acme.dns01] table"),
        _ => None,
    };
    let kind = match challenge_kind {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        AcmeChallenge::Dns01 => ChallengeType::Dns01,
    };
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = place(account, name, settings, &identifiers, replaces).await?;
    let mut answered = Vec::new();
    let mut records = Vec::new();
    let ready = async {
        // One name per order: one authorization. A refused fetch is asked again through a new
        // iterator (the one that failed has moved past it).
        let mut tries = 0;
        let mut authorizations = order.authorizations();
        loop {
            let mut authorization = match authorizations.next().await {
                None => break,
                Some(Ok(a)) => a,
                Some(Err(e)) if is_bad_nonce(&e) && tries < NONCE_RETRIES => {
                    tries += 1;
                    authorizations = order.authorizations();
                    continue;
                }
                Some(Err(e)) => return Err(e.into()),
            };
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => bail!("the CA says the authorization is {other:?}"),
            }
            let mut challenge = authorization
                .challenge(kind.clone())
                .ok_or_else(|| anyhow!("the CA offers no {kind:?} challenge"))?;
            let key_authorization = challenge.key_authorization();
            match challenge_kind {
                AcmeChallenge::Dns01 => {
                    // The DNS server is the fleet's already: nothing to share.
                    let dns01 = dns01.as_ref().expect("made above for DNS-01");
                    dns01.publish(&challenge, &mut records).await?;
                    again_on_bad_nonce!(challenge.set_ready().await)?;
                    continue;
                }
                AcmeChallenge::Http01 => {
                    shared.set_http_answer(&challenge.token, Some(key_authorization.as_str()));
                    answered.push(Answer::Http01(challenge.token.clone()));
                    store
                        .http_answer(&challenge.token, Some(key_authorization.as_str()))
                        .await?;
                }
                AcmeChallenge::TlsAlpn01 => {
                    let digest = key_authorization.digest();
                    let cert = tls_alpn::validation_certificate(name, digest.as_ref())?;
                    shared.set_alpn_certificate(name, Some(cert));
                    answered.push(Answer::TlsAlpn01(name.to_string()));
                    store.alpn_answer(name, Some(digest.as_ref())).await?;
                }
            }
            if store.shared() && challenge_kind == AcmeChallenge::TlsAlpn01 {
                // Whichever instance the CA reaches must know the answer. An HTTP-01 token is
                // answered by every instance as soon as it is stored (looked up on a miss); a
                // TLS-ALPN-01 answer comes from the mirror.
                tokio::time::sleep(PROPAGATION).await;
            }
            again_on_bad_nonce!(challenge.set_ready().await)?;
        }
        let status = again_on_bad_nonce!(order.poll_ready(&RetryPolicy::new()).await)?;
        if status != OrderStatus::Ready {
            bail!("the order is {status:?}");
        }
        Ok(())
    }
    .await;
    if let Some(dns01) = &dns01 {
        dns01.withdraw(&records).await;
    }
    for answer in &answered {
        // Taking an answer down from the shared store may fail (Redis gone): it is only stale.
        match answer {
            Answer::Http01(token) => {
                shared.set_http_answer(token, None);
                let _ = store.http_answer(token, None).await;
            }
            Answer::TlsAlpn01(name) => {
                shared.set_alpn_certificate(name, None);
                let _ = store.alpn_answer(name, None).await;
            }
        }
    }
    ready?;
    let key_pem = again_on_bad_nonce!(order.finalize().await)?;
    let chain_pem = again_on_bad_nonce!(order.poll_certificate(&RetryPolicy::new()).await)?;
    store.keep_certificate(name, &chain_pem, &key_pem).await?;
    issued(chain_pem.as_bytes(), key_pem.as_bytes())
}

/// The new order: with the configured profile when the CA offers it, and naming the certificate
/// it replaces; a CA that refuses the replacement (one issued to another account, say) gets a
/// plain order.
async fn place(
    account: &Account,
    name: &str,
    settings: &AcmeSettings,
    identifiers: &[Identifier],
    replaces: Option<CertificateIdentifier<'static>>,
) -> anyhow::Result<Order> {
    let profile = settings.profile.as_deref();
    let offered = profile.filter(|wanted| account.profiles().any(|p| p.name == *wanted));
    if let (Some(wanted), None) = (profile, offered) {
        let mut names: Vec<&str> = account.profiles().map(|p| p.name).collect();
        names.sort_unstable();
        tracing::warn!(
            name,
            "acme: {name}: the CA offers no profile `{wanted}` (it offers: {}); ordering its default",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    let new = || {
        let order = NewOrder::new(identifiers);
        match offered {
            Some(p) => order.profile(p),
            None => order,
        }
    };
    if let Some(id) = replaces {
        match again_on_bad_nonce!(account.new_order(&new().replaces(id.clone())).await) {
            Ok(order) => return Ok(order),
            Err(e) => tracing::warn!(
                name,
                "acme: {name}: the CA refused the order as a replacement ({e}); ordering anew"
            ),
        }
    }
    Ok(again_on_bad_nonce!(account.new_order(&new()).await)?)
}

/// What was put up for a challenge, taken down once the order is decided.
enum Answer {
    Http01(String),
    TlsAlpn01(String),
}

/// When to renew: at two thirds of the certificate's lifetime.
pub(super) fn renewal(issued: &Issued) -> Instant {
    Instant::now() + issued.renew_at().duration_since(SystemTime::now()).unwrap_or_default()
}

/// `t` as an RFC 3339 date and time in UTC, to the second (`2031-11-27T22:59:38Z`).
pub(super) fn humantime(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let at = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| format!("{secs} (Unix seconds)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_the_log_are_rfc_3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_953_586_778);
        assert_eq!(humantime(t), "2031-11-27T22:59:38Z");
        assert_eq!(humantime(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
