//! The slots of filters' per-worker state across reloads ([`FilterSlots`]), and the definition
//! digest a filter is recognised by ([`DefinitionDigest`]).
//!
//! **The rule.** A filter keeps its slot (index and owner), and so every worker's state for it,
//! when a reload finds a filter
//!
//! - in the same place: the same listener's `filters`, or the same route's chain (`LISTENER` or
//!   `LISTENER/ROUTE`),
//! - with the same definition: its `type`, every key and value of its table, and the content of
//!   every file the filter read (an htpasswd file, JWT key files, a CA file): a file changed in
//!   place is a new definition, so nothing verified against the old one survives it,
//! - and, among filters of that place with the same definition, in the same order (the second
//!   identical `rate_limit` of a route keeps the second one's state).
//!
//! Moving a filter elsewhere in its list keeps its state; changing any of its keys, or moving it
//! to another route, starts it over. The filters a route's legacy keys stand for
//! (`max_body_size`, `strip_prefix`, `request_headers`, ...) are recognised by their compiled
//! settings. External filters follow the same rule by their options: one whose factory reads
//! something else (a file of its own) is kept while its options are unchanged.
//!
//! A new filter takes the lowest index no filter of the previous snapshot used, with a new
//! owner; an index freed by a reload is handed out again only from the next one on, and a
//! worker that meets a slot of another owner (a request of an older snapshot still running)
//! starts it over, so state never passes from one definition to another.

use std::collections::HashMap;

use rampart_model::filter::{FilterId, FilterSlot};
use sha2::{Digest, Sha256};
use toml::Value;

use crate::raw::RawFilter;

/// A filter's definition as a digest: its type, its table and the files it read.
#[derive(Clone)]
pub(crate) struct DefinitionDigest(Sha256);

impl DefinitionDigest {
    /// The digest of a filter table (its `type` included), before any file is read.
    pub fn of_table(table: &RawFilter) -> Self {
        let mut d = Sha256::new();
        d.update(b"table\0");
        for (key, value) in table {
            feed_str(&mut d, key.get_ref());
            feed_value(&mut d, value.get_ref());
        }
        DefinitionDigest(d)
    }

    /// The digest of a filter that has no table (a route's legacy key): its compiled settings
    /// as `Debug` writes them.
    pub fn of_settings(settings: &impl std::fmt::Debug) -> Self {
        let mut d = Sha256::new();
        d.update(b"settings\0");
        feed_str(&mut d, &format!("{settings:?}"));
        DefinitionDigest(d)
    }

    /// Adds the content of a file the filter read.
    pub fn add_file(&mut self, bytes: &[u8]) {
        self.0.update(b"file\0");
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

fn feed_str(d: &mut Sha256, s: &str) {
    d.update((s.len() as u64).to_le_bytes());
    d.update(s.as_bytes());
}

/// A TOML value, each kind tagged and each length written, so that no two values feed the same
/// bytes.
fn feed_value(d: &mut Sha256, v: &Value) {
    match v {
        Value::String(s) => {
            d.update(b"s");
            feed_str(d, s);
        }
        Value::Integer(n) => {
            d.update(b"i");
            d.update(n.to_le_bytes());
        }
        Value::Float(f) => {
            d.update(b"f");
            d.update(f.to_bits().to_le_bytes());
        }
        Value::Boolean(b) => d.update(if *b { b"T" } else { b"F" }),
        Value::Datetime(t) => {
            d.update(b"d");
            feed_str(d, &t.to_string());
        }
        Value::Array(items) => {
            d.update(b"a");
            d.update((items.len() as u64).to_le_bytes());
            for item in items {
                feed_value(d, item);
            }
        }
        Value::Table(table) => {
            d.update(b"t");
            d.update((table.len() as u64).to_le_bytes());
            for (key, value) in table {
                feed_str(d, key);
                feed_value(d, value);
            }
        }
    }
}

/// Which filter a slot belongs to: its place, its definition, and which of the identical
/// definitions of that place it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SlotKey {
    place: String,
    definition: [u8; 32],
    nth: u32,
}

/// The slot of every filter of the last snapshot that compiled, and the slots a load in
/// progress hands out (they replace the others only when that load compiles).
#[derive(Debug, Default)]
pub(crate) struct FilterSlots {
    committed: HashMap<SlotKey, FilterSlot>,
    /// Indices the committed snapshot leaves unused, lowest first.
    free: Vec<u32>,
    /// One past the highest index handed out so far.
    end: u32,
    /// This load's slots.
    load: HashMap<SlotKey, FilterSlot>,
    /// How many filters of each place and definition this load has seen.
    seen: HashMap<(String, [u8; 32]), u32>,
    /// Free indices this load has taken, and its end.
    load_taken: usize,
    load_end: u32,
}

impl FilterSlots {
    /// Starts a load: what an earlier load that failed handed out is forgotten.
    pub fn begin_load(&mut self) {
        self.load.clear();
        self.seen.clear();
        self.load_taken = 0;
        self.load_end = self.end;
    }

