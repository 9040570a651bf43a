//! Repeated events logged once, then summarised: during an outage a worker would otherwise print
//! a warning per request (`no healthy target in upstream app`, 299 lines for 300 requests). The
//! first occurrence of an event is logged; later ones are counted and reported as one line per
//! [`WINDOW`]; the end of the outage is logged at info level with the total.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a continuing event is summarised.
pub const WINDOW: Duration = Duration::from_secs(10);

/// One worker's repeated events, by key (`no healthy target in upstream app`).
#[derive(Default)]
pub struct LogSummary {
    events: RefCell<HashMap<String, Event>>,
    /// Whether any event is open: the one thing [`LogSummary::recovered`] reads on every request.
    open: Cell<bool>,
}

struct Event {
    /// Occurrences since the last line about this event.
    unreported: u64,
    /// Occurrences since the first.
    total: u64,
    first: Instant,
    window_start: Instant,
}

impl LogSummary {
    /// Logs `message()` at warn level the first time `key` happens; later occurrences only count.
    pub fn warn(&self, key: &str, message: impl FnOnce() -> String) {
        let mut events = self.events.borrow_mut();
        match events.get_mut(key) {
            Some(event) => {
                event.unreported += 1;
                event.total += 1;
            }
            None => {
                self.open.set(true);
                tracing::warn!("{}", message());
                let now = Instant::now();
                events.insert(
                    key.to_string(),
                    Event {
                        unreported: 0,
                        total: 1,
                        first: now,
                        window_start: now,
                    },
                );
            }
        }
    }

    /// The event `key` is over (a request to that upstream found a target): says so at info level
    /// with how often it happened, if it was happening. Costs nothing while no event is open.
    pub fn recovered(&self, key: impl FnOnce() -> String) {
        if !self.open.get() {
            return;
        }
        let key = key();
        let mut events = self.events.borrow_mut();
        let Some(event) = events.remove(&key) else {
            return;
        };
        self.open.set(!events.is_empty());
        drop(events);
        if event.unreported > 0 {
            tracing::warn!("{key}: {} more time(s) since the last report", event.unreported);
        }
        tracing::info!(
            "{key}: over after {} time(s) in {:.0?}",
            event.total,
            event.first.elapsed()
        );
    }

    /// Writes one line per event that happened again within its window, and starts a new window
    /// (called by the worker's housekeeping tick; `all` at drain, whatever the windows).
    pub fn report(&self, now: Instant, all: bool) {
        let mut events = self.events.borrow_mut();
        for (key, event) in events.iter_mut() {
            let due = all || now.saturating_duration_since(event.window_start) >= WINDOW;
            if event.unreported > 0 && due {
                tracing::warn!(
                    "{key}: {} more time(s) in the last {:.0?}",
                    event.unreported,
                    now.saturating_duration_since(event.window_start)
                );
                event.unreported = 0;
                event.window_start = now;
            }
        }
    }

    /// How many occurrences of `key` wait for the next report (for tests).
    #[cfg(test)]
    fn unreported(&self, key: &str) -> Option<u64> {
        self.events.borrow().get(key).map(|e| e.unreported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_occurrence_is_logged_then_counted_then_closed() {
        let summary = LogSummary::default();
        let key = "no healthy target in upstream app";
        summary.warn(key, || "listener web: no healthy target in upstream app".into());
        // The first is logged (not counted as unreported); the rest only count.
        assert_eq!(summary.unreported(key), Some(0));
        for _ in 1..300 {
            summary.warn(key, || unreachable!("logged only the first time"));
        }
        assert_eq!(summary.unreported(key), Some(299));
        // Within the window nothing is reported; after it, one line and a fresh count.
        summary.report(Instant::now(), false);
        assert_eq!(summary.unreported(key), Some(299));
        summary.report(Instant::now() + WINDOW, false);
        assert_eq!(summary.unreported(key), Some(0));
        summary.warn(key, || unreachable!());
        summary.report(Instant::now(), true);
        assert_eq!(summary.unreported(key), Some(0), "a drain reports whatever the window");
        summary.recovered(|| "no healthy target in upstream other".into());
        assert!(summary.unreported(key).is_some());
        summary.recovered(|| key.into());
        assert_eq!(summary.unreported(key), None);
        // Closed: the next occurrence opens the event again.
        summary.warn(key, String::new);
        assert_eq!(summary.unreported(key), Some(0));
    }
}
