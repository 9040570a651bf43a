//! Backends from DNS: the control plane asks the questions of the targets written by name
//! (`dns+NAME:PORT`, `srv+NAME`), again when each answer's TTL runs out (clamped to
//! `dns_ttl_min`..`dns_ttl_max`), and publishes a snapshot with the targets the answers give
//! whenever they change (see `rampart_config::compile::discovered`). Workers never wait on DNS.
//!
//! A question that fails keeps its last answer; after `dns_grace` of failing, the upstreams that
//! ask it are called degraded (logged once, in `/api/upstreams` and `rampart_upstream_dns_degraded`)
//! and still use that last answer. Only a server that answered NXDOMAIN or an empty NOERROR says
//! a name has no address (SERVFAIL and REFUSED are failures); a name that had addresses keeps
//! them for `dns_hold` after that before its targets go, and one with none at all answers 503.

mod resolve;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use rampart_config::compile::discovered::{with_answers, Answers};
use rampart_config::LiveState;
use rampart_model::discovery::{DnsSettings, Found, Query};
use rampart_model::Snapshot;
use tokio::task::JoinSet;

/// The longest wait before a failed question is asked again.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How long a load waits for the first answers to its new questions.
const SETTLE: Duration = Duration::from_secs(5);

/// The questions of the snapshot in force and what they answered.
pub struct Discovery {
    settings: DnsSettings,
    resolver: Option<Arc<TokioResolver>>,
    /// Why no resolver could be made from the settings.
    resolver_error: Option<String>,
    entries: BTreeMap<Query, Entry>,
    asking: JoinSet<(Query, Result<resolve::Answer, String>)>,
    in_flight: HashSet<Query>,
}

/// One question's state.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// The last answer (`None`: never answered).
    pub found: Option<Vec<Found>>,
    /// When to ask again.
    next: Option<Instant>,
    /// Since when it fails, and how many times in a row.
    failing_since: Option<Instant>,
    failures: u32,
    pub error: Option<String>,
    /// Failing for longer than the grace period.
    pub degraded: bool,
    /// Since when it answers "no address" while its last addresses are held (`dns_hold`).
    empty_since: Option<Instant>,
    /// Upstreams that ask it.
    pub upstreams: Vec<String>,
}

impl Entry {
    /// `resolved`, `pending` (never answered yet), `failing` (keeping its last answer),
    /// `degraded` (failing for longer than the grace period) or `holding` (answers "no address"
    /// and keeps its last addresses until `dns_hold` runs out).
    pub fn state(&self) -> &'static str {
        match (self.degraded, self.error.is_some(), self.found.is_some()) {
            (true, _, _) => "degraded",
            (false, true, _) => "failing",
            (false, false, true) if self.empty_since.is_some() => "holding",
            (false, false, true) => "resolved",
            (false, false, false) => "pending",
        }
    }
}

/// What `/api/upstreams` and `/metrics` show of discovery.
#[derive(Debug, Default, Clone)]
pub struct DnsStatus {
    pub entries: Vec<(Query, Entry)>,
}

impl DnsStatus {
    /// The questions upstream `name` asks.
    pub fn of_upstream<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a (Query, Entry)> + 'a {
        self.entries
            .iter()
            .filter(move |(_, e)| e.upstreams.iter().any(|u| u == name))
    }
}

impl Default for Discovery {
    fn default() -> Discovery {
        Discovery::new()
    }
}

impl Discovery {
    /// No question asked yet; the first load's are asked by [`Discovery::complete`].
    pub fn new() -> Discovery {
        Discovery {
            settings: DnsSettings::default(),
            resolver: None,
            resolver_error: None,
            entries: BTreeMap::new(),
            asking: JoinSet::new(),
            in_flight: HashSet::new(),
        }
    }

