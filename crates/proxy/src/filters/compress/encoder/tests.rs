use std::io::Write;

use ::brotli::enc::StandardAlloc;

use super::*;

const ALL: [Algorithm; 3] = Algorithm::ALL;

/// A deterministic JSON-like body of about `len` bytes: records with repeated keys and varied
/// values, like an API listing.
fn json_body(len: usize) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut body = b"[".to_vec();
    let mut id = 0;
    while body.len() < len {
        id += 1;
        let (a, b) = (WORDS[rng.below(12)], WORDS[rng.below(12)]);
        let record = format!(
            r#"{{"id":{id},"name":"{a} {b}","score":{},"active":{},"tags":["{b}","{a}"],"created":"2025-0{}-1{}T0{}:00:00Z"}},"#,
            rng.below(100_000),
            rng.below(2) == 1,
            1 + rng.below(9),
            rng.below(10),
            rng.below(10),
        );
        body.extend_from_slice(record.as_bytes());
    }
    body.truncate(len);
    body
}

/// Bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    let mut rng = Rng(42);
    (0..len).map(|_| rng.next() as u8).collect()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn encoder(algorithm: Algorithm, size_hint: Option<u64>) -> Encoder {
    Encoder::new(algorithm, algorithm.default_tuning(), size_hint).unwrap()
}

/// Compresses `chunks` one by one, then finishes.
fn compress_all<'a>(encoder: &mut Encoder, chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in chunks {
        encoder.compress(chunk, &mut out).unwrap();
    }
    encoder.finish(&mut out).unwrap();
    out
}

/// A whole stream decoded with the algorithm's own crate.
fn decode(algorithm: Algorithm, compressed: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::new();
    match algorithm {
        Algorithm::Gzip => {
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(compressed), &mut decoded).unwrap();
        }
        Algorithm::Brotli => {
            std::io::Read::read_to_end(&mut ::brotli::Decompressor::new(compressed, 4096), &mut decoded).unwrap();
        }
        Algorithm::Zstd => decoded = ::zstd::stream::decode_all(compressed).unwrap(),
    }
    decoded
}

/// A decoder fed a stream piece by piece, giving back what it has decoded so far.
enum StreamingDecoder {
    Gzip(flate2::Decompress, Vec<u8>),
    /// brotli's low-level decoder, called again whenever it filled the output buffer: it can say
    /// NeedsMoreInput with decoded bytes still held (as C's BrotliDecoderHasMoreOutput would tell),
    /// which `DecompressorWriter` does not check, so that holds them back until more input comes.
    Brotli(
        Box<::brotli::BrotliState<StandardAlloc, StandardAlloc, StandardAlloc>>,
        Vec<u8>,
    ),
    Zstd(::zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl StreamingDecoder {
    fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Gzip => StreamingDecoder::Gzip(flate2::Decompress::new_gzip(15), Vec::new()),
            Algorithm::Brotli => StreamingDecoder::Brotli(
                Box::new(::brotli::BrotliState::new(
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                )),
                Vec::new(),
            ),
            Algorithm::Zstd => StreamingDecoder::Zstd(::zstd::stream::write::Decoder::new(Vec::new()).unwrap()),
        }
    }

    fn feed(&mut self, compressed: &[u8]) -> &[u8] {
        match self {
            StreamingDecoder::Gzip(inflate, decoded) => {
                let mut consumed = 0;
                loop {
                    decoded.reserve(64 * 1024);
                    let before = inflate.total_in();
                    inflate
                        .decompress_vec(&compressed[consumed..], decoded, flate2::FlushDecompress::Sync)
                        .unwrap();
                    consumed += (inflate.total_in() - before) as usize;
                    if consumed == compressed.len() && decoded.len() < decoded.capacity() {
                        break;
                    }
                }
                decoded
            }
            StreamingDecoder::Brotli(state, decoded) => {
                let (mut available_in, mut in_offset, mut total) = (compressed.len(), 0, 0);
                let mut buffer = [0; 4096];
                loop {
                    let (mut available_out, mut out_offset) = (buffer.len(), 0);
                    let result = ::brotli::BrotliDecompressStream(
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
                        ::brotli::BrotliResult::ResultFailure => panic!("brotli stream corrupt"),
                        ::brotli::BrotliResult::NeedsMoreOutput => continue,
                        _ if available_out == 0 => continue,
                        _ => break,
                    }
                }
                decoded
            }
            StreamingDecoder::Zstd(writer) => {
                writer.write_all(compressed).unwrap();
                writer.flush().unwrap();
                writer.get_ref()
            }
        }
    }
}

#[test]
fn round_trip_in_many_small_chunks() {
    let body = json_body(200_000);
    for algorithm in ALL {
        // Chunks of 1 to 1500 bytes, as a slow upstream might deliver.
        let mut rng = Rng(7);
        let mut chunks = Vec::new();
        let mut rest = &body[..];
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at((1 + rng.below(1500)).min(rest.len()));
            chunks.push(chunk);
            rest = tail;
        }
        let compressed = compress_all(&mut encoder(algorithm, None), chunks.iter().copied());
        assert_eq!(decode(algorithm, &compressed), body, "{algorithm}");
        assert!(
            compressed.len() < body.len() / 3,
            "{algorithm}: {} of {}",
            compressed.len(),
            body.len()
        );
    }
}

