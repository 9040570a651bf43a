//! Request coalescing: while one request for a key is on its way to the upstream (the leader),
//! others for the same key wait for it ([`InFlight::join`]) instead of going too, then look in the
//! store again. The leader's [`Leader`] guard ends the wait when it is dropped: after its response
//! was stored, or when it failed or was abandoned (its client left), so a waiter never waits on a
//! request that no longer runs; a waiter that finds nothing stored (the response was not
//! cacheable) goes upstream itself.
//!
//! A leader whose response can be shared as it arrives ([`Growing`]) publishes it the first time
//! it sees requests waiting ([`Leader::wanted`], [`Leader::publish`]): they are then answered
//! from it as it comes ([`Waiter::wait_shared`]) instead of once it is stored.

use std::collections::HashMap;
use std::future::poll_fn;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
// One lock per store for the keys in flight, taken by a miss and by its end: the same trade as
// the store's shards (see `store`), on misses only.
#[allow(clippy::disallowed_types)]
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use crate::growing::Growing;
use crate::lock;

/// One request on its way, and who waits for it.
#[derive(Default)]
struct Flight {
    done: AtomicBool,
    /// Requests that joined as waiters.
    waiting: AtomicUsize,
    #[allow(clippy::disallowed_types)]
    state: Mutex<FlightState>,
}

#[derive(Default)]
struct FlightState {
    wakers: Vec<Waker>,
    /// The leader's response, shared as it arrives.
    published: Option<Arc<Growing>>,
}

/// The keys with a request on its way.
pub struct InFlight<K> {
    #[allow(clippy::disallowed_types)]
    flights: Mutex<HashMap<K, Arc<Flight>, foldhash::quality::RandomState>>,
}

impl<K> Default for InFlight<K> {
    fn default() -> Self {
        InFlight {
            #[allow(clippy::disallowed_types)]
            flights: Mutex::new(HashMap::default()),
        }
    }
}

impl<K> std::fmt::Debug for InFlight<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").finish_non_exhaustive()
    }
}

/// What [`InFlight::join`] made of a request.
pub enum Joined<K: Hash + Eq + Clone> {
    /// The first for its key: it goes upstream; dropping the guard releases the others.
    Leader(Leader<K>),
    /// Another one is on its way: wait for it ([`Waiter::wait`]).
    Waiter(Waiter),
}

/// The leader's guard (owned: a request in the background may lead).
pub struct Leader<K: Hash + Eq + Clone> {
    in_flight: Arc<InFlight<K>>,
    key: K,
    flight: Arc<Flight>,
}

/// A request waiting for a leader.
pub struct Waiter {
    flight: Arc<Flight>,
}

impl<K: Hash + Eq + Clone> InFlight<K> {
    /// Leads the requests for `key`, or waits for the one that does.
    pub fn join(self: &Arc<Self>, key: &K) -> Joined<K> {
        let mut flights = lock(&self.flights);
        if let Some(flight) = flights.get(key) {
            flight.waiting.fetch_add(1, Ordering::Relaxed);
            return Joined::Waiter(Waiter { flight: flight.clone() });
        }
        let flight = Arc::new(Flight::default());
        flights.insert(key.clone(), flight.clone());
        Joined::Leader(Leader {
            in_flight: self.clone(),
            key: key.clone(),
            flight,
        })
    }

    /// Keys with a request on its way now.
    pub fn len(&self) -> usize {
        lock(&self.flights).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Waiter {
    /// Resolves when the leader is done (stored its response, failed, or was abandoned).
    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.flight.done.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            lock(&self.flight.state).wakers.push(cx.waker().clone());
            // Done between the look and the registration: the wake may have gone before.
            match self.flight.done.load(Ordering::Acquire) {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        })
        .await
    }

    /// Resolves with the leader's response as it arrives once the leader shares it, or with
    /// `None` when the leader is done without sharing it.
    pub async fn wait_shared(&self) -> Option<Arc<Growing>> {
        poll_fn(|cx| {
            let mut state = lock(&self.flight.state);
            if let Some(growing) = &state.published {
                return Poll::Ready(Some(growing.clone()));
            }
            if self.flight.done.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            state.wakers.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl<K: Hash + Eq + Clone> Leader<K> {
    /// Whether requests wait for this one and its response is not shared with them yet.
    pub fn wanted(&self) -> bool {
        self.flight.waiting.load(Ordering::Relaxed) > 0 && lock(&self.flight.state).published.is_none()
    }

    /// Shares the response as it arrives with the requests that wait, and those that come.
    pub fn publish(&self, growing: Arc<Growing>) {
        let mut state = lock(&self.flight.state);
        state.published = Some(growing);
        for waker in std::mem::take(&mut state.wakers) {
            waker.wake();
        }
    }
}

impl<K: Hash + Eq + Clone> Drop for Leader<K> {
    fn drop(&mut self) {
        lock(&self.in_flight.flights).remove(&self.key);
        self.flight.done.store(true, Ordering::Release);
        let mut state = lock(&self.flight.state);
        // A shared response the leader did not see to its end never will be whole.
        if let Some(growing) = &state.published {
            growing.finish(false);
        }
        for waker in std::mem::take(&mut state.wakers) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::Context;

    #[test]
    fn followers_wait_until_the_leader_is_dropped_and_then_a_new_leader_may_start() {
        let in_flight = Arc::new(InFlight::default());
        let leader = match in_flight.join(&"k") {
            Joined::Leader(l) => l,
            Joined::Waiter(_) => panic!("the first leads"),
        };
        let Joined::Waiter(waiter) = in_flight.join(&"k") else {
            panic!("the second waits");
        };
        assert!(matches!(in_flight.join(&"other"), Joined::Leader(_)));
        let mut waiting = pin!(waiter.wait());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        drop(leader);
        assert!(waiting.as_mut().poll(&mut cx).is_ready());
        assert!(in_flight.is_empty());
        assert!(matches!(in_flight.join(&"k"), Joined::Leader(_)));
    }
}