    /// `snapshot` (a load's) with the targets its questions answer: the new ones are asked first,
    /// for up to [`SETTLE`] (past that, their upstreams start with no target from them).
    pub async fn complete(&mut self, snapshot: Snapshot, live: &mut LiveState) -> Snapshot {
        self.follow(&snapshot);
        self.settle(SETTLE).await;
        with_answers(&snapshot, &self.answers(), live).unwrap_or(snapshot)
    }

    /// The snapshot in force with the answers as they are now, when that changes its targets.
    pub fn publish(&self, current: &Snapshot, live: &mut LiveState) -> Option<Snapshot> {
        with_answers(current, &self.answers(), live)
    }

    /// Follows the questions and settings of `snapshot` (a load's): questions it no longer asks
    /// are forgotten, new ones are asked now; new settings ask everything again.
    pub fn follow(&mut self, snapshot: &Snapshot) {
        let mut asked: BTreeMap<Query, Vec<String>> = BTreeMap::new();
        for u in &snapshot.upstreams {
            for lookup in &u.lookups {
                asked.entry(lookup.query.clone()).or_default().push(u.name.clone());
            }
        }
        if snapshot.dns != self.settings || (self.resolver.is_none() && !asked.is_empty()) {
            self.settings = snapshot.dns.clone();
            self.asking.abort_all();
            self.in_flight.clear();
            match resolve::resolver(&self.settings) {
                Ok(r) => {
                    self.resolver = Some(Arc::new(r));
                    self.resolver_error = None;
                }
                Err(e) => {
                    tracing::warn!("dns: {e}; targets written by name get no address");
                    self.resolver = None;
                    self.resolver_error = Some(e);
                }
            }
            for entry in self.entries.values_mut() {
                entry.next = None;
            }
        }
        self.entries.retain(|q, _| asked.contains_key(q));
        for (query, upstreams) in asked {
            self.entries.entry(query).or_default().upstreams = upstreams;
        }
        self.ask_due(Instant::now());
    }

