//! Streaming encoders for the response body phase: gzip (flate2 on zlib-rs), brotli (the `brotli`
//! crate) and zstd (the `zstd` crate's libzstd).
//!
//! [`Encoder::compress`] takes the next piece of the body and appends to `out` everything the
//! encoder can emit for it, flushed (a sync flush for deflate, a flush for brotli and zstd): what
//! has gone out decodes to exactly the body so far, so a slow or never-ending stream (server-sent
//! events, long polls) keeps flowing. Each flush costs a few bytes and ends a block, so feeding the
//! encoder larger pieces compresses better. [`Encoder::finish`] appends the end of the stream.
//!
//! Memory: each encoder allocates its window and match-finder tables up front or at its first
//! piece, and frees them at [`Encoder::finish`] or drop. The window is capped by the algorithm's
//! [`Tuning::window_log`] and, when the body's length is known, by the smallest window that holds
//! it (nginx does the same for gzip; libzstd sizes its tables to the hint too), so short responses
//! get small encoders. Measured at the default tunings for a body of unknown length: gzip 371 KiB,
//! brotli 1.3 MiB, zstd 2.0 MiB; for a 2 KiB body: 259 KiB, 568 KiB, 63 KiB. The proxy crate's
//! `tests/compress_memory.rs` checks these; the full table is in docs/benchmarks.md.
//!
//! No call panics: an encoder error (allocation refused inside libzstd, an encoder refusing its
//! state) is an `io::Error`, after which the encoder refuses further calls.

mod brotli;
mod gzip;
mod zstd;

use std::io;
use std::ops::RangeInclusive;

use rampart_model::filter::compress::{Algorithm, Tuning};

/// One response body's encoder.
pub struct Encoder {
    algorithm: Algorithm,
    state: State,
}

enum State {
    Gzip(gzip::GzipEncoder),
    Brotli(Box<brotli::BrotliEncoder>),
    Zstd(zstd::ZstdEncoder),
    /// Finished, or failed: the encoder's memory is freed.
    Done,
}

impl Encoder {
    /// An encoder for `algorithm` at `tuning` (a level or window outside [`Algorithm::levels`] or
    /// [`Algorithm::window_logs`] is clamped into it), for a body of `size_hint` bytes if known. A
    /// wrong hint costs compression, never correctness: the stream stays valid for any length.
    pub fn new(algorithm: Algorithm, tuning: Tuning, size_hint: Option<u64>) -> io::Result<Encoder> {
        let level = tuning
            .level
            .clamp(*algorithm.levels().start(), *algorithm.levels().end());
        let state = match algorithm {
            Algorithm::Gzip => {
                // zlib slides its window by 2^w less 262 bytes of lookahead.
                let window_log = window_log(tuning.window_log, algorithm.window_logs(), size_hint, 262);
                State::Gzip(gzip::GzipEncoder::new(level.unsigned_abs(), window_log))
            }
            Algorithm::Brotli => {
                // brotli's window is 2^w less 16 bytes. Qualities 5-9 with a window of 64 KiB or
                // less switch to a match finder of 33 MiB (measured): never below 128 KiB for them.
                let range = if level >= 5 {
                    17..=*algorithm.window_logs().end()
                } else {
                    algorithm.window_logs()
                };
                let window_log = window_log(tuning.window_log, range, size_hint, 16);
                State::Brotli(Box::new(brotli::BrotliEncoder::new(
                    level.unsigned_abs(),
                    window_log,
                    size_hint,
                )?))
            }
            Algorithm::Zstd => {
                // libzstd sizes its window and tables to the hint itself, below this cap.
                let window_log = window_log(tuning.window_log, algorithm.window_logs(), None, 0);
                State::Zstd(zstd::ZstdEncoder::new(level, window_log, size_hint)?)
            }
        };
        Ok(Encoder { algorithm, state })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Compresses the next piece of the body and appends everything that can be emitted for it,
    /// flushed, to `out`. An empty `input` appends nothing.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        if input.is_empty() && !matches!(self.state, State::Done) {
            return Ok(());
        }
        let result = match &mut self.state {
            State::Gzip(encoder) => encoder.compress(input, out),
            State::Brotli(encoder) => encoder.compress(input, out),
            State::Zstd(encoder) => encoder.compress(input, out),
            State::Done => return Err(finished()),
        };
        if result.is_err() {
            self.state = State::Done;
        }
        result
    }

    /// Appends the end of the compressed stream to `out` and frees the encoder's memory.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let result = match &mut self.state {
            State::Gzip(encoder) => encoder.finish(out),
            State::Brotli(encoder) => encoder.finish(out),
            State::Zstd(encoder) => encoder.finish(out),
            State::Done => return Err(finished()),
        };
        self.state = State::Done;
        result
    }

    /// Whether [`Encoder::finish`] has been called (or an error ended the stream).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("algorithm", &self.algorithm)
            .field("done", &self.is_done())
            .finish()
    }
}

fn finished() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "the compressed stream has ended")
}

/// An encoder that stopped making progress: a bug in this module or below it, reported rather
/// than spun on.
fn stalled(algorithm: &str) -> io::Error {
    io::Error::other(format!("{algorithm} encoder made no progress"))
}

/// Room to reserve in `out` before an encoder call with `remaining` input bytes: compressible text
/// needs less than half; an incompressible piece takes a second round.
fn output_room(remaining: usize) -> usize {
    remaining / 2 + 128
}

/// The window log for a body of `size_hint` bytes: the smallest in `range` whose window (2^w less
/// `overhead`) holds the body, and never above `configured` (clamped into `range`).
fn window_log(configured: u8, range: RangeInclusive<u8>, size_hint: Option<u64>, overhead: u64) -> u8 {
    let cap = configured.clamp(*range.start(), *range.end());
    let Some(size) = size_hint else { return cap };
    (*range.start()..cap)
        .find(|&log| (1u64 << log).saturating_sub(overhead) >= size)
        .unwrap_or(cap)
}

#[cfg(test)]
mod tests;
