//! What one response's encoder holds in memory, counted by a global allocator that tracks the
//! bytes live on the current thread (libzstd allocates through Rust's allocator here, brotli and
//! zlib-rs are Rust). Its own test binary, so that no other test's allocations mix in.
//!
//! `cargo test -p rampart-proxy --test compress_memory -- --nocapture` prints the table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rampart_proxy::filters::compress::Encoder;
use rampart_proxy::model::filter::compress::{Algorithm, Tuning};

struct CountingAllocator;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // A const-initialised thread local without a destructor is always accessible.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged,
// so the allocator contract is System's; the counting touches only thread-local cells.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            count(layout.size() as isize);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            count(layout.size() as isize);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from this allocator (so from System) with `layout`.
        unsafe { System.dealloc(pointer, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `pointer` came from this allocator (so from System) with `layout`.
        let new = unsafe { System.realloc(pointer, layout, new_size) };
        if !new.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Resets the peak to what is live now and returns it.
fn reset_peak() -> isize {
    let now = live();
    PEAK.with(|peak| peak.set(now));
    now
}

fn peak() -> isize {
    PEAK.with(Cell::get)
}

/// A JSON-like body.
fn body(len: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(len + 200);
    let mut i = 0u64;
    while body.len() < len {
        i += 1;
        let record = format!(
            r#"{{"id":{i},"name":"user {}","score":{},"tags":["t{}","t{}"]}},"#,
            i.wrapping_mul(2_654_435_761) % 9973,
            i.wrapping_mul(40_503) % 100_000,
            i % 7,
            i % 13
        );
        body.extend_from_slice(record.as_bytes());
    }
    body.truncate(len);
    body
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Live after `Encoder::new`.
    created: isize,
    /// The most live while compressing the body in 16 KiB pieces.
    peak: isize,
    /// Live after the last piece, before `finish`.
    steady: isize,
    /// Live after `finish`, and after drop.
    finished: isize,
    dropped: isize,
}

fn measure(algorithm: Algorithm, tuning: Tuning, size_hint: Option<u64>, body: &[u8]) -> Measured {
    // Room for all the output up front, so `out` never grows inside the count.
    let mut out = Vec::with_capacity(body.len() + (1 << 20));
    let base = reset_peak();
    let mut encoder = Encoder::new(algorithm, tuning, size_hint).unwrap();
    let created = live() - base;
    for piece in body.chunks(16 * 1024) {
        encoder.compress(piece, &mut out).unwrap();
        out.clear();
    }
    let steady = live() - base;
    encoder.finish(&mut out).unwrap();
    let finished = live() - base;
    let peak = peak() - base;
    drop(encoder);
    Measured {
        created,
        peak,
        steady,
        finished,
        dropped: live() - base,
    }
}

fn kib(bytes: isize) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

#[test]
fn per_encoder_memory() {
    let big = body(1 << 20);
    let mut rows = Vec::new();
    for algorithm in Algorithm::ALL {
        let default = algorithm.default_tuning();
        let mut tunings = vec![default];
        let extra_windows: &[u8] = match algorithm {
            Algorithm::Gzip => &[13],
            Algorithm::Brotli => &[20, 22],
            Algorithm::Zstd => &[22],
        };
        tunings.extend(extra_windows.iter().map(|&window_log| Tuning { window_log, ..default }));
        if algorithm == Algorithm::Brotli {
            tunings.push(Tuning { level: 5, ..default });
        }
        for tuning in tunings {
            for (hint, body) in [
                (None, &big[..]),
                (Some(2048u64), &big[..2048]),
                (Some(100_000), &big[..100_000]),
            ] {
                let measured = measure(algorithm, tuning, hint, body);
                rows.push((algorithm, tuning, hint, measured));
            }
        }
    }
    println!(
        "{:<6} {:>5} {:>6} {:>10} | {:>9} {:>9} {:>9} {:>9}",
        "coding", "level", "window", "length", "created", "peak", "steady", "finished"
    );
    for (algorithm, tuning, hint, m) in &rows {
        let hint = hint.map_or("unknown".to_string(), |h| h.to_string());
        println!(
            "{:<6} {:>5} {:>6} {:>10} | {:>9} {:>9} {:>9} {:>9}",
            algorithm.token(),
            tuning.level,
            tuning.window_log,
            hint,
            kib(m.created),
            kib(m.peak),
            kib(m.steady),
            kib(m.finished)
        );
    }

    for (algorithm, _, _, m) in &rows {
        // `finish` frees the encoder's state; nothing leaks.
        assert_eq!(m.finished, 0, "{algorithm}: {m:?}");
        assert_eq!(m.dropped, 0, "{algorithm}: {m:?}");
        assert!(
            m.peak > 16 << 10,
            "{algorithm}: a peak of {} means the count missed the encoder",
            kib(m.peak)
        );
    }
    // The most one response's encoder may hold (a little above what was measured, so that a
    // change of dependency that grows it fails here): default tunings for a body of unknown
    // length, a short one, and brotli 5 on a short body (whose window must not shrink into its
    // 33 MiB match finder).
    let limits: [(Algorithm, Tuning, Option<u64>, isize); 7] = [
        (Algorithm::Gzip, Algorithm::Gzip.default_tuning(), None, 400 << 10),
        (Algorithm::Gzip, Algorithm::Gzip.default_tuning(), Some(2048), 280 << 10),
        (Algorithm::Brotli, Algorithm::Brotli.default_tuning(), None, 1500 << 10),
        (
            Algorithm::Brotli,
            Algorithm::Brotli.default_tuning(),
            Some(2048),
            640 << 10,
        ),
        (
            Algorithm::Brotli,
            Tuning {
                level: 5,
                ..Algorithm::Brotli.default_tuning()
            },
            Some(2048),
            2 << 20,
        ),
        (Algorithm::Zstd, Algorithm::Zstd.default_tuning(), None, 2200 << 10),
        (Algorithm::Zstd, Algorithm::Zstd.default_tuning(), Some(2048), 128 << 10),
    ];
    for (algorithm, tuning, hint, limit) in limits {
        let (.., m) = rows
            .iter()
            .find(|(a, t, h, _)| *a == algorithm && *t == tuning && *h == hint)
            .unwrap();
        assert!(
            m.peak <= limit,
            "{algorithm} {tuning:?} {hint:?}: peak {} over {}",
            kib(m.peak),
            kib(limit)
        );
    }
}
