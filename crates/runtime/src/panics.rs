//! A panic on a worker ends the connection whose task panicked, not the process.
//!
//! Rampart is built with `panic = "unwind"` (docs/design.md, "Panics"): tokio catches a panic
//! in a task and drops the task, so a slip on one request (an index out of bounds, a broken
//! invariant) costs that connection alone while the worker serves the rest. The hook installed
//! here logs such a panic as an error, with its message and place, and counts it
//! ([`worker_panics`], the `rampart_worker_panics` metric). A panic on any other thread goes to the
//! hook that was there before.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static PANICS: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

thread_local! {
    /// The worker this thread runs, if it runs one.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Panics on worker threads since the process started (each ended one connection or task).
pub fn worker_panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Marks the calling thread as worker `id`'s, for the hook.
pub(crate) fn on_worker(id: usize) {
    WORKER.with(|w| w.set(Some(id)));
}

/// Installs the hook (once per process), in front of the one there was.
pub(crate) fn install_hook() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match WORKER.with(Cell::get) {
            Some(worker) => {
                PANICS.fetch_add(1, Ordering::Relaxed);
                let place = info
                    .location()
                    .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(no message)");
                let outcome = match cfg!(panic = "unwind") {
                    true => "the connection it was serving is closed, the worker goes on",
                    false => "this build aborts on a panic: the process ends",
                };
                tracing::error!(
                    worker,
                    "worker {worker}: a bug in Rampart panicked{place}: {message}; {outcome} (please report this)"
                );
            }
            None => previous(info),
        }));
    });
}
