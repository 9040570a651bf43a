//! A worker's free list of reusable things (buffers, pipes) that shrinks when they go unused.

use std::cell::RefCell;

/// Items kept for reuse, at most `max`. Remembers the fewest items it held since the last
/// [`FreeList::trim`]: that many were never needed in the meantime, and `trim` frees them. Under
/// steady load the list keeps what the load uses; after a burst it shrinks back within one trim
/// period, so a burst's buffers do not stay resident.
pub struct FreeList<T> {
    inner: RefCell<Inner<T>>,
    max: usize,
}

struct Inner<T> {
    items: Vec<T>,
    /// The fewest items held since the last trim.
    low: usize,
}

impl<T> FreeList<T> {
    pub fn new(max: usize) -> Self {
        FreeList {
            inner: RefCell::new(Inner {
                items: Vec::new(),
                low: 0,
            }),
            max,
        }
    }

    /// An item, if one is kept.
    pub fn take(&self) -> Option<T> {
        let mut inner = self.inner.borrow_mut();
        let item = inner.items.pop();
        inner.low = inner.low.min(inner.items.len());
        item
    }

    /// Keeps `item` for reuse, or drops it when the list is full.
    pub fn give(&self, item: T) {
        let mut inner = self.inner.borrow_mut();
        if inner.items.len() < self.max {
            inner.items.push(item);
        }
    }

    /// Frees the items that were not needed since the last trim.
    pub fn trim(&self) {
        let mut inner = self.inner.borrow_mut();
        let keep = inner.items.len() - inner.low.min(inner.items.len());
        inner.items.truncate(keep);
        if inner.items.capacity() > 2 * keep.max(16) {
            inner.items.shrink_to(keep.max(16));
        }
        inner.low = inner.items.len();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.borrow().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::FreeList;

    #[test]
    fn trim_frees_what_went_unused_since_the_last_trim() {
        let list = FreeList::new(100);
        for i in 0..10 {
            list.give(i);
        }
        list.trim();
        // All ten came back from use during this period: all are kept.
        assert_eq!(list.len(), 10);
        // Use at most 3 at a time: 7 were never needed.
        for _ in 0..2 {
            let a: Vec<_> = (0..3).filter_map(|_| list.take()).collect();
            a.into_iter().for_each(|x| list.give(x));
        }
        list.trim();
        assert_eq!(list.len(), 3);
        // Nothing taken at all: everything goes.
        list.trim();
        assert_eq!(list.len(), 0);
    }

    #[test]
    fn a_full_list_drops_what_it_is_given() {
        let list = FreeList::new(2);
        (0..5).for_each(|i| list.give(i));
        assert_eq!(list.len(), 2);
    }
}
