//! DATA that goes out without a copy: a payload received as a slice of another connection's
//! read buffer is not copied into this connection's output; its frame header goes there, and the
//! payload waits here, to be written beside the output in one vectored write
//! ([`Payloads::gather`]). Small payloads are copied all the same (a copy of a few hundred octets
//! costs less than an extra I/O vector), and so is everything over TLS, which copies into its
//! records anyway.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Payloads from this size up go out without a copy.
pub(crate) const ZERO_COPY_MIN: usize = 2048;

/// I/O vectors one write takes at most.
const MAX_SLICES: usize = 64;

/// Payloads waiting, each with the offset in the connection's output it is written after.
#[derive(Default)]
pub(crate) struct Payloads {
    queue: VecDeque<(usize, Bytes)>,
    bytes: usize,
}

impl Payloads {
    /// `data` goes out once the output is written up to `at` (its frame header's end).
    pub fn push(&mut self, at: usize, data: Bytes) {
        if !data.is_empty() {
            self.bytes += data.len();
            self.queue.push_back((at, data));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Octets waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What is left to write, in order, with `written` octets of `out` written: the output up to
    /// each payload, the payload, and the output after the last one.
    pub fn gather<'a>(&'a self, out: &'a [u8], written: usize) -> Vec<IoSlice<'a>> {
        let mut slices = Vec::with_capacity((2 * self.queue.len() + 1).min(MAX_SLICES));
        let mut from = written;
        for (at, data) in &self.queue {
            if slices.len() + 2 > MAX_SLICES {
                return slices;
            }
            if *at > from {
                slices.push(IoSlice::new(&out[from..*at]));
            }
            slices.push(IoSlice::new(data));
            from = from.max(*at);
        }
        if from < out.len() {
            slices.push(IoSlice::new(&out[from..]));
        }
        slices
    }

    /// `n` octets of what [`Self::gather`] gave went out: `written` (of the output) moves on, and
    /// payloads written go.
    pub fn advance(&mut self, written: &mut usize, mut n: usize) {
        while n > 0 {
            let Some((at, data)) = self.queue.front_mut() else {
                *written += n;
                return;
            };
            if *written < *at {
                let k = n.min(*at - *written);
                *written += k;
                n -= k;
                continue;
            }
            let k = n.min(data.len());
            data.advance(k);
            self.bytes -= k;
            n -= k;
            if data.is_empty() {
                self.queue.pop_front();
            }
        }
    }

    /// Everything left to write, copied into one buffer (a connection's last words).
    pub fn flatten(&self, out: &[u8], written: usize) -> Vec<u8> {
        let mut all = Vec::new();
        let mut from = written;
        for (at, data) in &self.queue {
            all.extend_from_slice(&out[from.min(*at)..*at]);
            all.extend_from_slice(data);
            from = from.max(*at);
        }
        all.extend_from_slice(out.get(from..).unwrap_or_default());
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(slices: &[IoSlice<'_>]) -> Vec<u8> {
        slices.iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn payloads_go_out_between_the_output_they_were_queued_in_in_any_split() {
        let out = b"H1H2tail".to_vec();
        let expected = b"H1payload-oneH2payload-twotail".to_vec();
        // Every way of writing it in two pieces gives the same bytes.
        for first in 0..=expected.len() {
            let mut p = Payloads::default();
            p.push(2, Bytes::from_static(b"payload-one"));
            p.push(4, Bytes::from_static(b"payload-two"));
            let mut written = 0;
            assert_eq!(joined(&p.gather(&out, written)), expected);
            assert_eq!(p.flatten(&out, written), expected);
            p.advance(&mut written, first);
            let rest = joined(&p.gather(&out, written));
            assert_eq!(rest, expected[first..], "after {first}");
            assert_eq!(p.flatten(&out, written), expected[first..]);
            p.advance(&mut written, rest.len());
            assert!(p.is_empty());
            assert_eq!(p.bytes(), 0);
            assert_eq!(written, out.len());
        }
    }

    #[test]
    fn one_write_takes_a_bounded_number_of_slices() {
        let mut out = Vec::new();
        let mut p = Payloads::default();
        for _ in 0..100 {
            out.extend_from_slice(b"hdr");
            p.push(out.len(), Bytes::from_static(b"data"));
        }
        let mut written = 0;
        let mut all = Vec::new();
        while !p.is_empty() || written < out.len() {
            let slices = p.gather(&out, written);
            assert!(slices.len() <= MAX_SLICES);
            let chunk = joined(&slices);
            p.advance(&mut written, chunk.len());
            all.extend(chunk);
        }
        assert_eq!(all, b"hdrdata".repeat(100));
    }
}
