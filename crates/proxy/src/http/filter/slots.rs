//! Per-worker filter state: each worker's list of filter slots ([`WorkerSlots`]), found by the
//! index the config compiler gave the filter ([`FilterSlot`]), and the narrow view of the worker
//! a filter gets ([`FilterWorker`]).
//!
//! A slot holds one filter's [`HttpFilter::WorkerState`]: a variant of [`SlotState`] for a
//! built-in (reached by a `match`, no hash, no downcast), or a box for an external filter
//! (reached by one type check). A slot remembers the filter definition that owns it; a filter
//! that finds a slot of another owner (its index was freed by a reload and handed to it while a
//! request of the older snapshot still used it) starts it over, so state never passes between
//! definitions. The worker's housekeeping empties the slots no filter of the current snapshot
//! owns ([`WorkerSlots::retain`]).

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

use rampart_model::filter::rate_limit::RedisEndpoint;
use rampart_model::filter::{self, FilterId, FilterSlot};

use super::HttpFilter;
use crate::filters::rate_limit::redis::RedisClient;
use crate::filters::worker::FilterWorkerState;

/// A built-in filter: its [`HttpFilter::WorkerState`] is a variant of [`SlotState`] (the
/// `builtin_filters!` list in `run.rs` implements it).
pub(crate) trait BuiltinFilter: HttpFilter {
    /// Runs `f` on the filter's state in `slot`, made (default) if the slot holds something else.
    fn with_state_in<R>(slot: &mut SlotState, f: impl FnOnce(&mut Self::WorkerState) -> R) -> R;
    /// The filter's state in `slot`, if it holds the filter's.
    fn existing_in(slot: &mut SlotState) -> Option<&mut Self::WorkerState>;
}

/// One slot of one worker.
#[derive(Default)]
struct WorkerSlot {
    owner: Option<FilterId>,
    state: SlotState,
}

/// A worker's filter slots, by index.
#[derive(Default)]
pub struct WorkerSlots {
    slots: RefCell<Vec<WorkerSlot>>,
}

impl WorkerSlots {
    /// Runs `f` on slot `slot` (started over when another owner had it). The slots are borrowed
    /// for the call: `f` cannot hold them across an `.await` and must not reach a slot again.
    fn with<R>(&self, slot: FilterSlot, f: impl FnOnce(&mut SlotState) -> R) -> R {
        let mut slots = self.slots.borrow_mut();
        let index = slot.index as usize;
        if slots.len() <= index {
            slots.resize_with(index + 1, WorkerSlot::default);
        }
        let s = &mut slots[index];
        if s.owner != Some(slot.owner) {
            s.owner = Some(slot.owner);
            s.state = SlotState::Empty;
        }
        f(&mut s.state)
    }

    /// Runs `f` on slot `slot` if `slot`'s owner has it.
    fn existing<R>(&self, slot: FilterSlot, f: impl FnOnce(&mut SlotState) -> Option<R>) -> Option<R> {
        let mut slots = self.slots.borrow_mut();
        let s = slots.get_mut(slot.index as usize)?;
        if s.owner != Some(slot.owner) {
            return None;
        }
        f(&mut s.state)
    }

    /// Keeps the slots of `live` (the current snapshot's), empties the others and gives up the
    /// empty ones at the end.
    pub fn retain(&self, live: impl Iterator<Item = FilterSlot>) {
        let mut slots = self.slots.borrow_mut();
        let mut keep = vec![false; slots.len()];
        for slot in live {
            if let Some(s) = slots.get(slot.index as usize) {
                if s.owner == Some(slot.owner) {
                    keep[slot.index as usize] = true;
                }
            }
        }
        for (s, keep) in slots.iter_mut().zip(keep) {
            if !keep {
                *s = WorkerSlot::default();
            }
        }
        while slots.last().is_some_and(|s| s.owner.is_none()) {
            slots.pop();
        }
    }

