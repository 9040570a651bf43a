//! ACME in the control plane: certificates for the names TLS listeners list in `acme = [...]`,
//! obtained from the `[acme]` directory with the HTTP-01 challenge (answered by every HTTP
//! listener's first route), kept under `[acme] storage`, and renewed at two thirds of their
//! lifetime. Workers only read what this publishes in [`AcmeShared`]; nothing here is on a
//! request's path.
//!
//! Until a name has a certificate, a handshake for it fails (no self-signed stand-in: a client
//! told to skip verification would take one). A certificate kept from an earlier run is served
//! at once, so a restart or a binary upgrade orders nothing while it is not due.

mod store;
mod tls_alpn;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context};
use arc_swap::ArcSwap;
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
    status: Arc<ArcSwap<AcmeStatus>>,
}

/// Each name's certificate as `/api/status` and `/metrics` show it.
#[derive(Debug, Clone, Default)]
pub struct AcmeStatus {
    pub directory: String,
    pub names: BTreeMap<String, NameStatus>,
}

#[derive(Debug, Clone, Default)]
pub struct NameStatus {
    /// `obtaining` (no certificate yet), `valid`, or `renewing` (a renewal under way or failing).
    pub state: &'static str,
    /// When the certificate served expires (Unix seconds).
    pub not_after: Option<u64>,
    /// When it is (or was) due for renewal (Unix seconds).
    pub renew_at: Option<u64>,
    /// The last failure, with the CA's error; cleared by a success.
    pub error: Option<String>,
    pub failures: u32,
}

impl Acme {
    pub fn new(shared: Arc<AcmeShared>) -> Acme {
        Acme {
            shared,
            running: None,
            status: Default::default(),
        }
    }

    /// What the admin API shows, kept up to date by the task.
    pub fn status(&self) -> Arc<ArcSwap<AcmeStatus>> {
        self.status.clone()
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
        self.status.store(Default::default());
        if let Some(wanted) = wanted {
            let task = tokio::spawn(run(wanted.clone(), self.shared.clone(), self.status.clone()));
            self.running = Some((wanted, task));
        }
    }
}

/// Serves the certificates kept on disk, then obtains each missing or due one, for ever.
async fn run(wanted: Wanted, shared: Arc<AcmeShared>, status: Arc<ArcSwap<AcmeStatus>>) {
    let settings = &wanted.settings;
    let store = Store::new(&settings.storage);
    let mut due: BTreeMap<String, Instant> = BTreeMap::new();
    let mut shown = AcmeStatus {
        directory: settings.directory.clone(),
        names: BTreeMap::new(),
    };
    for name in &wanted.names {
        let mut state = NameStatus {
            state: "obtaining",
            ..Default::default()
        };
        let at = match store.certificate(name) {
            Some(kept) => {
                shared.install(name, kept.key.clone());
                tracing::info!(
                    name = name.as_str(),
                    "acme: {name}: serving the certificate kept in {}",
                    settings.storage.display()
                );
                state.issued(&kept);
                renewal(&kept)
            }
            None => Instant::now(),
        };
        shown.names.insert(name.clone(), state);
        due.insert(name.clone(), at);
    }
    status.store(Arc::new(shown.clone()));
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
            obtain(account, &name, settings, &shared, &store).await
        }
        .await;
        let state = shown.names.entry(name.clone()).or_default();
        match outcome {
            Ok(new) => {
                state.issued(&new);
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
                state.failures += 1;
                if state.not_after.is_some() {
                    state.state = "renewing";
                }
                state.error = Some(format!("{e:#}"));
                let wait = RETRY_FIRST
                    .saturating_mul(1 << (state.failures - 1).min(16))
                    .min(RETRY_MAX);
                tracing::warn!(name = name.as_str(), "acme: {name}: {e:#}; trying again in {wait:?}");
                due.insert(name, Instant::now() + wait);
            }
        }
        status.store(Arc::new(shown.clone()));
    }
}

impl NameStatus {
    fn issued(&mut self, issued: &Issued) {
        let unix = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let lifetime = issued.not_after.duration_since(issued.not_before).unwrap_or_default();
        *self = NameStatus {
            state: "valid",
            not_after: Some(unix(issued.not_after)),
            renew_at: Some(unix(issued.not_before + lifetime * 2 / 3)),
            error: None,
            failures: 0,
        };
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

/// One order for `name`, validated by the configured challenge.
async fn obtain(
    account: &Account,
    name: &str,
    settings: &AcmeSettings,
    shared: &AcmeShared,
    store: &Store,
) -> anyhow::Result<Issued> {
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut answered = Vec::new();
    let ready = async {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => bail!("the CA says the authorization is {other:?}"),
            }
            let kind = match settings.challenge {
                AcmeChallenge::Http01 => ChallengeType::Http01,
                AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut challenge = authorization
                .challenge(kind.clone())
                .ok_or_else(|| anyhow!("the CA offers no {kind:?} challenge"))?;
            let key_authorization = challenge.key_authorization();
            let answer = match settings.challenge {
                AcmeChallenge::Http01 => {
                    shared.set_http_answer(&challenge.token, Some(key_authorization.as_str()));
                    Answer::Http01(challenge.token.clone())
                }
                AcmeChallenge::TlsAlpn01 => {
                    let cert = tls_alpn::validation_certificate(name, key_authorization.digest().as_ref())?;
                    shared.set_alpn_certificate(name, Some(cert));
                    Answer::TlsAlpn01(name.to_string())
                }
            };
            answered.push(answer);
            challenge.set_ready().await?;
        }
        let status = order.poll_ready(&RetryPolicy::new()).await?;
        if status != OrderStatus::Ready {
            bail!("the order is {status:?}");
        }
        Ok(())
    }
    .await;
    for answer in &answered {
        match answer {
            Answer::Http01(token) => shared.set_http_answer(token, None),
            Answer::TlsAlpn01(name) => shared.set_alpn_certificate(name, None),
        }
    }
    ready?;
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&RetryPolicy::new()).await?;
    store.keep_certificate(name, &chain_pem, &key_pem)?;
    issued(chain_pem.as_bytes(), key_pem.as_bytes())
}

/// What was put up for a challenge, taken down once the order is decided.
enum Answer {
    Http01(String),
    TlsAlpn01(String),
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
