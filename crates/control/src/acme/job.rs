//! One name's order as a task of its own, so that several names are ordered at once (up to
//! `[acme] max_concurrent_orders`): the fleet's lock on the name, a look at the store for a
//! certificate another instance obtained meanwhile, the order, the lock released.

use std::sync::Arc;
use std::time::Instant;

use instant_acme::{Account, CertificateIdentifier};
use rampart_model::acme::{AcmeSettings, AcmeShared};

use super::order::{obtain, renewal};
use super::store::{Issued, Store};
use super::unix_seconds;

/// What an order needs, taken from the ACME task when it starts.
pub(super) struct OrderJob {
    pub name: String,
    pub account: Account,
    pub settings: AcmeSettings,
    pub shared: Arc<AcmeShared>,
    /// A store of its own (a Redis connection per order in flight).
    pub store: Store,
    /// This instance, as the owner of the name's lock.
    pub owner: String,
    /// The certificate it renews, for a CA that offers renewal information.
    pub replaces: Option<CertificateIdentifier<'static>>,
    /// The expiry of the certificate served now (Unix seconds), if any.
    pub served_until: Option<u64>,
}

/// How an order ended.
pub(super) enum OrderOutcome {
    Issued(Issued),
    /// Another instance obtained the certificate while this one waited for the lock.
    ObtainedElsewhere(Issued),
    /// Another instance holds the name's lock: it is ordering it.
    LockedElsewhere,
    Failed(anyhow::Error),
}

impl OrderJob {
    pub(super) async fn run(mut self) -> (String, OrderOutcome) {
        let outcome = self.order().await;
        (self.name, outcome)
    }

    async fn order(&mut self) -> OrderOutcome {
        let name = self.name.as_str();
        match self.store.lock(name, &self.owner).await {
            Ok(true) => {}
            Ok(false) => return OrderOutcome::LockedElsewhere,
            Err(e) => return OrderOutcome::Failed(e),
        }
        // Another instance may have obtained it (or renewed it) while this one waited for the
        // lock: its certificate is kept before its lock is released.
        if let Ok(Some(kept)) = self.store.certificate(name).await {
            if renewal(&kept) > Instant::now() && Some(unix_seconds(kept.not_after)) != self.served_until {
                let _ = self.store.unlock(name, &self.owner).await;
                return OrderOutcome::ObtainedElsewhere(kept);
            }
        }
        let obtained = obtain(
            &self.account,
            name,
            &self.settings,
            &self.shared,
            &mut self.store,
            self.replaces.take(),
        )
        .await;
        if let Err(e) = self.store.unlock(name, &self.owner).await {
            tracing::warn!(name, "acme: {name}: cannot release the order lock: {e:#}");
        }
        match obtained {
            Ok(issued) => OrderOutcome::Issued(issued),
            Err(e) => OrderOutcome::Failed(e),
        }
    }
}
