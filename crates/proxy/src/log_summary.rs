//! Repeated events logged once, then summarised for the whole process: during an outage every
//! request (on every worker) would otherwise print a warning (`no healthy target in upstream
//! app`, 299 lines for 300 requests). The first occurrence of an event is logged; later ones are
//! counted and reported as one line per [`WINDOW`]; the end of the outage is logged at info level
//! with the total. The counts are the process's, summed over workers.
//!
//! Workers share no lock: each worker's [`LogSummary`] sends every occurrence (only failures,
//! never a request that went well) over a channel to one summarising thread, which owns the
//! counts and writes the lines. A worker remembers which events it reported, so that a request
//! that goes well sends something only when it ends an event this worker saw; while no event is
//! open that check is one `Cell` read.
//!
//! Some events have no moment that ends them: a full queue, or a queue wait that ran out, come
//! and go with the load while other requests are served. Those are over when a [`WINDOW`] went
//! by without one ([`EventKind::ends_when_quiet`]), and workers keep no record of them.
//!
//! Every line carries the event's upstream (and target, when the event is a target's) as
//! structured fields, so `--log-format json` puts them in `fields`.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often a continuing event is summarised.
pub const WINDOW: Duration = Duration::from_secs(10);

/// What kind of repeated event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Requests or connections found no target they could use in the upstream.
    NoTarget,
    /// Connects to one target fail.
    ConnectFailed,
    /// Requests found the upstream's queue full (answered 503).
    QueueFull,
    /// Requests waited in the upstream's queue past its timeout (answered 503).
    QueueTimeout,
    /// Exports to the OTLP collector (named as the key's upstream) fail: spans and log records
    /// are lost.
    ExportFailed,
}

impl EventKind {
    fn name(self) -> &'static str {
        match self {
            EventKind::NoTarget => "no_target",
            EventKind::ConnectFailed => "connect_failed",
            EventKind::QueueFull => "queue_full",
            EventKind::QueueTimeout => "queue_timeout",
            EventKind::ExportFailed => "export_failed",
        }
    }

    /// Whether the event is over once a [`WINDOW`] passed without it, rather than when a
    /// worker sees it end.
    fn ends_when_quiet(self) -> bool {
        matches!(self, EventKind::QueueFull | EventKind::QueueTimeout)
    }
}

/// One repeated event: its kind, upstream and target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    pub kind: EventKind,
    pub upstream: String,
    pub target: Option<String>,
}

impl EventKey {
    /// "No target could be used in upstream `upstream`".
    pub fn no_target(upstream: &str) -> EventKey {
        EventKey {
            kind: EventKind::NoTarget,
            upstream: upstream.to_string(),
            target: None,
        }
    }

    /// "Connects to `target` of `upstream` fail".
    pub fn connect_failed(upstream: &str, target: &str) -> EventKey {
        EventKey {
            kind: EventKind::ConnectFailed,
            upstream: upstream.to_string(),
            target: Some(target.to_string()),
        }
    }

    /// "Requests to `upstream` found its queue full" (or, `timeout`, waited in it too long).
    pub fn queue_refused(upstream: &str, timeout: bool) -> EventKey {
        EventKey {
            kind: if timeout {
                EventKind::QueueTimeout
            } else {
                EventKind::QueueFull
            },
            upstream: upstream.to_string(),
            target: None,
        }
    }

    /// "Exports to the OTLP collector at `endpoint` fail".
    pub fn export_failed(endpoint: &str) -> EventKey {
        EventKey {
            kind: EventKind::ExportFailed,
            upstream: endpoint.to_string(),
            target: None,
        }
    }

    /// How the summary lines name the event: `upstream app: no healthy target`.
    fn describe(&self) -> String {
        match (self.kind, &self.target) {
            (EventKind::ConnectFailed, Some(target)) => {
                format!("upstream {}: connect to {target} failed", self.upstream)
            }
            (EventKind::QueueFull, _) => {
                format!(
                    "upstream {}: the queue is full; answering 503 (queue_full)",
                    self.upstream
                )
            }
            (EventKind::QueueTimeout, _) => format!(
                "upstream {}: a request waited in the queue past its timeout; answering 503 (queue_timeout)",
                self.upstream
            ),
            (EventKind::ExportFailed, _) => format!(
                "OTLP collector {}: an export failed; its spans or log records are lost \
                 (rampart_telemetry_dropped_total)",
                self.upstream
            ),
            _ => format!("upstream {}: no healthy target", self.upstream),
        }
    }

