//! An upstream's queue of requests waiting for a request slot (`max_requests_per_target`), shared
//! by every worker and served first come, first served.
//!
//! A request that finds every target full joins the back of the queue; when a slot is given
//! back, the request at the front is woken and takes it. The check for a free slot and the join
//! happen under the queue's lock, and a slot given back wakes the front under the same lock, so a
//! slot freed between the check and the join is never missed. While the queue holds anyone, a
//! newcomer joins it rather than taking a freed slot ahead of those waiting. A woken request that
//! still finds no room (a slot taken by a request that came before the queue formed) goes back to
//! the front.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering::Relaxed, Ordering::SeqCst};
// The order is the one lock on Rampart's data path, taken only by an upstream with
// `max_requests_per_target` when its targets are full: a slot given back checks the atomic count
// of waiting requests first and takes no lock when none waits.
#[allow(clippy::disallowed_types)]
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use atomic_waker::AtomicWaker;

/// The requests waiting for a slot at one upstream's targets.
#[derive(Debug, Default)]
pub struct RequestQueue {
    /// Requests waiting now (in `order` or woken and looking), across workers; bounds `size`.
    waiting: AtomicU32,
    #[allow(clippy::disallowed_types)]
    line: Mutex<Line>,
}

/// The queue's order, under its lock.
#[derive(Debug, Default)]
struct Line {
    /// Who is next: the front is woken when a slot is given back.
    order: VecDeque<Arc<Waiter>>,
    /// Requests woken that have not looked yet: they come before everyone in `order`.
    woken: u32,
}

/// One waiting request's place, as the queue holds it.
#[derive(Debug, Default)]
pub struct Waiter {
    woken: AtomicBool,
    waker: AtomicWaker,
}

/// What a request gets from [`RequestQueue::join`]: its place, left when it is dropped.
#[derive(Debug)]
pub struct Place<'q> {
    queue: &'q RequestQueue,
    waiter: Arc<Waiter>,
    /// Lines up at the front (a retry: it waited once already).
    ahead: bool,
    /// At its last look it was first in line, with no one woken before it.
    first: std::cell::Cell<bool>,
}

