//! The `compress` filter's keys: which codings and in what order (`algorithms`), which responses
//! (`content_types`, `min_length`), and how hard and with how much memory each coding works
//! (`gzip_level`, `brotli_level`, `zstd_level`, `gzip_window`, `brotli_window`, `zstd_window`).
//! Every key is optional; the defaults and the ranges are the model's
//! (`rampart_model::filter::compress`).

use rampart_model::filter::compress::{Algorithm, CompressSettings, ContentTypePattern, Tuning};
use rampart_model::filter::Filter;
use toml::Value;

use super::FilterTable;
use crate::compile::Checker;
use crate::units::parse_size;

/// The codings as `algorithms` names them, for messages.
const CODINGS: &str = "\"zstd\", \"br\", \"gzip\"";

impl Checker<'_> {
    pub(super) fn compress_filter(&mut self, t: &mut FilterTable<'_>) -> Option<Filter> {
        let defaults = CompressSettings::default();
        let mut ok = true;
        let algorithms = match self.compress_algorithms(t) {
            Some(Ok(list)) => list,
            Some(Err(())) => {
                ok = false;
                defaults.algorithms.clone()
            }
            None => defaults.algorithms.clone(),
        };
        let content_types = match self.compress_content_types(t) {
            Some(Ok(list)) => list,
            Some(Err(())) => {
                ok = false;
                Vec::new()
            }
            None => defaults.content_types.clone(),
        };
        let min_length = self.filter_size(t, "min_length").unwrap_or(defaults.min_length);
        let mut tuning = |cx: &mut Self, algorithm: Algorithm, name: &str| -> Tuning {
            let level = cx.compress_level(t, algorithm, name, &algorithms);
            let window_log = cx.compress_window(t, algorithm, name, &algorithms);
            let default = algorithm.default_tuning();
            Tuning {
                level: level.unwrap_or(default.level),
                window_log: window_log.unwrap_or(default.window_log),
            }
        };
        let gzip = tuning(self, Algorithm::Gzip, "gzip");
        let brotli = tuning(self, Algorithm::Brotli, "brotli");
        let zstd = tuning(self, Algorithm::Zstd, "zstd");
        ok.then(|| {
            Filter::Compress(CompressSettings {
                algorithms,
                gzip,
                brotli,
                zstd,
                min_length,
                content_types,
            })
        })
    }

    /// `algorithms`: codings by their `Content-Encoding` token, each at most once, at least one.
    /// `None` when absent; `Some(Err)` after an error.
    fn compress_algorithms(&mut self, t: &mut FilterTable<'_>) -> Option<Result<Vec<Algorithm>, ()>> {
        let list = self.filter_strings(t, "algorithms")?;
        let mut algorithms = Vec::new();
        for token in list.get_ref() {
            // `x-gzip` is a request's alias, not a name to configure.
            let algorithm = Algorithm::ALL.into_iter().find(|a| a.token() == token);
            match algorithm {
                Some(a) if algorithms.contains(&a) => {
                    self.error(list.span(), format!("`algorithms` lists \"{token}\" twice"));
                    return Some(Err(()));
                }
                Some(a) => algorithms.push(a),
                None => {
                    self.error(
                        list.span(),
                        format!("`{token}` is not a coding Rampart produces (known: {CODINGS})"),
                    );
                    return Some(Err(()));
                }
            }
        }
        if algorithms.is_empty() {
            self.error(
                list.span(),
                format!("`algorithms` needs at least one of {CODINGS} (to compress nothing, leave the filter out)"),
            );
            return Some(Err(()));
        }
        Some(Ok(algorithms))
    }

    /// `content_types`: patterns (`text/html`, `text/*`, `application/*+json`, `*/*`), at least one.
    fn compress_content_types(&mut self, t: &mut FilterTable<'_>) -> Option<Result<Vec<ContentTypePattern>, ()>> {
        let list = self.filter_strings(t, "content_types")?;
        let mut patterns = Vec::new();
        let mut failed = false;
        for pattern in list.get_ref() {
            match ContentTypePattern::parse(pattern) {
                Ok(p) if !patterns.contains(&p) => patterns.push(p),
                Ok(_) => {}
                Err(e) => {
                    self.error(list.span(), e.to_string());
                    failed = true;
                }
            }
        }
        if failed {
            return Some(Err(()));
        }
        if patterns.is_empty() {
            self.error(
                list.span(),
                "`content_types` needs at least one pattern (to compress nothing, leave the filter out)",
            );
            return Some(Err(()));
        }
        Some(Ok(patterns))
    }

    /// `NAME_level`, within [`Algorithm::levels`].
    fn compress_level(
        &mut self,
        t: &mut FilterTable<'_>,
        algorithm: Algorithm,
        name: &str,
        algorithms: &[Algorithm],
    ) -> Option<i32> {
        let key = format!("{name}_level");
        let v = t.get(&key)?;
        let levels = algorithm.levels();
        let level = match v.get_ref() {
            Value::Integer(n) if levels.contains(&i32::try_from(*n).unwrap_or(i32::MAX)) => *n as i32,
            Value::Integer(n) => {
                self.error(
                    v.span(),
                    format!(
                        "`{key}` = {n} is out of range ({} to {}{})",
                        levels.start(),
                        levels.end(),
                        level_note(algorithm)
                    ),
                );
                return None;
            }
            _ => {
                self.error(v.span(), format!("`{key}` is a whole number"));
                return None;
            }
        };
        self.unused_tuning(v.span(), &key, algorithm, algorithms);
        Some(level)
    }

    /// `NAME_window`: a size that is a power of two within [`Algorithm::window_logs`], as its
    /// base-2 logarithm.
    fn compress_window(
        &mut self,
        t: &mut FilterTable<'_>,
        algorithm: Algorithm,
        name: &str,
        algorithms: &[Algorithm],
    ) -> Option<u8> {
        let key = format!("{name}_window");
        let v = t.get(&key)?;
        let size = match v.get_ref() {
            Value::Integer(n) if *n >= 0 => Ok(*n as u64),
            Value::String(s) => parse_size(s),
            _ => Err(format!("`{key}` is a size, such as \"256KiB\"")),
        };
        let logs = algorithm.window_logs();
        let window_log = size.and_then(|size| {
            let log = size.checked_ilog2().unwrap_or(0);
            match u8::try_from(log) {
                Ok(log) if size.is_power_of_two() && logs.contains(&log) => Ok(log),
                _ => Err(format!(
                    "`{key}` is a power of two from {} to {}",
                    power_of_two(*logs.start()),
                    power_of_two(*logs.end())
                )),
            }
        });
        match window_log {
            Ok(log) => {
                self.unused_tuning(v.span(), &key, algorithm, algorithms);
                Some(log)
            }
            Err(e) => {
                self.error(v.span(), e);
                None
            }
        }
    }

    /// A level or window of a coding `algorithms` leaves out would never apply: most likely a
    /// mistake, so an error at the value.
    fn unused_tuning(
        &mut self,
        span: std::ops::Range<usize>,
        key: &str,
        algorithm: Algorithm,
        algorithms: &[Algorithm],
    ) {
        if !algorithms.contains(&algorithm) {
            self.error(
                span,
                format!(
                    "`{key}` is set, but `algorithms` does not list \"{}\"",
                    algorithm.token()
                ),
            );
        }
    }
}

/// Why the upper bound is lower than the library's, for the range message.
fn level_note(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gzip => "",
        // See `Algorithm::levels`: higher ones hold tens of MiB per response.
        Algorithm::Brotli | Algorithm::Zstd => {
            "; higher levels hold tens of MiB per response and belong to precompressed files"
        }
    }
}

/// `2^log` bytes as the config writes sizes: `512B`, `32KiB`, `8MiB`.
fn power_of_two(log: u8) -> String {
    match log {
        0..=9 => format!("{}B", 1u64 << log),
        10..=19 => format!("{}KiB", 1u64 << (log - 10)),
        _ => format!("{}MiB", 1u64 << (log - 20)),
    }
}

#[cfg(test)]
mod tests;
