//! HTTP-01 answers for a fleet, looked up on a miss: a worker asked for a token this instance
//! does not know (another instance's order, put up in the shared store a moment ago) hands the
//! token to a control-plane task that asks the store, and waits for the answer. The worker never
//! talks to the store itself, and a flood of unknown tokens is bounded: the queue is short, and a
//! token that finds it full is answered 404 at once.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rampart_model::acme::Http01Lookup;
use tokio::sync::{mpsc, oneshot};

use super::shared::Shared;

/// Tokens waiting for the store; more are answered 404 without a lookup.
const QUEUE: usize = 64;
/// How long a worker waits for the store's answer (the CA waits about 10 s for a validation).
const WAIT: Duration = Duration::from_secs(3);

type Ask = (String, oneshot::Sender<Option<String>>);

/// The lookup that workers call (through [`rampart_model::acme::AcmeShared`]).
pub struct StoreLookup {
    asks: mpsc::Sender<Ask>,
}

impl StoreLookup {
    /// The lookup, and the task that answers it from `store` (it ends when the lookup is
    /// dropped: a reload that changes ACME puts up a new one).
    pub fn new(store: Shared) -> (StoreLookup, impl Future<Output = ()> + Send) {
        let (asks, answers) = mpsc::channel(QUEUE);
        (StoreLookup { asks }, answer(store, answers))
    }
}

impl Http01Lookup for StoreLookup {
    fn lookup(&self, token: &str) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> {
        let (tx, rx) = oneshot::channel();
        let queued = self.asks.try_send((token.to_string(), tx)).is_ok();
        Box::pin(async move {
            if !queued {
                return None;
            }
            tokio::time::timeout(WAIT, rx).await.ok()?.ok()?
        })
    }
}

/// Answers each token from the store, one at a time.
async fn answer(mut store: Shared, mut asks: mpsc::Receiver<Ask>) {
    while let Some((token, reply)) = asks.recv().await {
        if reply.is_closed() {
            continue;
        }
        let found = match store.entry("http-01", &token).await {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!("acme: looking up an HTTP-01 token: {e:#}");
                None
            }
        };
        let _ = reply.send(found);
    }
}
