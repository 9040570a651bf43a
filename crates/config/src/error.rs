//! Errors that point at a place in a file.

use std::fmt;
use std::ops::Range;

/// One problem in a config or hosts file, displayed as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl ConfigError {
    /// An error about something with no place in a file (a command-line flag and its value):
    /// displayed as `WHAT: message`.
    pub fn without_place(what: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: what.into(),
            line: 0,
            col: 0,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}", self.file, self.message);
        }
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.message)
    }
}

/// All the problems found in one file (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Turns byte offsets in one source text into `file:line:col` errors.
pub struct SourceMap<'a> {
    file: &'a str,
    src: &'a str,
}

impl<'a> SourceMap<'a> {
    pub fn new(file: &'a str, src: &'a str) -> Self {
        SourceMap { file, src }
    }

    /// An error at the start of `span` (1-based line and column, columns in characters).
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let at = span.start.min(self.src.len());
        let before = &self.src[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        ConfigError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let src = "a = 1\nbé = 2\n";
        let map = SourceMap::new("f.toml", src);
        assert_eq!(map.error(0..1, "x").to_string(), "f.toml:1:1: x");
        let at = src.find('=').unwrap();
        assert_eq!(map.error(at..at, "x").to_string(), "f.toml:1:3: x");
        let at = src.rfind('=').unwrap();
        assert_eq!(map.error(at..at, "x").to_string(), "f.toml:2:4: x");
    }
}
