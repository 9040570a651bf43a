//! Attempts as data: what each attempt of a request at its upstream did (the target, a new or a
//! reused connection, the connect time, the time to the response head, the status or the error,
//! why another attempt followed), kept in the request's context ([`AttemptLog`]), and the one
//! place that hears of them ([`observe`]): each attempt's start and end, and the request's end.
//! Outlier detection, the balancer's latency, the target metrics, the retry budget, the access
//! log's `upstream_attempts` field and the filters' per-attempt phases all read this record.

use std::time::Duration;

use super::error::HttpError;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// Still going (its response head has not come, and nothing failed yet).
    Open,
    /// The upstream answered with this status (the attempt may still have been retried: a
    /// status `retry_on` names).
    Status(u16),
    /// It failed before a response head reached the client.
    Failed(HttpError),
}

/// One attempt at the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The target's index in the request's upstream.
    pub target: usize,
    /// The connection had carried an earlier request (pooled HTTP/1, or a shared HTTP/2 one).
    pub reused: bool,
    /// How long the connect took (a new connection only).
    pub connect: Option<Duration>,
    /// From the request's head leaving to the response head's arrival.
    pub response_head: Option<Duration>,
    pub end: AttemptEnd,
    /// Why another attempt followed this one (the failure's access-log name), if one did.
    pub retried_for: Option<&'static str>,
    /// When it began (its connect, for a new connection) and when it failed, in microseconds
    /// after the request began: kept only for a request whose spans are recorded.
    pub began_us: Option<u32>,
    pub ended_us: Option<u32>,
}

impl Attempt {
    /// An attempt beginning at `target`.
    pub fn new(target: usize, reused: bool, connect: Option<Duration>) -> Self {
        Attempt {
            target,
            reused,
            connect,
            response_head: None,
            end: AttemptEnd::Open,
            retried_for: None,
            began_us: None,
            ended_us: None,
        }
    }

    /// The status it got, if a response head came.
    pub fn status(&self) -> Option<u16> {
        match self.end {
            AttemptEnd::Status(status) => Some(status),
            _ => None,
        }
    }

    /// The error it failed with, if it failed.
    pub fn error(&self) -> Option<HttpError> {
        match self.end {
            AttemptEnd::Failed(error) => Some(error),
            _ => None,
        }
    }
}

/// The attempts of one request: the first [`AttemptLog::KEPT`] in full (inline, no allocation),
/// and how many were made in all.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptLog {
    kept: [Option<Attempt>; AttemptLog::KEPT],
    made: u8,
}

impl AttemptLog {
    /// Attempts kept in full; later ones are counted only (`retries` above 3 are rare, and the
    /// record of the first few says what happened).
    pub const KEPT: usize = 4;

    /// Attempts made (1 plus the retries; 0 when the request went to no upstream).
    pub fn made(&self) -> u8 {
        self.made
    }

    /// The attempts kept, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Attempt> {
        self.kept.iter().map_while(Option::as_ref)
    }

    /// Attempt `index` (0 for the first), if it is kept.
    pub fn get(&self, index: usize) -> Option<&Attempt> {
        self.kept.get(index)?.as_ref()
    }

    /// The attempt going on (or the last one).
    pub fn last(&self) -> Option<&Attempt> {
        let index = usize::from(self.made).checked_sub(1)?;
        self.kept.get(index)?.as_ref()
    }

    fn last_mut(&mut self) -> Option<&mut Attempt> {
        let index = usize::from(self.made).checked_sub(1)?;
        self.kept.get_mut(index)?.as_mut()
    }

    /// Why the last retry was made, if one was.
    pub fn retry_reason(&self) -> Option<&'static str> {
        self.iter().filter_map(|a| a.retried_for).last()
    }

    /// Records the start of an attempt. The one before it, if it failed, was retried for its
    /// failure (unless [`AttemptLog::retried`] said why already).
    pub fn begin(&mut self, attempt: Attempt) {
        if let Some(before) = self.last_mut() {
            if let (AttemptEnd::Failed(error), None) = (before.end, before.retried_for) {
                before.retried_for = Some(error.reason());
            }
        }
        if let Some(slot) = self.kept.get_mut(usize::from(self.made)) {
            *slot = Some(attempt);
        }
        self.made = self.made.saturating_add(1);
    }

    /// The response head of the attempt going on came, after `took`.
    pub fn responded(&mut self, status: u16, took: Duration) {
        if let Some(a) = self.last_mut() {
            a.end = AttemptEnd::Status(status);
            a.response_head = Some(took);
        }
    }

    /// The attempt going on failed with `error`.
    pub fn failed(&mut self, error: HttpError) {
        if let Some(a) = self.last_mut() {
            a.end = AttemptEnd::Failed(error);
        }
    }

    /// The attempt going on ended (failed) `us` microseconds after the request began.
    pub fn ended_at(&mut self, us: u32) {
        if let Some(a) = self.last_mut() {
            a.ended_us = Some(us);
        }
    }

    /// Another attempt follows the one going on, for `reason`.
    pub fn retried(&mut self, reason: &'static str) {
        if let Some(a) = self.last_mut() {
            a.retried_for = Some(reason);
        }
    }
}

pub mod observe;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_first_attempts_and_counts_them_all() {
        let mut log = AttemptLog::default();
        assert_eq!((log.made(), log.last(), log.retry_reason()), (0, None, None));
        log.begin(Attempt::new(2, false, Some(Duration::from_millis(1))));
        log.failed(HttpError::UpstreamReset);
        log.begin(Attempt::new(0, true, None));
        log.responded(200, Duration::from_millis(5));
        let seen: Vec<_> = log
            .iter()
            .map(|a| (a.target, a.reused, a.status(), a.error()))
            .collect();
        assert_eq!(
            seen,
            [
                (2, false, None, Some(HttpError::UpstreamReset)),
                (0, true, Some(200), None)
            ]
        );
        assert_eq!(log.retry_reason(), Some("upstream_reset"));
        assert_eq!(log.last().and_then(|a| a.response_head), Some(Duration::from_millis(5)));
        for t in 0..6 {
            log.begin(Attempt::new(t, false, None));
        }
        assert_eq!(log.made(), 8);
        assert_eq!(log.iter().count(), AttemptLog::KEPT);
        // Past the kept ones, the last attempt is not in the record.
        assert_eq!(log.last(), None);
    }
}
