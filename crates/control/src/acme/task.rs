//! The ACME task: serves what the store keeps, orders each name when it is missing or due
//! (several at once, up to `[acme] max_concurrent_orders`, each order a task of its own:
//! [`OrderJob`]), and (with a store a fleet shares) mirrors the fleet's challenge answers and
//! picks up certificates another instance obtained. (The HTTP-01 tokens it does not know are
//! looked up on a miss by [`super::lookup::StoreLookup`], put up before this task starts.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use instant_acme::Account;
use rampart_model::acme::AcmeShared;
use tokio::task::JoinSet;

use super::job::{OrderJob, OrderOutcome};
use super::on_demand::{Gate, DENY_FOR};
use super::order::{humantime, open_account, renewal};
use super::renewal_info::{self, random_fraction, Plan, RECHECK_AFTER_ERROR};
use super::store::{Issued, SharedAnswers, Store};
use super::{tls_alpn, unix_seconds, AcmeStatus, NameStatus, Wanted};

/// How often an instance of a fleet looks at the shared store.
pub(super) const SYNC: Duration = Duration::from_millis(500);
/// The first wait after a failed order; it doubles up to [`RETRY_MAX`]. Each wait is drawn
/// within a quarter of it either way ([`retry_wait`]), so that instances that failed together
/// do not try again together.
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(3600);
/// How soon to look again at a name another instance is ordering (with the same jitter).
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
        etcd,
        in_flight: BTreeSet::new(),
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
    let limit = task.wanted.settings.max_concurrent_orders.max(1);
    // Aborted with the task: a reload that changes ACME stops the orders under way.
    let mut orders: JoinSet<(String, OrderOutcome)> = JoinSet::new();
    let mut ordering: std::collections::HashMap<tokio::task::Id, String> = Default::default();
    loop {
        // Every name due now is started, up to the limit, before anything is awaited for long.
        while orders.len() < limit {
            let Some(name) = task.due_now() else { break };
            if let Some(job) = task.start(&name).await {
                let handle = orders.spawn(job.run());
                ordering.insert(handle.id(), name.clone());
                tracing::info!(
                    name = name.as_str(),
                    "acme: {name}: ordering a certificate ({} of at most {limit} under way)",
                    orders.len()
                );
            }
            status.store(Arc::new(task.shown.clone()));
        }
        // With every slot taken, the next name waits for an order to end.
        let next = task.next_due().filter(|_| orders.len() < limit);
        let at = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            Some(done) = orders.join_next_with_id(), if !orders.is_empty() => match done {
                Ok((id, (name, outcome))) => {
                    ordering.remove(&id);
                    task.finished(&name, outcome);
                }
                Err(e) => {
                    // A panic in an order: its name is tried again like any failure.
                    if let Some(name) = ordering.remove(&e.id()) {
                        task.finished(&name, OrderOutcome::Failed(anyhow::anyhow!("the order stopped: {e}")));
                    }
                }
            },
            _ = sync.tick(), if task.store.shared() => task.sync().await,
            _ = requests.tick(), if asks => task.requests().await,
        }
        status.store(Arc::new(task.shown.clone()));
    }
}

