//! A dynamic table (RFC 7541 section 2.3.2): entries newest first, evicted oldest first when the
//! table's size passes its maximum.

use std::collections::VecDeque;

use super::entry_size;

/// One side's dynamic table. Each entry keeps its name and value in one buffer.
#[derive(Debug, Default)]
pub(super) struct DynamicTable {
    entries: VecDeque<(Box<[u8]>, usize)>,
    size: usize,
    max: usize,
}

impl DynamicTable {
    pub(super) fn new(max: usize) -> Self {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max,
        }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Entry `i` (0: the newest): its name and value.
    pub(super) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|(both, name_len)| both.split_at(*name_len))
    }

    /// Changes the maximum size, evicting what no longer fits.
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// Adds an entry, evicting older ones to make room; one larger than the whole table empties
    /// it and is not added (RFC 7541 4.4).
    pub(super) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = entry_size(name, value);
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        let mut both = Vec::with_capacity(name.len() + value.len());
        both.extend_from_slice(name);
        both.extend_from_slice(value);
        self.entries.push_front((both.into_boxed_slice(), name.len()));
        self.size += size;
    }

    /// The index of an entry that is `name` with `value` (`Some(true)`) or only has `name`
    /// (`Some(false)`), the first such, searching newest first.
    #[inline]
    pub(super) fn find(&self, name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
        let mut named = None;
        for (i, (both, name_len)) in self.entries.iter().enumerate() {
            let (n, v) = both.split_at(*name_len);
            if n == name {
                if v == value {
                    return Some((i, true));
                }
                named.get_or_insert((i, false));
            }
        }
        named
    }

    fn evict_to(&mut self, room: usize) {
        while self.size > room {
            let Some((both, _)) = self.entries.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= both.len() + 32;
        }
    }
}
