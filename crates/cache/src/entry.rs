//! A stored response ([`Entry`]): the head as the cache keeps it (the fields section 3.1 lets it
//! keep), the body, and what the rules need to judge it later (the request fields it was chosen
//! by, when it came, its freshness lifetime and directives).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rampart_proto::h1::Field;
use rampart_proto::message::{BodyLength, FieldsRef, ResponseHead};

use crate::policy::control::{Directives, Targets};
use crate::policy::freshness::{lifetime, Lifetime, Timing};
use crate::policy::reuse::{reuse, Reuse, Variant};
use crate::policy::storable::StoredFields;
use crate::policy::FieldSource;
use crate::store::Weighted;

/// Octets an entry costs beyond its head's and body's: its own struct and vectors, the `Arc`, the
/// store's slot, its key in the map and the queues, the allocator's rounding. Measured
/// (`bench/cache_memory.py`, 1 KiB bodies): 2,257 bytes of RSS per stored response, which this
/// makes the store count as about 2,130; it was 256, and the store counted 1,616, so a store
/// took about 1.4 times its `size` in memory.
const ENTRY_OVERHEAD: usize = 768;

/// A response in the cache.
#[derive(Debug)]
pub struct Entry {
    /// Status and the stored fields (names and values, packed); its length is the body's.
    pub head: ResponseHead,
    pub body: Bytes,
    /// The request fields its `Vary` names, as the request that brought it sent them.
    pub variant: Variant,
    pub timing: Timing,
    pub lifetime: Lifetime,
    pub directives: Directives,
}

impl Entry {
    /// The entry for a response (`status`, its `fields` in order, its directives `cc` and its
    /// whole `body`) to `request`, which was sent at `request_time` and answered at
    /// `response_time`; `None` when its `Vary` is `*`. Fields the cache may not keep are left
    /// out (hop-by-hop, named by `Connection`, named by a qualified `no-cache` or `private`).
    pub fn new<'f>(
        request: &(impl FieldSource + ?Sized),
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])> + Clone,
        cc: Directives,
        body: Bytes,
        (request_time, response_time): (SystemTime, SystemTime),
        heuristic_max: Duration,
    ) -> Option<Entry> {
        let all: Vec<(&[u8], &[u8])> = fields.collect();
        let variant = Variant::of(all.as_slice(), request)?;
        let mut bytes = Vec::with_capacity(all.iter().map(|(n, v)| n.len() + v.len()).sum());
        let mut list = Vec::with_capacity(all.len());
        let stored = StoredFields::of(all.as_slice(), &cc);
        for (name, value) in all.iter().filter(|(n, _)| stored.keeps(n)) {
            list.push(Field::append(&mut bytes, name, value));
        }
        let timing = Timing::of(all.as_slice(), request_time, response_time);
        let lifetime = lifetime(status, all.as_slice(), &cc, response_time, heuristic_max);
        let length = BodyLength::Exact(body.len() as u64);
        Some(Entry {
            head: ResponseHead::laid_out(status, bytes, list, length),
            body,
            variant,
            timing,
            lifetime,
            directives: cc,
        })
    }

    /// [`Entry::new`] for a response whose fields are packed already (`bytes` and `list`, as
    /// [`Field::append`] lays them out): when the cache keeps every one of them (no hop-by-hop
    /// field, none that `Connection` or a qualified directive names), the entry takes the two
    /// buffers as they are, without a copy.
    #[allow(clippy::too_many_arguments)]
    pub fn packed(
        request: &(impl FieldSource + ?Sized),
        status: u16,
        (bytes, list): (Vec<u8>, Vec<Field>),
        cc: Directives,
        body: Bytes,
        (request_time, response_time): (SystemTime, SystemTime),
        heuristic_max: Duration,
    ) -> Option<Entry> {
        let all = FieldsRef::Packed {
            buf: &bytes,
            list: &list,
        };
        let variant = Variant::of(&all, request)?;
        let timing = Timing::of(&all, request_time, response_time);
        let lifetime = lifetime(status, &all, &cc, response_time, heuristic_max);
        let stored = StoredFields::of(&all, &cc);
        // Which fields go (by position; past the 128th, in a list).
        let (mut left_out, mut more) = (0u128, Vec::new());
        for (i, field) in list.iter().enumerate() {
            if !stored.keeps(field.name(&bytes)) {
                match i < 128 {
                    true => left_out |= 1 << i,
                    false => more.push(i),
                }
            }
        }
        let mut list = list;
        if left_out != 0 || !more.is_empty() {
            // The fields left out stay in `bytes`, unreferenced (a hop-by-hop field or two): no
            // copy of the others.
            let mut i = 0;
            list.retain(|_| {
                let gone = if i < 128 {
                    left_out & (1 << i) != 0
                } else {
                    more.contains(&i)
                };
                i += 1;
                !gone
            });
        }
        let length = BodyLength::Exact(body.len() as u64);
        let head = ResponseHead::laid_out(status, bytes, list, length);
        Some(Entry {
            head,
            body,
            variant,
            timing,
            lifetime,
            directives: cc,
        })
    }

    /// An entry as a store kept it: its stored `fields` (already the ones the cache may keep),
    /// the request fields it was chosen by, its timing and lifetime, and its whole `body`; its
    /// directives read again, following the cache's `targets`.
    pub fn restored(
        status: u16,
        fields: &[(&[u8], &[u8])],
        (variant, timing, lifetime): (Variant, Timing, Lifetime),
        body: Bytes,
        targets: &Targets,
    ) -> Entry {
        let mut bytes = Vec::new();
        let list = fields.iter().map(|(n, v)| Field::append(&mut bytes, n, v)).collect();
        let length = BodyLength::Exact(body.len() as u64);
        Entry {
            head: ResponseHead::laid_out(status, bytes, list, length),
            body,
            variant,
            timing,
            lifetime,
            directives: Directives::for_targets(fields, targets),
        }
    }

    /// Its current age at `now`, in seconds.
    pub fn age(&self, now: SystemTime) -> u64 {
        self.timing.current_age(now)
    }

    /// What it can do for a request with directives `request_cc` at `now`, and its age then.
    pub fn reuse(&self, request_cc: &Directives, now: SystemTime) -> (Reuse, u64) {
        let age = self.age(now);
        (reuse(request_cc, &self.directives, self.lifetime.seconds, age), age)
    }
}