struct Task {
    wanted: Wanted,
    store: Store,
    /// The etcd the config comes from, for the stores of orders (`storage = "etcd"`).
    etcd: Option<Arc<crate::etcd::Etcd>>,
    /// The names whose orders are under way (not in `due` meanwhile).
    in_flight: BTreeSet<String>,
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
            self.account = Some(open_account(&self.wanted.settings, &mut self.store, &self.owner).await?);
        }
        Ok(self.account.as_ref().expect("opened above"))
    }

    /// The certificate `name` has now: its expiry, if it has one.
    fn served_until(&self, name: &str) -> Option<u64> {
        self.shown.names.get(name).and_then(|s| s.not_after)
    }

    /// A name due now whose order is not under way.
    fn due_now(&self) -> Option<String> {
        let now = Instant::now();
        self.due
            .iter()
            .filter(|(name, at)| **at <= now && !self.in_flight.contains(*name))
            .min_by_key(|(_, at)| **at)
            .map(|(name, _)| name.clone())
    }

    /// When the next name not under way is due.
    fn next_due(&self) -> Option<Instant> {
        self.due
            .iter()
            .filter(|(name, _)| !self.in_flight.contains(*name))
            .map(|(_, at)| *at)
            .min()
    }

    /// `name` is due: its order, unless its renewal is not due yet (then it is due again later)
    /// or the account cannot be had (a failure).
    async fn start(&mut self, name: &str) -> Option<OrderJob> {
        if let Some(next) = self.not_yet_due(name).await {
            self.due.insert(name.to_string(), next);
            return None;
        }
        let account = match self.account().await {
            Ok(account) => account.clone(),
            Err(e) => {
                self.failed(name, e);
                return None;
            }
        };
        let replaces = match self.renewal_info {
            Some(true) => self.served.get(name).and_then(|s| s.id.clone()),
            _ => None,
        };
        self.due.remove(name);
        self.in_flight.insert(name.to_string());
        Some(OrderJob {
            name: name.to_string(),
            account,
            settings: self.wanted.settings.clone(),
            shared: self.shared.clone(),
            store: Store::new(&self.wanted.settings.storage, self.etcd.as_ref()),
            owner: self.owner.clone(),
            replaces,
            served_until: self.served_until(name),
        })
    }

    /// `name`'s order ended.
    fn finished(&mut self, name: &str, outcome: OrderOutcome) {
        self.in_flight.remove(name);
        match outcome {
            OrderOutcome::Issued(new) => {
                tracing::info!(
                    name,
                    "acme: {name}: certificate issued by {}, valid until {}",
                    self.wanted.settings.directory,
                    humantime(new.not_after)
                );
                self.serve(name, new);
            }
            OrderOutcome::ObtainedElsewhere(kept) => {
                tracing::info!(name, "acme: {name}: serving the certificate another instance obtained");
                self.serve(name, kept);
            }
            OrderOutcome::LockedElsewhere => {
                self.due
                    .insert(name.to_string(), Instant::now() + jittered(LOCKED_ELSEWHERE));
            }
            OrderOutcome::Failed(e) => self.failed(name, e),
        }
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
            let wait = retry_wait(failures);
            tracing::warn!(name, "acme: {name}: {e:#}; refused on demand for {wait:.1?}");
            self.due.remove(name);
            return self.refuse(name, wait);
        }
        let state = self.shown.names.entry(name.to_string()).or_default();
        state.failures += 1;
        if state.not_after.is_some() {
            state.state = "renewing";
        }
        state.error = Some(format!("{e:#}"));
        let wait = retry_wait(state.failures);
        tracing::warn!(name, "acme: {name}: {e:#}; trying again in {wait:.1?}");
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

/// The wait after `failures` failed orders in a row: [`RETRY_FIRST`] doubled each time up to
/// [`RETRY_MAX`], with jitter.
fn retry_wait(failures: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    jittered(doubled.min(RETRY_MAX))
}

/// `wait`, give or take a quarter, drawn anew at each call.
fn jittered(wait: Duration) -> Duration {
    wait.mul_f64(0.75 + 0.5 * random_fraction())
}

fn nanos() -> u32 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_spread_so_instances_that_failed_together_get_out_of_step() {
        for failures in [1, 2, 3, 12, 40] {
            let base = RETRY_FIRST.saturating_mul(1 << (failures - 1).min(16)).min(RETRY_MAX);
            let waits: Vec<Duration> = (0..64).map(|_| retry_wait(failures)).collect();
            for w in &waits {
                assert!(
                    *w >= base.mul_f64(0.75) && *w <= base.mul_f64(1.25),
                    "{w:?} for {base:?}"
                );
            }
            let mut distinct = waits.clone();
            distinct.sort();
            distinct.dedup();
            assert!(distinct.len() > 32, "{failures} failures: {waits:?}");
        }
    }
}