    /// How the end of the event reads: `upstream app: connect to 10.0.0.1:80 works again`.
    fn describe_over(&self) -> String {
        match (self.kind, &self.target) {
            (EventKind::ConnectFailed, Some(target)) => {
                format!("upstream {}: connect to {target} works again", self.upstream)
            }
            (EventKind::QueueFull, _) => format!("upstream {}: the queue has room again", self.upstream),
            (EventKind::QueueTimeout, _) => {
                format!("upstream {}: queued requests are served in time again", self.upstream)
            }
            (EventKind::ExportFailed, _) => format!("OTLP collector {}: exports succeed again", self.upstream),
            _ => format!("upstream {}: a healthy target again", self.upstream),
        }
    }
}

/// The first line of an event, as the worker that met it words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// The listener whose request or connection met it, if any.
    pub listener: Option<String>,
    pub message: String,
}

/// `1 target`, `2 targets`: a count with its noun, plural when it is not one.
pub fn count_of(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `once`, `2 times`.
fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}

/// `once more`, `2 more times`.
fn more_times(n: u64) -> String {
    if n == 1 {
        "once more".into()
    } else {
        format!("{n} more times")
    }
}

/// What a worker sends to the summarising thread.
enum Message {
    Occurred(EventKey, Option<Detail>),
    Over(EventKey),
    /// Report every event that happened since its last line, whatever its window (drain).
    Flush(mpsc::Sender<()>),
}

/// The channel to the process's summarising thread, started on first use.
fn summariser() -> &'static mpsc::Sender<Message> {
    static SENDER: OnceLock<mpsc::Sender<Message>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        // Without the thread (it could not start) the messages are dropped with the receiver.
        let _ = std::thread::Builder::new()
            .name("rampart-log-summary".into())
            .spawn(move || summarise(rx));
        tx
    })
}

fn summarise(rx: mpsc::Receiver<Message>) {
    let mut summary = Summary::default();
    loop {
        let now = Instant::now();
        let lines = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Message::Occurred(key, detail)) => summary.occurred(key, detail, now),
            Ok(Message::Over(key)) => summary.over(&key, now),
            Ok(Message::Flush(done)) => {
                summary.report(now, true).iter().for_each(Line::log);
                let _ = done.send(());
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        lines.iter().for_each(Line::log);
        summary.report(now, false).iter().for_each(Line::log);
    }
}

/// One worker's side: which events it reported, to tell the summariser when one ends.
#[derive(Default)]
pub struct LogSummary {
    seen: RefCell<HashSet<EventKey>>,
    /// Whether this worker reported any event not yet over: the one thing
    /// [`LogSummary::recovered`] reads on every request.
    open: Cell<bool>,
}

impl LogSummary {
    /// Reports an occurrence of `key`. `detail()` words the event's first line; it is called
    /// only the first time this worker meets the event.
    pub fn warn(&self, key: EventKey, detail: impl FnOnce() -> Detail) {
        let detail = {
            let mut seen = self.seen.borrow_mut();
            if seen.contains(&key) {
                None
            } else {
                seen.insert(key.clone());
                self.open.set(true);
                Some(detail())
            }
        };
        let _ = summariser().send(Message::Occurred(key, detail));
    }

    /// Reports an occurrence of `key`, an event that ends when quiet
    /// ([`EventKind::ends_when_quiet`]): its first line is worded from the key alone, and this
    /// worker keeps no record of it.
    pub fn warn_until_quiet(&self, key: EventKey) {
        let _ = summariser().send(Message::Occurred(key, None));
    }

    /// The event `key` is over (a request to that upstream found a target): the summariser says
    /// so with how often it happened. Costs nothing while this worker saw no event.
    pub fn recovered(&self, key: impl FnOnce() -> EventKey) {
        if !self.open.get() {
            return;
        }
        let key = key();
        let mut seen = self.seen.borrow_mut();
        if !seen.remove(&key) {
            return;
        }
        self.open.set(!seen.is_empty());
        drop(seen);
        let _ = summariser().send(Message::Over(key));
    }

    /// Has every event's occurrences since its last line reported now (at drain), and waits (a
    /// second at most) until they are.
    pub fn report_all(&self) {
        let (done, wait) = mpsc::channel();
        if summariser().send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(Duration::from_secs(1));
        }
    }
}

