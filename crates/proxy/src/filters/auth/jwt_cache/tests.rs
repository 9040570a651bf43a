use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::*;
use crate::filters::auth::jwt::ClaimValue;

/// Counts the allocations of the current thread, to show that a hit allocates nothing.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the counter is a const-initialized
// thread-local Cell without a destructor, so touching it neither allocates nor re-enters.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as for `dealloc`, and the caller's contract for `realloc` is the system's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const NOW: u64 = 1_700_000_000;

fn verified(exp: Option<u64>, nbf: Option<u64>) -> VerifiedToken {
    VerifiedToken {
        exp,
        nbf,
        subject: Some("alice".into()),
        claims: vec![ClaimValue::Text("dev,ops".into())].into_boxed_slice(),
        kept: Box::new([]),
    }
}

/// A token-shaped byte string whose last 40 bytes are `tail`'s.
fn token(head: &str, tail: char) -> Vec<u8> {
    format!("{head}.payload.{}", tail.to_string().repeat(40)).into_bytes()
}

#[test]
fn a_hit_returns_the_verified_token_without_allocating() {
    let mut cache = VerifiedTokenCache::new(16);
    let t = token("header", 'a');
    cache.insert(&t, 3, verified(Some(NOW + 60), None), NOW, 0);
    let before = allocations();
    for i in 0..1000 {
        let hit = cache.get(&t, 3, NOW + i % 50, 0).expect("a hit");
        assert_eq!(hit.subject.as_deref(), Some("alice"));
    }
    assert_eq!(allocations(), before, "a hit allocates nothing");
    // The counter does count: an insert copies the token.
    cache.insert(&token("other", 'o'), 3, verified(None, None), NOW, 0);
    assert!(allocations() > before);
    assert!(cache.get(&token("header", 'b'), 3, NOW, 0).is_none());
}

#[test]
fn only_the_same_bytes_hit_even_with_the_same_key() {
    let mut cache = VerifiedTokenCache::new(16);
    let t = token("header", 'a');
    cache.insert(&t, 1, verified(Some(NOW + 60), None), NOW, 0);
    // Same length and the same last 32 bytes (so the same cache key), other bytes before them.
    let forged = token("hEader", 'a');
    assert_eq!(forged.len(), t.len());
    assert!(cache.get(&forged, 1, NOW, 0).is_none());
    assert!(cache.get(&t, 1, NOW, 0).is_some());
    assert!(cache.get(&t[..t.len() - 1], 1, NOW, 0).is_none());
}

#[test]
fn a_new_key_set_generation_misses() {
    let mut cache = VerifiedTokenCache::new(16);
    let t = token("header", 'a');
    cache.insert(&t, 1, verified(Some(NOW + 60), None), NOW, 0);
    assert!(cache.get(&t, 1, NOW, 0).is_some());
    assert!(cache.get(&t, 2, NOW, 0).is_none());
    // Verified again against generation 2: the entry is replaced, not duplicated.
    cache.insert(&t, 2, verified(Some(NOW + 60), None), NOW, 0);
    assert_eq!(cache.len(), 1);
    assert!(cache.get(&t, 2, NOW, 0).is_some());
    assert!(cache.get(&t, 1, NOW, 0).is_none());
}

#[test]
fn exp_and_nbf_are_checked_again_at_every_hit() {
    let mut cache = VerifiedTokenCache::new(16);
    let t = token("header", 'a');
    cache.insert(&t, 1, verified(Some(NOW + 10), Some(NOW - 5)), NOW, 5);
    assert!(cache.get(&t, 1, NOW + 14, 5).is_some(), "within leeway");
    assert!(cache.get(&t, 1, NOW + 15, 5).is_none(), "expired");
    assert!(
        cache.get(&t, 1, NOW + 15, 6).is_some(),
        "another leeway, another verdict"
    );
    assert!(cache.get(&t, 1, NOW - 10, 5).is_some());
    assert!(
        cache.get(&t, 1, NOW - 11, 5).is_none(),
        "before nbf (a clock that went back)"
    );
    let forever = token("header", 'f');
    cache.insert(&forever, 1, verified(None, None), NOW, 0);
    assert!(cache.get(&forever, 1, u64::MAX, 0).is_some());
}

#[test]
fn a_full_cache_drops_stale_entries_first_then_everything() {
    let mut cache = VerifiedTokenCache::new(3);
    let (a, b, c) = (token("a", 'a'), token("b", 'b'), token("c", 'c'));
    cache.insert(&a, 1, verified(Some(NOW + 1), None), NOW, 0);
    cache.insert(&b, 1, verified(Some(NOW + 100), None), NOW, 0);
    cache.insert(&c, 1, verified(Some(NOW + 100), None), NOW, 0);
    assert_eq!(cache.len(), 3);
    // At NOW + 50, `a` has expired and makes room.
    let d = token("d", 'd');
    cache.insert(&d, 1, verified(Some(NOW + 100), None), NOW + 50, 0);
    assert_eq!(cache.len(), 3);
    assert!(cache.get(&a, 1, NOW, 0).is_none());
    for t in [&b, &c, &d] {
        assert!(cache.get(t, 1, NOW + 50, 0).is_some());
    }
    // Nothing stale: emptied, then the newcomer goes in.
    let e = token("e", 'e');
    cache.insert(&e, 1, verified(Some(NOW + 100), None), NOW + 50, 0);
    assert_eq!(cache.len(), 1);
    assert!(cache.get(&e, 1, NOW + 50, 0).is_some());
    // Entries of an older generation count as stale.
    let f = token("f", 'f');
    let g = token("g", 'g');
    cache.insert(&f, 1, verified(Some(NOW + 100), None), NOW + 50, 0);
    cache.insert(&g, 2, verified(Some(NOW + 100), None), NOW + 50, 0);
    assert_eq!(cache.len(), 3);
    let h = token("h", 'h');
    cache.insert(&h, 2, verified(Some(NOW + 100), None), NOW + 50, 0);
    assert_eq!(cache.len(), 2, "generation-1 entries dropped");
    assert!(cache.get(&g, 2, NOW + 50, 0).is_some() && cache.get(&h, 2, NOW + 50, 0).is_some());
}