impl Weighted for Entry {
    fn weight(&self) -> usize {
        let fields = self
            .head
            .fields_ref()
            .iter()
            .map(|(n, v)| n.len() + v.len() + 16)
            .sum::<usize>();
        self.body.len() + fields + ENTRY_OVERHEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_packed_response_keeps_its_buffers_and_leaves_hop_by_hop_fields_out() {
        let fields: &[(&[u8], &[u8])] = &[
            (b"Cache-Control", b"max-age=60"),
            (b"Connection", b"keep-alive, X-Hop"),
            (b"X-Hop", b"1"),
            (b"Keep-Alive", b"timeout=5"),
            (b"ETag", b"\"a\""),
        ];
        let mut bytes = Vec::new();
        let list: Vec<Field> = fields.iter().map(|(n, v)| Field::append(&mut bytes, n, v)).collect();
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let cc = Directives::of(fields);
        let packed = Entry::packed(
            &[][..],
            200,
            (bytes, list),
            cc.clone(),
            Bytes::new(),
            (at, at),
            Duration::ZERO,
        );
        let new = Entry::new(
            &[][..],
            200,
            fields.iter().copied(),
            cc,
            Bytes::new(),
            (at, at),
            Duration::ZERO,
        );
        let names = |e: &Entry| {
            e.head
                .fields_ref()
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect::<Vec<_>>()
        };
        let (packed, new) = (packed.unwrap(), new.unwrap());
        assert_eq!(names(&packed), names(&new));
        assert_eq!(
            names(&packed).iter().map(|(n, _)| n.as_slice()).collect::<Vec<_>>(),
            [&b"Cache-Control"[..], b"ETag"]
        );
        assert_eq!(packed.lifetime.seconds, 60);
    }
}