/// The process's open events and their counts (owned by the summarising thread).
#[derive(Default)]
struct Summary {
    events: HashMap<EventKey, Event>,
}

struct Event {
    /// Occurrences since the last line about this event.
    unreported: u64,
    /// Occurrences since the first.
    total: u64,
    first: Instant,
    window_start: Instant,
    /// The latest occurrence.
    last: Instant,
}

/// A line to log.
#[derive(Debug, PartialEq)]
enum Line {
    /// The first occurrence, at warn level.
    First(EventKey, Option<Detail>),
    /// `count` more occurrences within `window`, at warn level.
    More {
        key: EventKey,
        count: u64,
        window: Duration,
    },
    /// The event is over after `total` occurrences in `lasted`, at info level.
    Over {
        key: EventKey,
        total: u64,
        lasted: Duration,
    },
}

impl Summary {
    fn occurred(&mut self, key: EventKey, detail: Option<Detail>, now: Instant) -> Vec<Line> {
        if let Some(event) = self.events.get_mut(&key) {
            event.unreported += 1;
            event.total += 1;
            event.last = now;
            return Vec::new();
        }
        let event = Event {
            unreported: 0,
            total: 1,
            first: now,
            window_start: now,
            last: now,
        };
        self.events.insert(key.clone(), event);
        vec![Line::First(key, detail)]
    }

    fn over(&mut self, key: &EventKey, now: Instant) -> Vec<Line> {
        let Some(event) = self.events.remove(key) else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        if event.unreported > 0 {
            lines.push(Line::More {
                key: key.clone(),
                count: event.unreported,
                window: now.saturating_duration_since(event.window_start),
            });
        }
        lines.push(Line::Over {
            key: key.clone(),
            total: event.total,
            lasted: now.saturating_duration_since(event.first),
        });
        lines
    }

    /// One line per event that happened again within its window, which starts again (`all`:
    /// whatever the windows); then the end of each event that ends when quiet and was for a
    /// window.
    fn report(&mut self, now: Instant, all: bool) -> Vec<Line> {
        let mut lines = self.report_windows(now, all);
        let quiet: Vec<EventKey> = self
            .events
            .iter()
            .filter(|(key, event)| key.kind.ends_when_quiet() && now.saturating_duration_since(event.last) >= WINDOW)
            .map(|(key, _)| key.clone())
            .collect();
        for key in quiet {
            lines.extend(self.over(&key, now));
        }
        lines
    }

    fn report_windows(&mut self, now: Instant, all: bool) -> Vec<Line> {
        let mut lines = Vec::new();
        for (key, event) in self.events.iter_mut() {
            let window = now.saturating_duration_since(event.window_start);
            if event.unreported > 0 && (all || window >= WINDOW) {
                lines.push(Line::More {
                    key: key.clone(),
                    count: event.unreported,
                    window,
                });
                event.unreported = 0;
                event.window_start = now;
            }
        }
        lines
    }
}