    /// Waits, up to `limit`, for the questions never answered yet (at start and after a load, so
    /// that a new upstream by name has its targets before it takes traffic). `true` when an
    /// answer came.
    async fn settle(&mut self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        let mut changed = false;
        while self
            .entries
            .iter()
            .any(|(q, e)| e.found.is_none() && self.in_flight.contains(q))
        {
            match tokio::time::timeout_at(deadline, self.asking.join_next()).await {
                Ok(Some(Ok((query, result)))) => changed |= self.record(query, result),
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        changed
    }

    /// Waits for the next answer, for the next question to fall due, or for a failing one to
    /// reach the end of its grace; `true` when the answers changed (then publish them).
    /// Cancel-safe: meant for a `select!`.
    pub async fn changed(&mut self) -> bool {
        let grace = self.settings.grace;
        let degrades = self
            .entries
            .values()
            .filter(|e| !e.degraded)
            .filter_map(|e| e.failing_since.map(|since| since + grace));
        let next = self.entries.values().filter_map(|e| e.next).chain(degrades).min();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(done) = self.asking.join_next(), if !self.asking.is_empty() => match done {
                Ok((query, result)) => self.record(query, result),
                Err(_) => false,
            },
            _ = sleep => {
                let now = Instant::now();
                self.degrade(now);
                self.ask_due(now);
                false
            }
        }
    }

    /// The last answer of every question answered so far.
    fn answers(&self) -> Answers {
        self.entries
            .iter()
            .filter_map(|(q, e)| e.found.clone().map(|f| (q.clone(), f)))
            .collect()
    }

    pub fn status(&self) -> DnsStatus {
        DnsStatus {
            entries: self.entries.iter().map(|(q, e)| (q.clone(), e.clone())).collect(),
        }
    }

    /// Asks every question that is due and not being asked.
    fn ask_due(&mut self, now: Instant) {
        let due: Vec<Query> = self
            .entries
            .iter()
            .filter(|(q, e)| e.next.is_none_or(|at| at <= now) && !self.in_flight.contains(*q))
            .map(|(q, _)| q.clone())
            .collect();
        for query in due {
            let Some(resolver) = self.resolver.clone() else {
                let error = self.resolver_error.clone().unwrap_or_default();
                self.record(query, Err(error));
                continue;
            };
            self.in_flight.insert(query.clone());
            self.asking.spawn(async move {
                let result = resolve::ask(&resolver, &query).await;
                (query, result)
            });
        }
    }

    /// Calls degraded the questions that have failed for the whole grace period (logged once).
    fn degrade(&mut self, now: Instant) {
        let grace = self.settings.grace;
        for (query, entry) in &mut self.entries {
            let Some(since) = entry.failing_since else { continue };
            if entry.degraded || now.duration_since(since) < grace {
                continue;
            }
            entry.degraded = true;
            tracing::warn!(
                query = %query,
                upstreams = %entry.upstreams.join(","),
                "dns: {query} has failed for {grace:?}: upstream(s) {} degraded (still using the last answer)",
                entry.upstreams.join(", ")
            );
        }
    }

    /// Takes in one question's outcome; `true` when its addresses changed.
    fn record(&mut self, query: Query, result: Result<resolve::Answer, String>) -> bool {
        self.in_flight.remove(&query);
        let settings = &self.settings;
        let Some(entry) = self.entries.get_mut(&query) else {
            return false;
        };
        let now = Instant::now();
        match result {
            Ok(answer) => {
                let ttl = answer
                    .ttl
                    .unwrap_or(settings.ttl_min)
                    .clamp(settings.ttl_min, settings.ttl_max);
                entry.next = Some(now + ttl);
                if entry.failing_since.take().is_some() {
                    tracing::info!(
                        query = %query,
                        "dns: {query} answers again ({} address(es))",
                        answer.found.len()
                    );
                }
                entry.failures = 0;
                entry.error = None;
                entry.degraded = false;
                let had_addresses = entry.found.as_ref().is_some_and(|f| !f.is_empty());
                if answer.found.is_empty() && had_addresses {
                    let since = *entry.empty_since.get_or_insert(now);
                    let until = since + settings.hold;
                    if now < until {
                        if since == now {
                            tracing::warn!(
                                query = %query,
                                upstreams = %entry.upstreams.join(","),
                                "dns: {query} answers no address; keeping its last answer for {:?} (dns_hold)",
                                settings.hold
                            );
                        }
                        entry.next = Some((now + ttl).min(until));
                        return false;
                    }
                } else if entry.empty_since.take().is_some() {
                    tracing::info!(query = %query, "dns: {query} has addresses again");
                }
                entry.empty_since = None;
                if entry.found.as_ref() == Some(&answer.found) {
                    return false;
                }
                let shown: Vec<String> = answer.found.iter().map(|f| f.addr.to_string()).collect();
                tracing::info!(
                    query = %query,
                    upstreams = %entry.upstreams.join(","),
                    "dns: {query}: {}",
                    if shown.is_empty() { "no address (its upstream answers 503)".to_string() } else { shown.join(", ") }
                );
                entry.found = Some(answer.found);
                true
            }
            Err(error) => {
                entry.failing_since.get_or_insert(now);
                entry.failures += 1;
                let backoff = settings
                    .ttl_min
                    .saturating_mul(1 << entry.failures.min(5))
                    .min(RETRY_MAX);
                entry.next = Some(now + backoff.max(settings.ttl_min));
                if entry.failures == 1 {
                    tracing::warn!(
                        query = %query,
                        "dns: cannot resolve {query}: {error}; {}",
                        match &entry.found {
                            Some(f) => format!("keeping its last answer ({} address(es))", f.len()),
                            None => "its targets stay unknown until it answers".to_string(),
                        }
                    );
                }
                entry.error = Some(error);
                self.degrade(now);
                false
            }
        }
    }
}
