//! zstd (RFC 8878; HTTP's `zstd` coding, RFC 9659), by libzstd through the `zstd` crate, allocating
//! through Rust's allocator. No checksum and no content size in the frame header (the size is
//! unknown when the header goes out); RFC 9659 needs neither.

use std::io;

use zstd::zstd_safe::zstd_sys::ZSTD_EndDirective;
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

use super::{output_room, stalled};

const MAX_BLOCK_SIZE: u32 = 32 * 1024;

pub(super) struct ZstdEncoder {
    context: CCtx<'static>,
}

impl ZstdEncoder {
    /// `window_log` caps the window; with a `size_hint`, libzstd picks smaller tables and window for
    /// a short body (a hint, not a promise: a longer body still encodes correctly).
    pub(super) fn new(level: i32, window_log: u8, size_hint: Option<u64>) -> io::Result<Self> {
        let mut context =
            CCtx::try_create().ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "zstd context"))?;
        context
            .set_parameter(CParameter::CompressionLevel(level))
            .map_err(zstd_error)?;
        context
            .set_parameter(CParameter::WindowLog(u32::from(window_log)))
            .map_err(zstd_error)?;
        // Blocks of at most 32 KiB instead of 128: the filter flushes every piece of 16 KiB or so,
        // which ends a block anyway, and the smaller input and sequence buffers save about 550 KiB.
        context
            .set_parameter(CParameter::MaxBlockSize(MAX_BLOCK_SIZE))
            .map_err(zstd_error)?;
        if let Some(size) = size_hint {
            // libzstd takes the hint as a C int.
            let size = u32::try_from(size.min(i32::MAX as u64)).unwrap_or(i32::MAX as u32);
            context
                .set_parameter(CParameter::SrcSizeHint(size))
                .map_err(zstd_error)?;
        }
        Ok(ZstdEncoder { context })
    }

    pub(super) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.run(input, out, ZSTD_EndDirective::ZSTD_e_flush)
    }

    pub(super) fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        self.run(&[], out, ZSTD_EndDirective::ZSTD_e_end)
    }

    /// Feeds `input` with `directive` until libzstd has taken all of it and reports nothing left to
    /// flush (for `ZSTD_e_end`: the frame is complete).
    fn run(&mut self, input: &[u8], out: &mut Vec<u8>, directive: ZSTD_EndDirective) -> io::Result<()> {
        let mut input_buffer = InBuffer::around(input);
        loop {
            out.reserve(output_room(input.len() - input_buffer.pos()));
            let (read_before, written_before) = (input_buffer.pos(), out.len());
            let position = out.len();
            let left_to_flush = {
                let mut output_buffer = OutBuffer::around_pos(out, position);
                self.context
                    .compress_stream2(&mut output_buffer, &mut input_buffer, directive)
                    .map_err(zstd_error)?
            };
            if left_to_flush == 0 && input_buffer.pos() == input.len() {
                return Ok(());
            }
            if input_buffer.pos() == read_before && out.len() == written_before {
                return Err(stalled("zstd"));
            }
        }
    }
}

fn zstd_error(code: zstd_safe::ErrorCode) -> io::Error {
    io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(code)))
}