    /// The slot of a filter defined in `place` as `definition`: the previous snapshot's, when
    /// it had the same filter there, else a free index with a new owner.
    pub fn slot(&mut self, place: &str, definition: DefinitionDigest) -> FilterSlot {
        let definition = definition.finish();
        let count = self.seen.entry((place.to_string(), definition)).or_insert(0);
        let key = SlotKey {
            place: place.to_string(),
            definition,
            nth: *count,
        };
        *count += 1;
        let slot = match self.committed.get(&key) {
            Some(slot) => *slot,
            None => FilterSlot {
                index: self.take_index(),
                owner: FilterId::new(),
            },
        };
        self.load.insert(key, slot);
        slot
    }

    fn take_index(&mut self) -> u32 {
        if let Some(&index) = self.free.get(self.load_taken) {
            self.load_taken += 1;
            return index;
        }
        self.load_end += 1;
        self.load_end - 1
    }

    /// The load compiled: its slots are the ones the next load compares with.
    pub fn commit(&mut self) {
        self.committed = std::mem::take(&mut self.load);
        self.end = self.load_end;
        let mut used = vec![false; self.end as usize];
        for slot in self.committed.values() {
            used[slot.index as usize] = true;
        }
        // Trailing unused indices are given up, so the index space stays as small as the config.
        while used.last() == Some(&false) {
            used.pop();
        }
        self.end = used.len() as u32;
        self.free = (0..self.end).filter(|&i| !used[i as usize]).collect();
        self.seen.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(text: &str) -> DefinitionDigest {
        DefinitionDigest::of_settings(&text)
    }

    #[test]
    fn unchanged_filters_keep_their_slots_and_changed_ones_get_new_owners() {
        let mut slots = FilterSlots::default();
        slots.begin_load();
        let a = slots.slot("web", digest("a"));
        let b = slots.slot("web", digest("b"));
        let b2 = slots.slot("web", digest("b"));
        slots.commit();
        assert_eq!((a.index, b.index, b2.index), (0, 1, 2));

        // Reload: `a` changed, `b` kept twice, its order against `a` swapped.
        slots.begin_load();
        let b_again = slots.slot("web", digest("b"));
        let a_changed = slots.slot("web", digest("a2"));
        let b2_again = slots.slot("web", digest("b"));
        let elsewhere = slots.slot("other", digest("b"));
        slots.commit();
        assert_eq!((b_again, b2_again), (b, b2));
        assert_ne!(a_changed.owner, a.owner);
        // a's index is free only from the next load on.
        assert_eq!((a_changed.index, elsewhere.index), (3, 4));

        slots.begin_load();
        let new = slots.slot("web", digest("c"));
        assert_eq!(new.index, 0, "the lowest index the previous snapshot left");
    }

    #[test]
    fn a_failed_load_hands_out_nothing() {
        let mut slots = FilterSlots::default();
        slots.begin_load();
        let a = slots.slot("web", digest("a"));
        slots.commit();
        slots.begin_load();
        let _ = slots.slot("web", digest("x"));
        // No commit: the load failed.
        slots.begin_load();
        assert_eq!(slots.slot("web", digest("a")), a);
        let y = slots.slot("web", digest("y"));
        assert_eq!(y.index, 1);
        slots.commit();
        assert_eq!(slots.end, 2);
    }

    #[test]
    fn files_and_values_change_the_digest() {
        let table = |v: i64| {
            let mut t = RawFilter::new();
            t.insert(
                toml::Spanned::new(0..1, "type".to_string()),
                toml::Spanned::new(0..1, Value::String("x".into())),
            );
            t.insert(
                toml::Spanned::new(5..6, "n".to_string()),
                toml::Spanned::new(7..8, Value::Integer(v)),
            );
            t
        };
        let one = DefinitionDigest::of_table(&table(1)).finish();
        assert_eq!(one, DefinitionDigest::of_table(&table(1)).finish());
        assert_ne!(one, DefinitionDigest::of_table(&table(2)).finish());
        let mut with_file = DefinitionDigest::of_table(&table(1));
        with_file.add_file(b"alice:hash");
        assert_ne!(one, with_file.clone().finish());
        let mut other_file = DefinitionDigest::of_table(&table(1));
        other_file.add_file(b"alice:other");
        assert_ne!(with_file.finish(), other_file.finish());
    }
}
