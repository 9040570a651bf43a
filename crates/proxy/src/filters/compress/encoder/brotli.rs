//! brotli (RFC 7932), by the `brotli` crate's encoder, writing straight into the caller's buffer.

use std::io;

use brotli::enc::encode::{
    BrotliEncoderDestroyInstance, BrotliEncoderOperation, BrotliEncoderParameter, BrotliEncoderStateStruct,
};
use brotli::enc::StandardAlloc;

use super::{output_room, stalled};

pub(super) struct BrotliEncoder {
    state: BrotliEncoderStateStruct<StandardAlloc>,
}

impl BrotliEncoder {
    /// `quality` 0-11, `window_log` 10-24 (brotli clamps both itself too).
    pub(super) fn new(quality: u32, window_log: u8, size_hint: Option<u64>) -> io::Result<Self> {
        let mut state = BrotliEncoderStateStruct::new(StandardAlloc::default());
        let mut set = |parameter, value| {
            if state.set_parameter(parameter, value) {
                Ok(())
            } else {
                Err(io::Error::other(format!("brotli refused {parameter:?} = {value}")))
            }
        };
        set(BrotliEncoderParameter::BROTLI_PARAM_QUALITY, quality)?;
        set(BrotliEncoderParameter::BROTLI_PARAM_LGWIN, u32::from(window_log))?;
        if let Some(size) = size_hint {
            set(
                BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT,
                u32::try_from(size).unwrap_or(u32::MAX),
            )?;
        }
        Ok(BrotliEncoder { state })
    }

    pub(super) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.run(BrotliEncoderOperation::BROTLI_OPERATION_FLUSH, input, out)
    }

    pub(super) fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        self.run(BrotliEncoderOperation::BROTLI_OPERATION_FINISH, &[], out)
    }

    /// Feeds `input` with `operation` until the encoder has taken all of it and stopped with room
    /// left in the output and nothing held back (a flush), or has finished the stream (a finish).
    /// (With no room at all, brotli can stop with input copied but not yet encoded, so the
    /// caller-side buffer is what tells a complete flush.)
    fn run(&mut self, operation: BrotliEncoderOperation, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let mut available_in = input.len();
        let mut in_offset = 0;
        loop {
            let available_before = available_in;
            let start = out.len();
            let room = output_room(available_in);
            out.resize(start + room, 0);
            let (mut available_out, mut out_offset, mut total_out) = (room, start, None);
            let ok = self.state.compress_stream(
                operation,
                &mut available_in,
                input,
                &mut in_offset,
                &mut available_out,
                out,
                &mut out_offset,
                &mut total_out,
                &mut |_, _, _, _| (),
            );
            out.truncate(out_offset);
            if !ok {
                return Err(io::Error::other("brotli encoder failed"));
            }
            let done = match operation {
                BrotliEncoderOperation::BROTLI_OPERATION_FINISH => self.state.is_finished(),
                _ => available_in == 0 && available_out > 0 && !self.state.has_more_output(),
            };
            if done {
                return Ok(());
            }
            if available_in == available_before && out_offset == start {
                return Err(stalled("brotli"));
            }
        }
    }
}

impl Drop for BrotliEncoder {
    fn drop(&mut self) {
        BrotliEncoderDestroyInstance(&mut self.state);
    }
}
