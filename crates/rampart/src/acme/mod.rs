//! ACME in the control plane: certificates for the names TLS listeners list in `acme = [...]`,
//! obtained from the `[acme]` directory with the HTTP-01 challenge (answered by every HTTP
//! listener's first route) or the DNS-01 one (a TXT record put on a DNS server, [`dns01`]:
//! wildcards, and every name with `challenge = "dns-01"`), kept under `[acme] storage`, and
//! renewed at two thirds of their lifetime. Workers only read what this publishes in [`AcmeShared`]; nothing here is on a
//! request's path.
//!
//! Until a name has a certificate, a handshake for it fails (no self-signed stand-in: a client
//! told to skip verification would take one). A certificate kept from an earlier run is served
//! at once, so a restart or a binary upgrade orders nothing while it is not due.

mod dns01;
mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context};
use dns01::Dns01;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};
use rampart_model::acme::{AcmeChallenge, AcmeSettings, AcmeShared};
use rampart_model::Snapshot;
use store::{issued, Issued, Store};

/// The first wait after a failed order; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// The names to obtain and where from: one task runs them, started again when they change.
#[derive(Clone, PartialEq, Eq)]
struct Wanted {
    settings: AcmeSettings,
    names: Vec<String>,
}

/// The ACME task of the config in force.
pub struct Acme {
    shared: Arc<AcmeShared>,
    running: Option<(Wanted, tokio::task::JoinHandle<()>)>,
}

impl Acme {
    pub fn new(shared: Arc<AcmeShared>) -> Acme {
        Acme { shared, running: None }
    }

    /// Follows the `[acme]` table and the `acme` names of `snapshot` (a load's).
    pub fn follow(&mut self, snapshot: &Snapshot) {
        let mut names: Vec<String> = snapshot
            .listeners
            .iter()
            .filter_map(|l| l.tls.as_ref())
            .flat_map(|t| t.acme_names.iter().cloned())
            .collect();
        names.sort();
        names.dedup();
        let wanted = snapshot
            .acme
            .clone()
            .filter(|_| !names.is_empty())
            .map(|settings| Wanted { settings, names });
        if self.running.as_ref().map(|(w, _)| w) == wanted.as_ref() {
            return;
        }
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
        if let Some(wanted) = wanted {
            let task = tokio::spawn(run(wanted.clone(), self.shared.clone()));
            self.running = Some((wanted, task));
        }
    }
}

/// Serves the certificates kept on disk, then obtains each missing or due one, for ever.
async fn run(wanted: Wanted, shared: Arc<AcmeShared>) {
    let settings = &wanted.settings;
    let store = Store::new(&settings.storage);
    let mut due: BTreeMap<String, Instant> = BTreeMap::new();
    let mut failures: BTreeMap<String, u32> = BTreeMap::new();
    for name in &wanted.names {
        let at = match store.certificate(name) {
            Some(kept) => {
                shared.install(name, kept.key.clone());
                tracing::info!(
                    name = name.as_str(),
                    "acme: {name}: serving the certificate kept in {}",
                    settings.storage.display()
                );
                renewal(&kept)
            }
            None => Instant::now(),
        };
        due.insert(name.clone(), at);
    }
    let mut account: Option<Account> = None;
    loop {
        let Some((name, at)) = due.iter().min_by_key(|(_, at)| **at).map(|(n, at)| (n.clone(), *at)) else {
            return;
        };
        tokio::time::sleep_until(at.into()).await;
        let outcome = async {
            if account.is_none() {
                account = Some(open_account(settings, &store).await?);
            }
            let account = account.as_ref().expect("opened above");
            obtain(account, settings, &name, &shared, &store).await
        }
        .await;
        match outcome {
            Ok(new) => {
                failures.remove(&name);
                shared.install(&name, new.key.clone());
                tracing::info!(
                    name = name.as_str(),
                    "acme: {name}: certificate issued by {}, valid until {}",
                    settings.directory,
                    humantime(new.not_after)
                );
                due.insert(name, renewal(&new));
            }
            Err(e) => {
                let n = failures.entry(name.clone()).or_default();
                *n += 1;
                let wait = RETRY_FIRST.saturating_mul(1 << (*n - 1).min(16)).min(RETRY_MAX);
                tracing::warn!(name = name.as_str(), "acme: {name}: {e:#}; trying again in {wait:?}");
                due.insert(name, Instant::now() + wait);
            }
        }
    }
}

