//! Compression ratio and time per 16 KiB piece of the compress filter's encoders, on files given
//! on the command line (realistic JSON and HTML make the point), for a set of levels and windows.
//!
//! `cargo run --release -p rampart-proxy --example compress_levels -- FILE...`
//! (`SETTINGS=gzip:5:15,br:4:18,zstd:3:20` to choose the coding:level:window settings)
//!
//! For each file and setting it prints:
//! - `ratio`: the file's size over its compressed size when streamed in 16 KiB pieces with a flush
//!   after each (as the filter does), and `whole`: the same compressed in one piece (what the flushes
//!   cost);
//! - `us/16K`: microseconds per 16 KiB piece (the fastest of several runs of each piece: the
//!   machine may be shared);
//! - `16K body`: microseconds to create an encoder, compress the file's first 16 KiB and finish (a
//!   whole short response, setup included), and that body's ratio.

use std::time::Instant;

use rampart_proxy::filters::compress::Encoder;
use rampart_proxy::model::filter::compress::{Algorithm, Tuning};

const PIECE: usize = 16 * 1024;

/// (algorithm, level, window log); `SETTINGS=gzip:5:15,zstd:3:20` replaces them.
const DEFAULT_SETTINGS: &[(Algorithm, i32, u8)] = &[
    (Algorithm::Gzip, 1, 15),
    (Algorithm::Gzip, 4, 15),
    (Algorithm::Gzip, 5, 15),
    (Algorithm::Gzip, 6, 15),
    (Algorithm::Gzip, 9, 15),
    (Algorithm::Brotli, 2, 18),
    (Algorithm::Brotli, 3, 18),
    (Algorithm::Brotli, 4, 18),
    (Algorithm::Brotli, 4, 20),
    (Algorithm::Brotli, 5, 18),
    (Algorithm::Brotli, 6, 18),
    (Algorithm::Zstd, 1, 20),
    (Algorithm::Zstd, 3, 18),
    (Algorithm::Zstd, 3, 19),
    (Algorithm::Zstd, 3, 20),
    (Algorithm::Zstd, 3, 22),
    (Algorithm::Zstd, 6, 20),
];

fn main() -> std::io::Result<()> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: compress_levels FILE...");
        std::process::exit(2);
    }
    let settings: Vec<(Algorithm, i32, u8)> = match std::env::var("SETTINGS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                let mut parts = s.split(':');
                let algorithm = Algorithm::from_token(parts.next().unwrap().as_bytes()).unwrap();
                (
                    algorithm,
                    parts.next().unwrap().parse().unwrap(),
                    parts.next().unwrap().parse().unwrap(),
                )
            })
            .collect(),
        Err(_) => DEFAULT_SETTINGS.to_vec(),
    };
    for file in &files {
        let data = std::fs::read(file)?;
        println!("{file}: {} bytes", data.len());
        println!(
            "  {:<6} {:>5} {:>6} | {:>7} {:>7} {:>8} | {:>14}",
            "coding", "level", "window", "ratio", "whole", "us/16K", "16K body"
        );
        for &(algorithm, level, window_log) in &settings {
            let tuning = Tuning { level, window_log };
            let (streamed, per_piece) = stream(algorithm, tuning, &data, 15)?;
            let whole = compressed_len(algorithm, tuning, &[&data[..]])?;
            let body = &data[..data.len().min(PIECE)];
            let (body_len, body_us) = short_body(algorithm, tuning, body, 300)?;
            println!(
                "  {:<6} {:>5} {:>6} | {:>7.2} {:>7.2} {:>8.1} | {:>6.1} us {:>5.2}",
                algorithm.token(),
                level,
                window_log,
                data.len() as f64 / streamed as f64,
                data.len() as f64 / whole as f64,
                per_piece,
                body_us,
                body.len() as f64 / body_len as f64,
            );
        }
    }
    Ok(())
}

/// Streams `data` in 16 KiB pieces `runs` times: the compressed size, and the mean over pieces of
/// each piece's fastest time in µs.
fn stream(algorithm: Algorithm, tuning: Tuning, data: &[u8], runs: usize) -> std::io::Result<(usize, f64)> {
    let pieces: Vec<&[u8]> = data.chunks(PIECE).collect();
    let mut fastest = vec![f64::MAX; pieces.len()];
    let mut size = 0;
    let mut out = Vec::with_capacity(data.len() + 1024);
    for _ in 0..runs {
        out.clear();
        let mut encoder = Encoder::new(algorithm, tuning, None)?;
        for (piece, best) in pieces.iter().zip(&mut fastest) {
            let started = Instant::now();
            encoder.compress(piece, &mut out)?;
            *best = best.min(started.elapsed().as_secs_f64());
        }
        encoder.finish(&mut out)?;
        size = out.len();
    }
    Ok((size, fastest.iter().sum::<f64>() * 1e6 / pieces.len() as f64))
}

fn compressed_len(algorithm: Algorithm, tuning: Tuning, pieces: &[&[u8]]) -> std::io::Result<usize> {
    let mut encoder = Encoder::new(algorithm, tuning, None)?;
    let mut out = Vec::new();
    for piece in pieces {
        encoder.compress(piece, &mut out)?;
    }
    encoder.finish(&mut out)?;
    Ok(out.len())
}

/// A whole short response `runs` times, its length known: compressed size and fastest µs.
fn short_body(algorithm: Algorithm, tuning: Tuning, body: &[u8], runs: usize) -> std::io::Result<(usize, f64)> {
    let mut fastest = f64::MAX;
    let mut size = 0;
    let mut out = Vec::with_capacity(body.len() + 1024);
    for _ in 0..runs {
        out.clear();
        let started = Instant::now();
        let mut encoder = Encoder::new(algorithm, tuning, Some(body.len() as u64))?;
        encoder.compress(body, &mut out)?;
        encoder.finish(&mut out)?;
        drop(encoder);
        fastest = fastest.min(started.elapsed().as_secs_f64());
        size = out.len();
    }
    Ok((size, fastest * 1e6))
}
