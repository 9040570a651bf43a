//! gzip: deflate with gzip framing (RFC 1952), written by zlib-rs through flate2.

use std::io;

use flate2::{Compress, Compression, FlushCompress, Status};

use super::{output_room, stalled};

pub(super) struct GzipEncoder {
    deflate: Compress,
}

impl GzipEncoder {
    /// `level` 1-9, `window_log` 9-15 (checked by the caller: flate2 panics outside them).
    pub(super) fn new(level: u32, window_log: u8) -> Self {
        GzipEncoder {
            deflate: Compress::new_gzip(Compression::new(level.clamp(1, 9)), window_log.clamp(9, 15)),
        }
    }

    pub(super) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.run(input, out, FlushCompress::Sync)
    }

    pub(super) fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        self.run(&[], out, FlushCompress::Finish)
    }

    /// Feeds `input` with `flush` until deflate has taken all of it and emitted everything: a sync
    /// flush is complete when deflate leaves room in the output, a finish when it says StreamEnd.
    fn run(&mut self, input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) -> io::Result<()> {
        let mut consumed = 0;
        loop {
            out.reserve(output_room(input.len() - consumed));
            let (read_before, written_before) = (self.deflate.total_in(), self.deflate.total_out());
            let status = self
                .deflate
                .compress_vec(&input[consumed..], out, flush)
                .map_err(io::Error::other)?;
            let read = (self.deflate.total_in() - read_before) as usize;
            let written = self.deflate.total_out() - written_before;
            consumed += read;
            let room_left = out.len() < out.capacity();
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                _ => consumed == input.len() && room_left,
            };
            if done {
                return Ok(());
            }
            if read == 0 && written == 0 && room_left {
                return Err(stalled("gzip"));
            }
        }
    }
}