/// The account kept for the directory, or a new one (then kept).
async fn open_account(settings: &AcmeSettings, store: &Store) -> anyhow::Result<Account> {
    let builder = match &settings.ca {
        Some(ca) => Account::builder_with_root(ca).with_context(|| format!("ca {}", ca.display()))?,
        None => Account::builder().context("an HTTPS client for the ACME directory")?,
    };
    if let Some(kept) = store.account(&settings.directory) {
        let credentials: AccountCredentials = serde_json::from_value(kept).context("the kept ACME account")?;
        return builder
            .from_credentials(credentials)
            .await
            .with_context(|| format!("ACME directory {}", settings.directory));
    }
    let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = builder
        .create(&new, settings.directory.clone(), None)
        .await
        .with_context(|| format!("ACME directory {}", settings.directory))?;
    store.keep_account(&settings.directory, &serde_json::to_value(&credentials)?)?;
    tracing::info!("acme: account {} made at {}", account.id(), settings.directory);
    Ok(account)
}

/// One order for `name`, validated by HTTP-01, or DNS-01 when `settings` choose it for `name`.
async fn obtain(
    account: &Account,
    settings: &AcmeSettings,
    name: &str,
    shared: &AcmeShared,
    store: &Store,
) -> anyhow::Result<Issued> {
    let dns01 = match (settings.challenge.for_name(name), &settings.dns01) {
        (AcmeChallenge::Http01, _) => None,
        (AcmeChallenge::Dns01, Some(d)) => Some(Dns01::new(d)?),
        (AcmeChallenge::Dns01, None) => bail!("DNS-01 needs an [acme.dns01] table"),
    };
    let kind = if dns01.is_some() {
        ChallengeType::Dns01
    } else {
        ChallengeType::Http01
    };
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut tokens = Vec::new();
    let mut records = Vec::new();
    let ready = async {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => bail!("the CA says the authorization is {other:?}"),
            }
            let mut challenge = authorization
                .challenge(kind.clone())
                .ok_or_else(|| anyhow!("the CA offers no {kind:?} challenge"))?;
            match &dns01 {
                Some(dns01) => dns01.publish(&challenge, &mut records).await?,
                None => {
                    shared.set_http_answer(&challenge.token, Some(challenge.key_authorization().as_str()));
                    tokens.push(challenge.token.clone());
                }
            }
            challenge.set_ready().await?;
        }
        let status = order.poll_ready(&RetryPolicy::new()).await?;
        if status != OrderStatus::Ready {
            bail!("the order is {status:?}");
        }
        Ok(())
    }
    .await;
    for token in &tokens {
        shared.set_http_answer(token, None);
    }
    if let Some(dns01) = &dns01 {
        dns01.withdraw(&records).await;
    }
    ready?;
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&RetryPolicy::new()).await?;
    store.keep_certificate(name, &chain_pem, &key_pem)?;
    issued(chain_pem.as_bytes(), key_pem.as_bytes())
}

/// When to renew: at two thirds of the certificate's lifetime.
fn renewal(issued: &Issued) -> Instant {
    let lifetime = issued.not_after.duration_since(issued.not_before).unwrap_or_default();
    let at = issued.not_before + lifetime * 2 / 3;
    Instant::now() + at.duration_since(SystemTime::now()).unwrap_or_default()
}

fn humantime(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{secs} (Unix seconds)")
}