    /// How many slots hold a filter's state.
    pub fn len(&self) -> usize {
        self.slots.borrow().iter().filter(|s| s.owner.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a filter sees of the worker it runs on: the worker's id, its random numbers, the
/// filter's own per-worker state, and (for built-ins) the worker's shared connections. Nothing
/// else of the worker: its pools, buffers and counters are not the filters' business.
#[derive(Clone, Copy)]
pub struct FilterWorker<'a> {
    state: &'a FilterWorkerState,
    slot: FilterSlot,
}

impl<'a> FilterWorker<'a> {
    pub(crate) fn new(state: &'a FilterWorkerState, slot: FilterSlot) -> Self {
        FilterWorker { state, slot }
    }

    /// The worker's number (0 to workers - 1).
    pub fn id(&self) -> usize {
        self.state.id()
    }

    /// 64 random bits from the worker's generator (fast, good enough for ids; not for secrets).
    pub fn random(&self) -> u64 {
        self.state.random()
    }

    /// The filter's slot.
    pub fn slot(&self) -> FilterSlot {
        self.slot
    }

    /// Runs `f` on the calling filter's state on this worker (`filter` is the filter itself, to
    /// name its type), made with `Default` on first use and kept across reloads that leave the
    /// filter as it was. The state is borrowed for the call only: `f` cannot hold it across an
    /// `.await`, and must not call `with_state` again.
    pub fn with_state<F: HttpFilter, R>(&self, filter: &F, f: impl FnOnce(&mut F::WorkerState) -> R) -> R {
        let _ = filter;
        self.state.slots.with(self.slot, |slot| {
            if let Some(state) = match slot {
                SlotState::External(b) => b.downcast_mut::<F::WorkerState>(),
                _ => None,
            } {
                return f(state);
            }
            let mut fresh = Box::<F::WorkerState>::default();
            let result = f(&mut fresh);
            *slot = SlotState::External(fresh);
            result
        })
    }

    /// [`FilterWorker::with_state`] for a built-in: its state is a variant of the slot's enum.
    pub(crate) fn builtin_state<F: BuiltinFilter, R>(&self, filter: &F, f: impl FnOnce(&mut F::WorkerState) -> R) -> R {
        let _ = filter;
        self.state.slots.with(self.slot, |slot| F::with_state_in(slot, f))
    }

    /// Runs `f` on a built-in's state if this worker has it (`None` otherwise).
    pub(crate) fn existing_builtin_state<F: BuiltinFilter, R>(
        &self,
        filter: &F,
        f: impl FnOnce(&mut F::WorkerState) -> R,
    ) -> Option<R> {
        let _ = filter;
        self.state.slots.existing(self.slot, |slot| F::existing_in(slot).map(f))
    }

    /// The worker's client of the Redis at `endpoint` (one per server, shared by the filters
    /// that use it).
    pub(crate) fn redis_client(&self, endpoint: &RedisEndpoint) -> Rc<RedisClient> {
        self.state.redis_client(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter;

    impl HttpFilter for Counter {
        type State = ();
        type WorkerState = u32;
    }

    #[test]
    fn each_slot_has_its_owner_state_until_another_owner_or_housekeeping_takes_it() {
        let state = FilterWorkerState::new(3);
        let (a, b) = (FilterSlot::fresh(0), FilterSlot::fresh(2));
        let count = |slot| {
            FilterWorker::new(&state, slot).with_state(&Counter, |n| {
                *n += 1;
                *n
            })
        };
        assert_eq!((count(a), count(a), count(b)), (1, 2, 1));
        assert_eq!(FilterWorker::new(&state, a).id(), 3);
        // Another owner of index 0 starts over; the first owner then too.
        let a2 = FilterSlot {
            index: 0,
            ..FilterSlot::fresh(0)
        };
        assert_eq!(count(a2), 1);
        assert_eq!(count(a), 1);
        // Housekeeping keeps only the live slots.
        assert_eq!(state.slots.len(), 2);
        state.slots.retain([a].into_iter());
        assert_eq!(state.slots.len(), 1);
        assert_eq!(count(a), 2);
        assert_eq!(count(b), 1);
    }
}

/// Declares each built-in filter's per-worker state (a variant of [`SlotState`]) from the model's
/// list of built-ins (`rampart_model::with_builtin_filters!`).
macro_rules! builtin_slot_states {
    ($($(#[$doc:meta])* $name:ident($settings:ident) = $type_name:literal,)*) => {
        /// One filter's state on one worker (its slot's content).
        #[derive(Default)]
        pub(crate) enum SlotState {
            /// Nothing yet.
            #[default]
            Empty,
            $($name(<filter::$settings as HttpFilter>::WorkerState),)*
            /// An external filter's [`HttpFilter::WorkerState`], boxed.
            External(Box<dyn Any>),
        }

        $(
            impl BuiltinFilter for filter::$settings {
                fn with_state_in<R>(slot: &mut SlotState, f: impl FnOnce(&mut Self::WorkerState) -> R) -> R {
                    if let SlotState::$name(state) = slot {
                        return f(state);
                    }
                    let mut fresh = Default::default();
                    let result = f(&mut fresh);
                    *slot = SlotState::$name(fresh);
                    result
                }

                fn existing_in(slot: &mut SlotState) -> Option<&mut Self::WorkerState> {
                    match slot {
                        SlotState::$name(state) => Some(state),
                        _ => None,
                    }
                }
            }
        )*
    };
}

rampart_model::with_builtin_filters!(builtin_slot_states);
