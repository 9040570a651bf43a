//! The ACME task: serves what the store keeps, orders each name when it is missing or due, and
//! (with a store a fleet shares) mirrors the fleet's challenge answers and picks up certificates
//! another instance obtained.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use instant_acme::Account;
use rampart_model::acme::AcmeShared;

use super::on_demand::{Gate, DENY_FOR};
use super::order::{humantime, obtain, open_account, renewal};
use super::renewal_info::{self, Plan, RECHECK_AFTER_ERROR};
use super::store::{Issued, SharedAnswers, Store};
use super::{tls_alpn, unix_seconds, AcmeStatus, NameStatus, Wanted};

/// How often an instance of a fleet looks at the shared store.
pub(super) const SYNC: Duration = Duration::from_millis(500);
/// The first wait after a failed order; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(3600);
/// How soon to look again at a name another instance is ordering.
const LOCKED_ELSEWHERE: Duration = Duration::from_secs(1);
/// How often the names handshakes asked for (on-demand TLS) are looked at.
const REQUESTS: Duration = Duration::from_millis(50);

/// Serves the certificates kept, then obtains each missing or due one, for ever.
pub(super) async fn run(
    wanted: Wanted,
    shared: Arc<AcmeShared>,
    etcd: Option<Arc<crate::etcd::Etcd>>,
    status: Arc<ArcSwap<AcmeStatus>>,
) {
    let mut task = Task {
        store: Store::new(&wanted.settings.storage, etcd.as_ref()),
        owner: format!("{}-{}", std::process::id(), nanos()),
        due: BTreeMap::new(),
        shown: AcmeStatus {
            directory: wanted.settings.directory.clone(),
            names: BTreeMap::new(),
        },
        mirrored: SharedAnswers::default(),
        account: None,
        served: BTreeMap::new(),
        renewal_info: None,
        shared,
        gate: Gate::default(),
        on_demand: BTreeSet::new(),
        denied: BTreeMap::new(),
        wanted,
    };
    let mut kept_all = Vec::new();
    for name in task.wanted.names.clone() {
        task.shown.names.insert(
            name.clone(),
            NameStatus {
                state: "obtaining",
                ..Default::default()
            },
        );
        task.due.insert(name.clone(), Instant::now());
        match task.store.certificate(&name).await {
            Ok(Some(kept)) => kept_all.push((name, kept)),
            Ok(None) => {}
            Err(e) => tracing::warn!(name = name.as_str(), "acme: {name}: {e:#}"),
        }
    }
    let entries: Vec<(&str, _)> = kept_all.iter().map(|(n, k)| (n.as_str(), k.key.clone())).collect();
    task.shared.install_all(&entries);
    drop(entries);
    for (name, kept) in kept_all {
        // Said once it is served: a test (or an operator) may connect at once.
        tracing::info!(
            name = name.as_str(),
            "acme: {name}: serving the certificate kept in {}",
            task.wanted.settings.storage
        );
        task.track(&name, kept);
    }
    status.store(Arc::new(task.shown.clone()));
    let mut sync = tokio::time::interval(SYNC);
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut requests = tokio::time::interval(REQUESTS);
    requests.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let asks = !task.wanted.on_demand.is_empty();
    loop {
        let next = task
            .due
            .iter()
            .min_by_key(|(_, at)| **at)
            .map(|(n, at)| (n.clone(), *at));
        let (name, at) = next.unwrap_or_else(|| (String::new(), Instant::now() + Duration::from_secs(3600)));
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {
                if !name.is_empty() {
                    task.attend(&name).await;
                }
            }
            _ = sync.tick(), if task.store.shared() => task.sync().await,
            _ = requests.tick(), if asks => task.requests().await,
        }
        status.store(Arc::new(task.shown.clone()));
    }
}

struct Task {
    wanted: Wanted,
    store: Store,
    /// This instance, as the owner of a shared lock.
    owner: String,
    /// When each name is next due (missing, renewal, retry).
    due: BTreeMap<String, Instant>,
    shown: AcmeStatus,
    /// The fleet's answers mirrored into `shared` so far.
    mirrored: SharedAnswers,
    account: Option<Account>,
    /// The certificate each name is served with, as far as its renewal goes.
    served: BTreeMap<String, Served>,
    /// Whether the CA offers renewal information (ARI); `None` until its directory is read.
    renewal_info: Option<bool>,
    shared: Arc<AcmeShared>,
    /// On-demand TLS: the rate and ask URL, the names obtained on demand, the names refused
    /// (until when).
    gate: Gate,
    on_demand: BTreeSet<String>,
    denied: BTreeMap<String, Instant>,
}

/// A name's certificate, as its renewal needs it.
struct Served {
    /// Two thirds of its lifetime: when it is renewed without renewal information.
    two_thirds: Instant,
    /// Its identifier for renewal information and `replaces`.
    id: Option<instant_acme::CertificateIdentifier<'static>>,
    /// What the CA last said about its renewal.
    plan: Option<Plan>,
}