impl RequestQueue {
    /// Requests waiting now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(SeqCst)
    }

    /// Whether anyone waits: a newcomer then queues behind them.
    pub fn is_empty(&self) -> bool {
        self.waiting() == 0
    }

    /// Joins the queue unless `size` requests wait already (`None`: full). With `ahead` (a
    /// retry, which waited once already), the request lines up at the front.
    pub fn join(&self, size: u32, ahead: bool) -> Option<Place<'_>> {
        self.waiting
            .fetch_update(SeqCst, SeqCst, |n| (n < size).then_some(n + 1))
            .ok()?;
        // Pairs with the fence in `wake_front`: either the slot given back is seen by this
        // request's look, or this request is seen waiting by the one who gave it back.
        fence(SeqCst);
        Some(Place {
            queue: self,
            waiter: Arc::default(),
            ahead,
            first: std::cell::Cell::new(false),
        })
    }

    /// After a slot was given back: wakes the request at the front, if any.
    pub fn wake_front(&self) {
        fence(SeqCst);
        if self.is_empty() {
            return;
        }
        let mut line = self.lock();
        if let Some(waiter) = line.order.pop_front() {
            line.woken += 1;
            // Marked under the lock, so its next look knows it was woken whenever it comes.
            waiter.woken.store(true, Relaxed);
            drop(line);
            waiter.wake();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Waiter {
    /// Wakes the task of a waiter already marked woken.
    fn wake(&self) {
        self.waker.wake();
    }
}

impl Place<'_> {
    /// Runs `take` (the look for a free slot) under the queue's lock and, when it finds none,
    /// puts this request in line: at the back on its first look (at the front when it came
    /// `ahead`), at the front after it was woken (it was first in line). A request that was not
    /// woken looks only when no one is before it, woken or in line (a retry that came `ahead`
    /// looks at once): a newcomer never takes the slot a woken request is on its way to.
    pub fn take_or_line_up<T>(&self, take: impl FnOnce() -> Option<T>) -> Option<T> {
        let mut line = self.queue.lock();
        let position = line.order.iter().position(|w| Arc::ptr_eq(w, &self.waiter));
        let woken = self.waiter.woken.swap(false, Relaxed);
        if woken {
            line.woken -= 1;
        } else {
            let someone_before = match position {
                Some(p) => p > 0 || line.woken > 0,
                None => !self.ahead && (!line.order.is_empty() || line.woken > 0),
            };
            if someone_before {
                if position.is_none() {
                    line.order.push_back(self.waiter.clone());
                }
                self.first.set(false);
                return None;
            }
        }
        let taken = take();
        match (taken.is_some(), position) {
            (true, Some(p)) => {
                line.order.remove(p);
            }
            (false, None) if woken || self.ahead => line.order.push_front(self.waiter.clone()),
            (false, None) => line.order.push_back(self.waiter.clone()),
            _ => {}
        }
        let front = line.order.front().is_some_and(|w| Arc::ptr_eq(w, &self.waiter));
        self.first.set(front && line.woken == 0);
        taken
    }

    /// Whether, at its last look, this request was first in line with no one woken before it:
    /// the one that should look again now and then for room that came back without a slot given
    /// back (the others wait for their wake).
    pub fn is_first(&self) -> bool {
        self.first.get()
    }

    /// Waits until a slot given back wakes this request (the caller bounds the wait).
    pub async fn woken(&self) {
        poll_fn(|cx| {
            if self.waiter.woken.load(Relaxed) {
                return Poll::Ready(());
            }
            self.waiter.waker.register(cx.waker());
            if self.waiter.woken.load(Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for Place<'_> {
    /// Leaves the queue. A request woken that leaves without its slot (served, timed out, or
    /// gone) passes the wake to the next in line.
    fn drop(&mut self) {
        let mut line = self.queue.lock();
        if let Some(p) = line.order.iter().position(|w| Arc::ptr_eq(w, &self.waiter)) {
            line.order.remove(p);
        }
        let woken = self.waiter.woken.swap(false, Relaxed);
        if woken {
            line.woken -= 1;
        }
        drop(line);
        self.queue.waiting.fetch_sub(1, SeqCst);
        if woken {
            self.queue.wake_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn first_come_first_served() {
        let queue = RequestQueue::default();
        let free = Cell::new(0);
        let take = || (free.get() > 0).then(|| free.set(free.get() - 1));
        let a = queue.join(10, false).unwrap();
        let b = queue.join(10, false).unwrap();
        assert!(a.take_or_line_up(take).is_none());
        assert!(b.take_or_line_up(take).is_none());
        assert!(a.is_first() && !b.is_first());
        assert_eq!(queue.waiting(), 2);
        // A slot comes back: `a` is woken, not `b`; `b` may not look while `a` is ahead.
        free.set(1);
        queue.wake_front();
        assert!(a.waiter.woken.load(Relaxed) && !b.waiter.woken.load(Relaxed));
        assert!(b.take_or_line_up(take).is_none());
        assert!(a.take_or_line_up(take).is_some());
        drop(a);
        assert_eq!(queue.waiting(), 1);
        // `b` is first now and may look on its own.
        free.set(1);
        assert!(b.take_or_line_up(take).is_some());
    }

    #[test]
    fn a_newcomer_queues_behind_a_woken_request_instead_of_taking_its_slot() {
        let queue = RequestQueue::default();
        let free = Cell::new(0);
        let take = || (free.get() > 0).then(|| free.set(free.get() - 1));
        let a = queue.join(10, false).unwrap();
        assert!(a.take_or_line_up(take).is_none());
        // A slot comes back and wakes `a`; before `a` runs, a newcomer joins: it does not look.
        free.set(1);
        queue.wake_front();
        let newcomer = queue.join(10, false).unwrap();
        assert!(newcomer.take_or_line_up(take).is_none());
        assert_eq!(free.get(), 1, "the slot is still there for `a`");
        assert!(a.take_or_line_up(take).is_some());
        // With no one woken or in line before it, a request looks on its own (the first in
        // line, after its wait for a wake ran out).
        free.set(1);
        assert!(newcomer.take_or_line_up(take).is_some());
    }

    #[test]
    fn full_queue_refuses_and_a_woken_leaver_passes_the_wake_on() {
        let queue = RequestQueue::default();
        let a = queue.join(2, false).unwrap();
        let b = queue.join(2, false).unwrap();
        assert!(queue.join(2, false).is_none());
        assert!(a.take_or_line_up(|| None::<()>).is_none());
        assert!(b.take_or_line_up(|| None::<()>).is_none());
        queue.wake_front();
        // `a` leaves (its wait ran out) without a slot: `b` gets the wake.
        drop(a);
        assert!(b.waiter.woken.load(Relaxed));
        // Woken and still without room: back to the front.
        let c = queue.join(2, false).unwrap();
        assert!(c.take_or_line_up(|| None::<()>).is_none());
        assert!(b.take_or_line_up(|| None::<()>).is_none());
        assert!(Arc::ptr_eq(queue.lock().order.front().unwrap(), &b.waiter));
        // A retry lines up ahead of everyone.
        drop(c);
        let retry = queue.join(2, true).unwrap();
        assert!(retry.take_or_line_up(|| None::<()>).is_none());
        assert!(Arc::ptr_eq(queue.lock().order.front().unwrap(), &retry.waiter));
    }
}