#[test]
fn empty_body() {
    for algorithm in ALL {
        for size_hint in [None, Some(0)] {
            let mut encoder = encoder(algorithm, size_hint);
            let compressed = compress_all(&mut encoder, [&b""[..], b""]);
            assert!(
                !compressed.is_empty(),
                "{algorithm}: a stream has framing even when empty"
            );
            assert_eq!(decode(algorithm, &compressed), b"", "{algorithm}");
        }
    }
}

#[test]
fn one_mebibyte() {
    let body = json_body(1 << 20);
    for algorithm in ALL {
        let compressed = compress_all(&mut encoder(algorithm, None), body.chunks(16 * 1024));
        assert_eq!(decode(algorithm, &compressed), body, "{algorithm}");
        assert!(
            compressed.len() < body.len() / 4,
            "{algorithm}: {} of {}",
            compressed.len(),
            body.len()
        );
        // With its length known.
        let compressed = compress_all(&mut encoder(algorithm, Some(1 << 20)), body.chunks(16 * 1024));
        assert_eq!(decode(algorithm, &compressed), body, "{algorithm} with a size hint");
    }
}

#[test]
fn incompressible_data_round_trips() {
    let body = noise(300_000);
    for algorithm in ALL {
        let compressed = compress_all(&mut encoder(algorithm, None), body.chunks(40_000));
        assert_eq!(decode(algorithm, &compressed), body, "{algorithm}");
        let compressed = compress_all(&mut encoder(algorithm, None), [&body[..]]);
        assert_eq!(decode(algorithm, &compressed), body, "{algorithm} in one piece");
    }
}