impl Task {
    /// Serves `issued` for `name` and schedules its renewal ([`Task::track`]).
    fn serve(&mut self, name: &str, issued: Issued) {
        self.shared.install(name, issued.key.clone());
        self.track(name, issued);
    }

    /// Records `issued` as `name`'s certificate (already served) and schedules its renewal: the
    /// CA is asked about it at once when it offers renewal information (or may), else it is due
    /// at two thirds of its life.
    fn track(&mut self, name: &str, issued: Issued) {
        self.shown.names.entry(name.to_string()).or_default().issued(&issued);
        let id = renewal_info::certificate_id(&issued)
            .inspect_err(|e| tracing::debug!(name, "acme: {name}: {e:#}"))
            .ok();
        let ask = id.is_some() && self.renewal_info != Some(false);
        let served = Served {
            two_thirds: renewal(&issued),
            id,
            plan: None,
        };
        let due = if ask { Instant::now() } else { served.two_thirds };
        self.served.insert(name.to_string(), served);
        self.due.insert(name.to_string(), due);
    }

    /// For a name served: `Some(when to look again)` while its renewal is not due, asking the
    /// CA's renewal information when it offers it. `None`: order it now.
    async fn not_yet_due(&mut self, name: &str) -> Option<Instant> {
        let served = self.served.get(name)?;
        let two_thirds = served.two_thirds;
        let asked = match served.id.clone().filter(|_| self.renewal_info != Some(false)) {
            Some(id) => Some(self.ask_renewal_info(&id).await),
            None => None,
        };
        let now = Instant::now();
        let plan = match asked {
            Some(Ok(Some(plan))) => plan,
            Some(Err(e)) => {
                tracing::warn!(name, "acme: {name}: {e:#}; asking again in {RECHECK_AFTER_ERROR:?}");
                return (two_thirds > now).then(|| two_thirds.min(now + RECHECK_AFTER_ERROR));
            }
            Some(Ok(None)) | None => return (two_thirds > now).then_some(two_thirds),
        };
        let served = self.served.get_mut(name)?;
        let plan = plan.keeping(served.plan.as_ref());
        let state = self.shown.names.entry(name.to_string()).or_default();
        state.renew_at = Some(unix_seconds(plan.at));
        state.window = Some((unix_seconds(plan.start), unix_seconds(plan.end)));
        let wait = plan.at.duration_since(SystemTime::now()).ok();
        let next = wait.map(|w| now + w.min(plan.recheck));
        if next.is_none() {
            tracing::info!(
                name,
                "acme: {name}: the CA's renewal window opened at {}{}: renewing",
                humantime(plan.start),
                plan.explanation
                    .as_ref()
                    .map(|u| format!(" (see {u})"))
                    .unwrap_or_default()
            );
        }
        served.plan = Some(plan);
        next
    }

    /// The CA's renewal window for a certificate (`None`: it offers none).
    async fn ask_renewal_info(&mut self, id: &instant_acme::CertificateIdentifier<'_>) -> anyhow::Result<Option<Plan>> {
        let account = self.account().await?;
        let plan = renewal_info::ask(account, id).await?;
        self.renewal_info = Some(plan.is_some());
        Ok(plan)
    }

    async fn account(&mut self) -> anyhow::Result<&Account> {
        if self.account.is_none() {
            self.account = Some(open_account(&self.wanted.settings, &mut self.store).await?);
        }
        Ok(self.account.as_ref().expect("opened above"))
    }

    /// The certificate `name` has now: its expiry, if it has one.
    fn served_until(&self, name: &str) -> Option<u64> {
        self.shown.names.get(name).and_then(|s| s.not_after)
    }

    /// `name` is due: order it, unless its renewal is not due yet, or another instance is
    /// ordering it or already has.
    async fn attend(&mut self, name: &str) {
        if let Some(next) = self.not_yet_due(name).await {
            self.due.insert(name.to_string(), next);
            return;
        }
        match self.store.lock(name, &self.owner).await {
            Ok(true) => {}
            Ok(false) => {
                self.due.insert(name.to_string(), Instant::now() + LOCKED_ELSEWHERE);
                return;
            }
            Err(e) => return self.failed(name, e),
        }
        // Another instance may have renewed it while this one waited for the lock.
        if let Ok(Some(kept)) = self.store.certificate(name).await {
            if renewal(&kept) > Instant::now() && Some(unix_seconds(kept.not_after)) != self.served_until(name) {
                let _ = self.store.unlock(name, &self.owner).await;
                return self.serve(name, kept);
            }
        }
        let outcome = self.order(name).await;
        if let Err(e) = self.store.unlock(name, &self.owner).await {
            tracing::warn!(name, "acme: {name}: cannot release the order lock: {e:#}");
        }
        match outcome {
            Ok(new) => {
                tracing::info!(
                    name,
                    "acme: {name}: certificate issued by {}, valid until {}",
                    self.wanted.settings.directory,
                    humantime(new.not_after)
                );
                self.serve(name, new);
            }
            Err(e) => self.failed(name, e),
        }
    }

