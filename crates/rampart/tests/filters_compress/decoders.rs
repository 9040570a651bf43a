//! Decoders for what the `compress` filter sends, each by its coding's own crate: whole streams,
//! and streams fed piece by piece that give back what they have decoded so far.

use std::io::{Read, Write};

use brotli::enc::StandardAlloc;

/// A whole stream of `coding` decoded; a truncated or corrupt one fails the test.
pub fn decode(coding: &str, compressed: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::new();
    let result = match coding {
        "gzip" => flate2::read::GzDecoder::new(compressed).read_to_end(&mut decoded),
        "br" => brotli::Decompressor::new(compressed, 4096).read_to_end(&mut decoded),
        "zstd" => zstd::stream::read::Decoder::new(compressed).and_then(|mut d| d.read_to_end(&mut decoded)),
        other => panic!("no decoder for {other}"),
    };
    result.unwrap_or_else(|e| panic!("{coding} stream of {} bytes: {e}", compressed.len()));
    decoded
}

/// A decoder fed a stream piece by piece.
pub enum StreamingDecoder {
    Gzip(flate2::Decompress, Vec<u8>),
    /// brotli's low-level decoder, called again while it fills its output: it can stop for more
    /// input with decoded bytes still held, which its `DecompressorWriter` would keep back.
    Brotli(
        Box<brotli::BrotliState<StandardAlloc, StandardAlloc, StandardAlloc>>,
        Vec<u8>,
    ),
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl StreamingDecoder {
    pub fn new(coding: &str) -> StreamingDecoder {
        match coding {
            "gzip" => StreamingDecoder::Gzip(flate2::Decompress::new_gzip(15), Vec::new()),
            "br" => StreamingDecoder::Brotli(
                Box::new(brotli::BrotliState::new(
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                )),
                Vec::new(),
            ),
            "zstd" => StreamingDecoder::Zstd(zstd::stream::write::Decoder::new(Vec::new()).unwrap()),
            other => panic!("no decoder for {other}"),
        }
    }

    /// Decodes the next piece of the stream.
    pub fn feed(&mut self, compressed: &[u8]) {
        match self {
            StreamingDecoder::Gzip(inflate, decoded) => {
                let mut consumed = 0;
                loop {
                    decoded.reserve(64 * 1024);
                    let before = inflate.total_in();
                    inflate
                        .decompress_vec(&compressed[consumed..], decoded, flate2::FlushDecompress::Sync)
                        .expect("a gzip stream");
                    consumed += (inflate.total_in() - before) as usize;
                    if consumed == compressed.len() && decoded.len() < decoded.capacity() {
                        break;
                    }
                }
            }
            StreamingDecoder::Brotli(state, decoded) => {
                let (mut available_in, mut in_offset, mut total) = (compressed.len(), 0, 0);
                let mut buffer = [0; 4096];
                loop {
                    let (mut available_out, mut out_offset) = (buffer.len(), 0);
                    let result = brotli::BrotliDecompressStream(
                        &mut available_in,
                        &mut in_offset,
                        compressed,
                        &mut available_out,
                        &mut out_offset,
                        &mut buffer,
                        &mut total,
                        state,
                    );
                    decoded.extend_from_slice(&buffer[..out_offset]);
                    match result {
                        brotli::BrotliResult::ResultFailure => panic!("a corrupt brotli stream"),
                        brotli::BrotliResult::NeedsMoreOutput => continue,
                        _ if available_out == 0 => continue,
                        _ => break,
                    }
                }
            }
            StreamingDecoder::Zstd(writer) => {
                writer.write_all(compressed).expect("a zstd stream");
                writer.flush().unwrap();
            }
        }
    }

    /// Everything decoded so far.
    pub fn decoded(&self) -> &[u8] {
        match self {
            StreamingDecoder::Gzip(_, decoded) | StreamingDecoder::Brotli(_, decoded) => decoded,
            StreamingDecoder::Zstd(writer) => writer.get_ref(),
        }
    }
}