#[test]
fn each_flush_decodes_to_exactly_the_body_so_far() {
    let body = json_body(120_000);
    let mut rng = Rng(99);
    let mut chunks = Vec::new();
    let mut rest = &body[..];
    while !rest.is_empty() {
        // Mostly small pieces (events), some large ones.
        let len = if rng.below(10) == 0 { 20_000 } else { 1 + rng.below(300) };
        let (chunk, tail) = rest.split_at(len.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    for algorithm in ALL {
        let mut encoder = encoder(algorithm, None);
        let mut decoder = StreamingDecoder::new(algorithm);
        let mut sent = 0;
        for chunk in &chunks {
            let mut out = Vec::new();
            encoder.compress(chunk, &mut out).unwrap();
            assert!(!out.is_empty(), "{algorithm}: a non-empty piece emits something");
            sent += chunk.len();
            let decoded = decoder.feed(&out);
            assert!(
                decoded == &body[..sent],
                "{algorithm}: {} bytes decoded after {sent}",
                decoded.len()
            );
        }
        let mut out = Vec::new();
        encoder.finish(&mut out).unwrap();
        assert!(decoder.feed(&out) == &body[..], "{algorithm} at the end");
    }
}

#[test]
fn a_piece_larger_than_the_encoders_blocks_is_flushed_whole() {
    let body = json_body(700_000);
    for algorithm in ALL {
        let mut encoder = encoder(algorithm, None);
        let mut decoder = StreamingDecoder::new(algorithm);
        for (start, end) in [(0, 5), (5, 600_000), (600_000, 600_001), (600_001, 700_000)] {
            let mut out = Vec::new();
            encoder.compress(&body[start..end], &mut out).unwrap();
            let decoded = decoder.feed(&out);
            assert!(
                decoded == &body[..end],
                "{algorithm}: {} bytes decoded of {end}",
                decoded.len()
            );
        }
    }
}

#[test]
fn server_sent_events_flow_one_by_one() {
    for algorithm in ALL {
        let mut encoder = encoder(algorithm, None);
        let mut decoder = StreamingDecoder::new(algorithm);
        let mut expected = Vec::new();
        let mut sent = 0;
        for i in 0..200 {
            let event = format!("event: tick\ndata: {{\"n\":{i},\"status\":\"ok\"}}\n\n");
            let mut out = Vec::new();
            encoder.compress(event.as_bytes(), &mut out).unwrap();
            sent += out.len();
            expected.extend_from_slice(event.as_bytes());
            let decoded = decoder.feed(&out);
            assert!(
                decoded == &expected[..],
                "{algorithm}, event {i}: {} of {} bytes",
                decoded.len(),
                expected.len()
            );
        }
        // Repeated events compress even with a flush after each.
        assert!(
            sent < expected.len() / 2,
            "{algorithm}: {sent} bytes for {}",
            expected.len()
        );
    }
}

#[test]
fn empty_pieces_emit_nothing() {
    for algorithm in ALL {
        let mut encoder = encoder(algorithm, None);
        let mut out = Vec::new();
        encoder.compress(b"", &mut out).unwrap();
        assert!(out.is_empty(), "{algorithm}");
        encoder.compress(b"hello", &mut out).unwrap();
        let after_hello = out.len();
        encoder.compress(b"", &mut out).unwrap();
        assert_eq!(out.len(), after_hello, "{algorithm}");
        encoder.finish(&mut out).unwrap();
        assert_eq!(decode(algorithm, &out), b"hello", "{algorithm}");
    }
}

#[test]
fn output_is_appended_to_what_out_holds() {
    for algorithm in ALL {
        let mut out = b"prefix".to_vec();
        let mut encoder = encoder(algorithm, None);
        encoder.compress(b"some body", &mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        assert_eq!(&out[..6], b"prefix", "{algorithm}");
        assert_eq!(decode(algorithm, &out[6..]), b"some body", "{algorithm}");
    }
}

#[test]
fn after_finish_the_encoder_refuses() {
    for algorithm in ALL {
        let mut encoder = encoder(algorithm, None);
        let mut out = Vec::new();
        encoder.compress(b"abc", &mut out).unwrap();
        assert!(!encoder.is_done());
        encoder.finish(&mut out).unwrap();
        assert!(encoder.is_done());
        let len = out.len();
        assert_eq!(
            encoder.compress(b"more", &mut out).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            encoder.compress(b"", &mut out).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            encoder.finish(&mut out).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(out.len(), len, "{algorithm}");
        assert_eq!(decode(algorithm, &out), b"abc", "{algorithm}");
        assert_eq!(encoder.algorithm(), algorithm);
    }
}

#[test]
fn a_wrong_size_hint_costs_nothing_but_ratio() {
    let body = json_body(300_000);
    for algorithm in ALL {
        for hint in [0, 1, 100, 5_000] {
            let compressed = compress_all(&mut encoder(algorithm, Some(hint)), body.chunks(10_000));
            assert_eq!(decode(algorithm, &compressed), body, "{algorithm} hinted {hint}");
        }
        let compressed = compress_all(&mut encoder(algorithm, Some(u64::MAX)), [&body[..1000]]);
        assert_eq!(
            decode(algorithm, &compressed),
            &body[..1000],
            "{algorithm} hinted u64::MAX"
        );
    }
}

#[test]
fn out_of_range_tunings_are_clamped() {
    let body = json_body(50_000);
    for algorithm in ALL {
        for (level, window_log) in [(i32::MIN, 0), (i32::MAX, u8::MAX), (-1, 9), (0, 30), (100, 16)] {
            let tuning = Tuning { level, window_log };
            let mut encoder = Encoder::new(algorithm, tuning, None).unwrap();
            let compressed = compress_all(&mut encoder, body.chunks(7_000));
            assert_eq!(decode(algorithm, &compressed), body, "{algorithm} {tuning:?}");
        }
    }
}

#[test]
fn every_level_round_trips() {
    let body = json_body(40_000);
    for algorithm in ALL {
        for level in algorithm.levels() {
            let tuning = Tuning {
                level,
                window_log: algorithm.default_tuning().window_log,
            };
            let compressed = compress_all(&mut Encoder::new(algorithm, tuning, None).unwrap(), body.chunks(8_000));
            assert_eq!(decode(algorithm, &compressed), body, "{algorithm} level {level}");
        }
    }
}

#[test]
fn windows_fit_the_body() {
    let gzip = Algorithm::Gzip.window_logs();
    assert_eq!(window_log(15, gzip.clone(), None, 262), 15);
    assert_eq!(window_log(15, gzip.clone(), Some(0), 262), 9);
    assert_eq!(window_log(15, gzip.clone(), Some(250), 262), 9);
    assert_eq!(window_log(15, gzip.clone(), Some(512 - 262), 262), 9);
    assert_eq!(window_log(15, gzip.clone(), Some(512 - 261), 262), 10);
    assert_eq!(window_log(15, gzip.clone(), Some(2048 - 262), 262), 11);
    assert_eq!(window_log(15, gzip.clone(), Some(2000), 262), 12);
    assert_eq!(window_log(15, gzip.clone(), Some(20_000), 262), 15);
    assert_eq!(window_log(13, gzip.clone(), Some(20_000), 262), 13);
    assert_eq!(window_log(15, gzip.clone(), Some(u64::MAX), 262), 15);
    // A configured window outside the range is clamped.
    assert_eq!(window_log(99, gzip.clone(), None, 262), 15);
    assert_eq!(window_log(0, gzip, Some(5_000), 262), 9);

    let brotli = Algorithm::Brotli.window_logs();
    assert_eq!(window_log(18, brotli.clone(), Some(1024 - 16), 16), 10);
    assert_eq!(window_log(18, brotli.clone(), Some(1024), 16), 11);
    assert_eq!(window_log(18, brotli.clone(), Some(100_000), 16), 17);
    assert_eq!(window_log(18, brotli.clone(), Some(1 << 20), 16), 18);
    assert_eq!(window_log(24, brotli, Some(1 << 30), 16), 24);
}
