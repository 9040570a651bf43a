//! Payload filters of L4 routes: an [`L4Filter`] sees the bytes of one direction of a connection
//! before they are relayed, and passes them, holds them until more arrive, replaces them, or
//! closes the connection. Each connection gets its own filter state, one chain per direction,
//! made from the route's [`L4Filters`]; routes without filters never build one and keep the
//! splice fast path.

use rampart_model::tcp_route::{DenyRegex, L4Filters};
use regex::bytes::Regex;

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the upstream.
    Up,
    /// From the upstream to the client.
    Down,
}

/// What a filter does with the bytes it was shown.
#[derive(Debug, PartialEq, Eq)]
pub enum FilterVerdict {
    /// Relay them as they are.
    Pass,
    /// Keep them and show them again with the next bytes (up to [`MAX_HELD`]).
    Hold,
    /// Relay these bytes instead.
    Replace(Vec<u8>),
    /// Close the connection (both directions) without relaying them.
    Close,
}

/// The most bytes a direction holds for its filters; past it the connection is closed.
pub const MAX_HELD: usize = 64 << 10;

/// A payload filter with per-connection state, for one direction of one connection.
pub trait L4Filter {
    /// `data`: the bytes read since the last verdict that was not [`FilterVerdict::Hold`] (so
    /// bytes held before come again, followed by the new ones).
    fn on_data(&mut self, data: &[u8]) -> FilterVerdict;
}

/// The filters of one direction, in the order the route lists them.
#[derive(Default)]
pub struct FilterChain {
    filters: Vec<Box<dyn L4Filter>>,
}

impl FilterChain {
    /// The chain of `direction` for one connection of a route with `config`.
    pub fn new(config: &L4Filters, direction: Direction) -> FilterChain {
        let mut filters: Vec<Box<dyn L4Filter>> = Vec::new();
        if let Some(max) = config.max_bytes {
            filters.push(Box::new(MaxBytes { left: max }));
        }
        if let (Some(deny), Direction::Up) = (&config.deny_regex, direction) {
            filters.push(Box::new(DenyPattern::new(deny)));
        }
        FilterChain { filters }
    }

    pub fn push(&mut self, filter: Box<dyn L4Filter>) {
        self.filters.push(filter);
    }

    /// Runs `data` through every filter: each sees what the one before it relays.
    pub fn on_data(&mut self, data: &[u8]) -> FilterVerdict {
        let mut replaced: Option<Vec<u8>> = None;
        for filter in &mut self.filters {
            let current = replaced.as_deref().unwrap_or(data);
            match filter.on_data(current) {
                FilterVerdict::Pass => {}
                FilterVerdict::Replace(bytes) => replaced = Some(bytes),
                stop @ (FilterVerdict::Hold | FilterVerdict::Close) => return stop,
            }
        }
        match replaced {
            Some(bytes) => FilterVerdict::Replace(bytes),
            None => FilterVerdict::Pass,
        }
    }
}

/// `max_bytes`: closes the connection when a direction would go past the limit (the read that
/// crosses it is not relayed).
struct MaxBytes {
    left: u64,
}

impl L4Filter for MaxBytes {
    fn on_data(&mut self, data: &[u8]) -> FilterVerdict {
        match self.left.checked_sub(data.len() as u64) {
            Some(left) => {
                self.left = left;
                FilterVerdict::Pass
            }
            None => FilterVerdict::Close,
        }
    }
}

/// `deny_regex`: closes the connection when the client's bytes match, also across read
/// boundaries: the latest `window` bytes are kept and searched again with the next read.
struct DenyPattern {
    regex: Regex,
    window: usize,
    /// The tail of the stream so far (at most `window` bytes), then the new bytes.
    scan: Vec<u8>,
}

impl DenyPattern {
    fn new(deny: &DenyRegex) -> DenyPattern {
        DenyPattern {
            regex: deny.regex.clone(),
            window: deny.window,
            scan: Vec::new(),
        }
    }
}

impl L4Filter for DenyPattern {
    fn on_data(&mut self, data: &[u8]) -> FilterVerdict {
        self.scan.extend_from_slice(data);
        if self.regex.is_match(&self.scan) {
            return FilterVerdict::Close;
        }
        let keep = self.scan.len().min(self.window);
        self.scan.drain(..self.scan.len() - keep);
        FilterVerdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(max_bytes: Option<u64>, deny: Option<&str>, direction: Direction) -> FilterChain {
        let config = L4Filters {
            max_bytes,
            deny_regex: deny.map(|r| DenyRegex {
                regex: Regex::new(r).unwrap(),
                window: 8,
            }),
        };
        FilterChain::new(&config, direction)
    }

    #[test]
    fn max_bytes_closes_past_the_limit() {
        let mut c = chain(Some(10), None, Direction::Down);
        assert_eq!(c.on_data(b"12345"), FilterVerdict::Pass);
        assert_eq!(c.on_data(b"12345"), FilterVerdict::Pass);
        assert_eq!(c.on_data(b"1"), FilterVerdict::Close);
    }

    #[test]
    fn deny_regex_matches_across_reads_in_its_window() {
        let mut c = chain(None, Some("DROP TABLE"), Direction::Up);
        assert_eq!(c.on_data(b"select 1; DROP T"), FilterVerdict::Pass);
        assert_eq!(c.on_data(b"ABLE x"), FilterVerdict::Close);
        // Only the client's direction is scanned.
        let mut down = chain(None, Some("DROP TABLE"), Direction::Down);
        assert_eq!(down.on_data(b"DROP TABLE"), FilterVerdict::Pass);
    }

    #[test]
    fn a_filter_sees_what_the_one_before_relays() {
        struct Upper;
        impl L4Filter for Upper {
            fn on_data(&mut self, data: &[u8]) -> FilterVerdict {
                FilterVerdict::Replace(data.to_ascii_uppercase())
            }
        }
        let mut c = FilterChain::default();
        c.push(Box::new(Upper));
        c.push(Box::new(DenyPattern::new(&DenyRegex {
            regex: Regex::new("EVIL").unwrap(),
            window: 8,
        })));
        assert_eq!(c.on_data(b"good"), FilterVerdict::Replace(b"GOOD".to_vec()));
        assert_eq!(c.on_data(b"evil"), FilterVerdict::Close);
    }
}
