//! ACME in the control plane: certificates for the names TLS listeners list in `acme = [...]`,
//! obtained from the `[acme]` directory with the HTTP-01 challenge (answered by every HTTP
//! listener's first route), TLS-ALPN-01 (answered in the TLS listener's certificate choice) or
//! DNS-01 (a TXT record put on a DNS server, [`dns01`]: wildcards, and every name with
//! `challenge = "dns-01"`), kept under `[acme] storage`, and renewed at two thirds of their
//! lifetime. Workers only read what this publishes in [`AcmeShared`]; nothing here is on a
//! request's path.
//!
//! Until a name has a certificate, a handshake for it fails (no self-signed stand-in: a client
//! told to skip verification would take one). A certificate kept from an earlier run is served
//! at once, so a restart or a binary upgrade orders nothing while it is not due.

mod dns01;
mod job;
mod lookup;
mod on_demand;
mod order;
mod redis;
mod renewal_info;
mod shared;
mod store;
mod task;
mod tls_alpn;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rampart_model::acme::{AcmeSettings, AcmeShared};
use rampart_model::Snapshot;
use store::Issued;

/// The names to obtain and where from: one task runs them, started again when they change.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub settings: AcmeSettings,
    pub names: Vec<String>,
    /// The listeners' on-demand TLS (none: no name is obtained on demand).
    pub on_demand: Vec<rampart_model::acme::OnDemand>,
}

/// The ACME task of the config in force.
pub struct Acme {
    shared: Arc<AcmeShared>,
    /// The etcd the config comes from, for `storage = "etcd"`.
    etcd: Option<Arc<crate::etcd::Etcd>>,
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
    /// The renewal window the CA suggested (renewal information), Unix seconds.
    pub window: Option<(u64, u64)>,
    /// The last failure, with the CA's error; cleared by a success.
    pub error: Option<String>,
    pub failures: u32,
}

impl Acme {
    pub fn new(shared: Arc<AcmeShared>, etcd: Option<Arc<crate::etcd::Etcd>>) -> Acme {
        Acme {
            shared,
            etcd,
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
        let on_demand: Vec<_> = snapshot
            .listeners
            .iter()
            .filter_map(|l| l.tls.as_ref()?.on_demand.as_ref().map(|(od, _)| od.clone()))
            .collect();
        let wanted = snapshot
            .acme
            .clone()
            .filter(|_| !names.is_empty() || !on_demand.is_empty())
            .map(|settings| Wanted {
                settings,
                names,
                on_demand,
            });
        if self.running.as_ref().map(|(w, _)| w) == wanted.as_ref() {
            return;
        }
        // Names obtained on demand are kept too: the new task serves them again from the store
        // at their next handshake.
        if wanted.as_ref().is_none_or(|w| w.on_demand.is_empty()) {
            self.shared
                .keep_only(wanted.as_ref().map_or(&[][..], |w| w.names.as_slice()));
        }
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
        self.status.store(Default::default());
        // A fleet: the tokens of other instances' orders are looked up in the store it shares
        // from now on (the listeners are bound: the CA may come before this task has read the
        // store). The lookup's own task ends when it is replaced.
        let lookup = wanted
            .as_ref()
            .and_then(|w| match store::Store::new(&w.settings.storage, self.etcd.as_ref()) {
                store::Store::Shared(shared) => Some(shared),
                _ => None,
            })
            .map(|shared| {
                let (lookup, answering) = lookup::StoreLookup::new(shared);
                tokio::spawn(answering);
                Box::new(lookup) as Box<dyn rampart_model::acme::Http01Lookup>
            });
        self.shared.set_http_lookup(lookup);
        if let Some(wanted) = wanted {
            let task = tokio::spawn(task::run(
                wanted.clone(),
                self.shared.clone(),
                self.etcd.clone(),
                self.status.clone(),
            ));
            self.running = Some((wanted, task));
        }
    }
}

impl NameStatus {
    pub(crate) fn issued(&mut self, issued: &Issued) {
        *self = NameStatus {
            state: "valid",
            not_after: Some(unix_seconds(issued.not_after)),
            renew_at: Some(unix_seconds(issued.renew_at())),
            window: None,
            error: None,
            failures: 0,
        };
    }
}

/// `t` in Unix seconds (0 before the epoch).
pub(crate) fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
