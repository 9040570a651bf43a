//! `[global] log_level` and `log_format`: how the process logs to stderr.

use toml::Spanned;

use super::Checker;
use crate::raw::RawGlobal;

/// The least severe level logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub const NAMES: [&'static str; 5] = ["error", "warn", "info", "debug", "trace"];
    const ALL: [LogLevel; 5] = [
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
        LogLevel::Trace,
    ];

    pub fn from_name(name: &str) -> Option<LogLevel> {
        let i = Self::NAMES.iter().position(|n| *n == name)?;
        Some(Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// How each log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `TIME LEVEL message key=value`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    pub const NAMES: [&'static str; 2] = ["text", "json"];

    pub fn from_name(name: &str) -> Option<LogFormat> {
        match name {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// The process log's settings. `RUST_LOG` and `--log-format` win over them; the control plane
/// reads them, the snapshot never holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSettings {
    pub level: LogLevel,
    pub format: LogFormat,
}

impl Checker<'_> {
    pub(super) fn log_settings(&mut self, global: &RawGlobal) -> LogSettings {
        LogSettings {
            level: self.named(&global.log_level, "log_level", &LogLevel::NAMES, LogLevel::from_name),
            format: self.named(
                &global.log_format,
                "log_format",
                &LogFormat::NAMES,
                LogFormat::from_name,
            ),
        }
    }

    /// One of a few names, or an error at the value (and the default).
    fn named<T: Default>(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
        names: &[&str],
        parse: fn(&str) -> Option<T>,
    ) -> T {
        let Some(v) = value else { return T::default() };
        parse(v.get_ref()).unwrap_or_else(|| {
            self.error(
                v.span(),
                format!(
                    "unknown {key} `{}` {}",
                    v.get_ref(),
                    super::suggest::hint(v.get_ref(), names.iter().copied())
                ),
            );
            T::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in LogLevel::NAMES {
            assert_eq!(LogLevel::from_name(name).map(LogLevel::name), Some(name));
        }
        for name in LogFormat::NAMES {
            assert_eq!(LogFormat::from_name(name).map(LogFormat::name), Some(name));
        }
        assert!(LogLevel::Debug > LogLevel::Info);
        assert_eq!(LogLevel::from_name("INFO"), None);
    }
}