impl Line {
    fn log(&self) {
        match self {
            Line::First(key, detail) => {
                let upstream = key.upstream.as_str();
                let target = key.target.as_deref();
                let event = key.kind.name();
                match detail {
                    Some(d) => {
                        let listener = d.listener.as_deref();
                        tracing::warn!(upstream, target, listener, event, "{}", d.message);
                    }
                    None => tracing::warn!(upstream, target, event, "{}", key.describe()),
                }
            }
            Line::More { key, count, window } => tracing::warn!(
                upstream = key.upstream.as_str(),
                target = key.target.as_deref(),
                event = key.kind.name(),
                count,
                window_ms = window.as_millis() as u64,
                "{}: {} in the last {:.0?}",
                key.describe(),
                more_times(*count),
                window
            ),
            Line::Over { key, total, lasted } => tracing::info!(
                upstream = key.upstream.as_str(),
                target = key.target.as_deref(),
                event = key.kind.name(),
                total,
                lasted_ms = lasted.as_millis() as u64,
                "{} ({} {} in {:.0?})",
                key.describe_over(),
                match key.kind {
                    EventKind::NoTarget => "none was found",
                    EventKind::ConnectFailed => "it failed",
                    EventKind::QueueFull => "it was full",
                    EventKind::QueueTimeout => "the wait ran out",
                    EventKind::ExportFailed => "it failed",
                },
                times(*total),
                lasted
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_occurrence_is_logged_then_counted_then_closed() {
        let mut summary = Summary::default();
        let key = EventKey::no_target("app");
        let t0 = Instant::now();
        let detail = Detail {
            listener: Some("web".into()),
            message: "listener web: no healthy target in upstream app".into(),
        };
        let first = summary.occurred(key.clone(), Some(detail.clone()), t0);
        assert_eq!(first, [Line::First(key.clone(), Some(detail))]);
        for _ in 1..300 {
            assert_eq!(summary.occurred(key.clone(), None, t0), []);
        }
        // Within the window nothing is reported; after it, one line and a fresh count.
        assert_eq!(summary.report(t0, false), []);
        let more = summary.report(t0 + WINDOW, false);
        assert!(matches!(&more[..], [Line::More { count: 299, .. }]), "{more:?}");
        summary.occurred(key.clone(), None, t0 + WINDOW);
        let drained = summary.report(t0 + WINDOW, true);
        assert!(
            matches!(&drained[..], [Line::More { count: 1, .. }]),
            "a drain reports whatever the window"
        );
        assert_eq!(summary.over(&EventKey::no_target("other"), t0), []);
        let over = summary.over(&key, t0 + 2 * WINDOW);
        assert!(matches!(&over[..], [Line::Over { total: 301, .. }]), "{over:?}");
        // Closed: the next occurrence opens the event again.
        assert!(matches!(&summary.occurred(key, None, t0)[..], [Line::First(_, None)]));
    }

    #[test]
    fn occurrences_from_every_worker_add_up_to_one_summary() {
        // Two workers meet the same outage: one first line, then counts summed over both.
        let mut summary = Summary::default();
        let key = EventKey::connect_failed("app", "127.0.0.1:9");
        let t0 = Instant::now();
        let detail = |w: &str| Detail {
            listener: Some(w.into()),
            message: "connect failed".into(),
        };
        assert_eq!(summary.occurred(key.clone(), Some(detail("a")), t0).len(), 1);
        assert_eq!(summary.occurred(key.clone(), Some(detail("b")), t0), []);
        summary.occurred(key.clone(), None, t0);
        let over = summary.over(&key, t0 + Duration::from_secs(1));
        assert!(
            matches!(&over[..], [Line::More { count: 2, .. }, Line::Over { total: 3, .. }]),
            "{over:?}"
        );
        assert_eq!(summary.over(&key, t0), [], "a second worker's recovery adds nothing");
    }

    #[test]
    fn a_queue_refusing_requests_is_logged_once_then_counted_and_over_when_quiet() {
        let mut summary = Summary::default();
        let key = EventKey::queue_refused("app", false);
        let t0 = Instant::now();
        assert!(matches!(
            &summary.occurred(key.clone(), None, t0)[..],
            [Line::First(_, None)]
        ));
        assert!(key
            .describe()
            .contains("upstream app: the queue is full; answering 503"));
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(summary.occurred(key.clone(), None, t1), []);
        // Quiet for less than a window: still open; for a window: over, with its count.
        assert_eq!(summary.report(t1 + WINDOW / 2, false), []);
        let over = summary.report(t1 + WINDOW, false);
        assert!(
            matches!(&over[..], [Line::More { count: 1, .. }, Line::Over { total: 2, .. }]),
            "{over:?}"
        );
        assert!(summary.events.is_empty());
        // An outage of targets does not end by itself.
        summary.occurred(EventKey::no_target("app"), None, t0);
        assert_eq!(summary.report(t0 + 3 * WINDOW, false), []);
    }

    #[test]
    fn counts_are_worded_in_the_singular_and_plural() {
        assert_eq!(count_of(1, "target"), "1 target");
        assert_eq!(count_of(0, "route"), "0 routes");
        assert_eq!(count_of(3, "listener"), "3 listeners");
        assert_eq!(times(1), "once");
        assert_eq!(times(2), "2 times");
        assert_eq!(more_times(1), "once more");
        assert_eq!(more_times(29), "29 more times");
    }

    #[test]
    fn a_worker_tells_of_an_end_only_for_events_it_saw() {
        let worker = LogSummary::default();
        worker.recovered(|| unreachable!("no event open: nothing is built"));
        worker.warn(EventKey::no_target("app"), || Detail {
            listener: None,
            message: "first".into(),
        });
        worker.warn(EventKey::no_target("app"), || unreachable!("worded once"));
        worker.recovered(|| EventKey::no_target("other"));
        assert!(worker.open.get());
        worker.recovered(|| EventKey::no_target("app"));
        assert!(!worker.open.get());
    }
}