    async fn order(&mut self, name: &str) -> anyhow::Result<Issued> {
        let replaces = match self.renewal_info {
            Some(true) => self.served.get(name).and_then(|s| s.id.clone()),
            _ => None,
        };
        self.account().await?;
        let account = self.account.as_ref().expect("opened above");
        let settings = &self.wanted.settings;
        obtain(account, name, settings, &self.shared, &mut self.store, replaces).await
    }

    /// On-demand TLS: decides on the names handshakes asked for since the last look.
    async fn requests(&mut self) {
        let now = Instant::now();
        let expired: Vec<String> = self
            .denied
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in expired {
            self.denied.remove(&name);
            self.shared.deny(&name, false);
        }
        for name in self.shared.take_requests() {
            if self.wanted.names.contains(&name) || self.on_demand.contains(&name) || self.denied.contains_key(&name) {
                continue;
            }
            match self.gate.decide(&self.wanted.on_demand, &name).await {
                Ok(()) => {
                    tracing::info!(name = name.as_str(), "acme: {name}: obtaining a certificate on demand");
                    self.on_demand.insert(name.clone());
                    self.shown.names.insert(
                        name.clone(),
                        NameStatus {
                            state: "obtaining",
                            ..Default::default()
                        },
                    );
                    self.due.insert(name, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(name = name.as_str(), "acme: {name}: not obtained on demand: {e:#}");
                    self.refuse(&name, DENY_FOR);
                }
            }
        }
    }

    /// Refuses an on-demand name for `wait`: its handshakes stop waiting.
    fn refuse(&mut self, name: &str, wait: Duration) {
        self.shared.deny(name, true);
        self.denied.insert(name.to_string(), Instant::now() + wait);
    }

    fn failed(&mut self, name: &str, e: anyhow::Error) {
        if self.on_demand.remove(name) {
            // No retry for a name nobody may ask for again: the next handshake after the wait
            // asks anew.
            let failures = self.shown.names.remove(name).map_or(1, |s| s.failures + 1);
            let wait = RETRY_FIRST.saturating_mul(1 << (failures - 1).min(16)).min(RETRY_MAX);
            tracing::warn!(name, "acme: {name}: {e:#}; refused on demand for {wait:?}");
            self.due.remove(name);
            return self.refuse(name, wait);
        }
        let state = self.shown.names.entry(name.to_string()).or_default();
        state.failures += 1;
        if state.not_after.is_some() {
            state.state = "renewing";
        }
        state.error = Some(format!("{e:#}"));
        let wait = RETRY_FIRST
            .saturating_mul(1 << (state.failures - 1).min(16))
            .min(RETRY_MAX);
        tracing::warn!(name, "acme: {name}: {e:#}; trying again in {wait:?}");
        self.due.insert(name.to_string(), Instant::now() + wait);
    }

    /// A fleet: mirrors the challenge answers other instances put up, and serves a certificate
    /// another instance obtained.
    async fn sync(&mut self) {
        match self.store.answers().await {
            Ok(answers) if answers != self.mirrored => self.mirror(answers),
            Ok(_) => {}
            Err(e) => tracing::debug!("acme: {e:#}"),
        }
        for name in self.wanted.names.clone() {
            let Ok(Some(kept)) = self.store.certificate(&name).await else {
                continue;
            };
            if Some(unix_seconds(kept.not_after)) > self.served_until(&name) {
                tracing::info!(
                    name = name.as_str(),
                    "acme: {name}: serving the certificate another instance obtained"
                );
                self.serve(&name, kept);
            }
        }
    }

    fn mirror(&mut self, answers: SharedAnswers) {
        for (token, _) in &self.mirrored.http {
            if !answers.http.iter().any(|(t, _)| t == token) {
                self.shared.set_http_answer(token, None);
            }
        }
        for (token, key_authorization) in &answers.http {
            self.shared.set_http_answer(token, Some(key_authorization));
        }
        for (name, _) in &self.mirrored.alpn {
            if !answers.alpn.iter().any(|(n, _)| n == name) {
                self.shared.set_alpn_certificate(name, None);
            }
        }
        for (name, digest) in &answers.alpn {
            match tls_alpn::validation_certificate(name, digest) {
                Ok(cert) => self.shared.set_alpn_certificate(name, Some(cert)),
                Err(e) => tracing::warn!("acme: {name}: {e:#}"),
            }
        }
        self.mirrored = answers;
    }
}

fn nanos() -> u32 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
