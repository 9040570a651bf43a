//! Errors that point at a place in a file (or in one of the files of a config), and TOML's
//! messages said in the config's own terms.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::env::OffsetMap;

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

/// Turns byte offsets into `file:line:col` errors. A config made of several files (includes)
/// parses each file with its own range of offsets, one after the other, so that every span the
/// parser hands out says which file it is in; a file whose `${VAR}` references were substituted
/// maps its offsets back to the text as written.
#[derive(Debug, Default)]
pub struct SourceMap {
    files: Vec<MappedFile>,
}

/// One file's place in the offsets.
#[derive(Debug)]
struct MappedFile {
    name: String,
    /// The text as written.
    text: String,
    /// The directory that paths written in the file are relative to.
    dir: PathBuf,
    /// Where the file's (substituted) text starts.
    base: usize,
    /// The length of the substituted text.
    len: usize,
    offsets: OffsetMap,
}

/// The directory the paths a config file names are relative to: the file's own; for a config
/// from etcd (`etcd:KEY`), which has none, the working directory.
fn file_dir(file: &str) -> std::path::PathBuf {
    if file.starts_with("etcd:") {
        return std::path::PathBuf::new();
    }
    Path::new(file).parent().map(Path::to_path_buf).unwrap_or_default()
}

impl SourceMap {
    /// The map of one text, at offset 0, as written.
    pub fn new(file: &str, src: &str) -> Self {
        let mut map = SourceMap::default();
        map.push(file, src.to_string(), src.len(), OffsetMap::identity());
        map
    }

    /// Adds a file whose parsed text is `len` bytes long (after substitution, `offsets` leading
    /// back to `text`), and returns the offset its parsed text starts at.
    pub fn push(&mut self, file: &str, text: String, len: usize, offsets: OffsetMap) -> usize {
        let base = self.next_base();
        self.files.push(MappedFile {
            name: file.to_string(),
            text,
            dir: file_dir(file),
            base,
            len,
            offsets,
        });
        base
    }

    /// Where the next file's text would start: one past the end of the last (so that the end of
    /// a file is still in it).
    pub fn next_base(&self) -> usize {
        self.files.last().map_or(0, |f| f.base + f.len + 1)
    }

    fn file_at(&self, at: usize) -> Option<&MappedFile> {
        let i = self.files.partition_point(|f| f.base <= at).checked_sub(1)?;
        self.files.get(i)
    }

    /// The directory of the file that offset `at` is in: paths written there start from it.
    pub fn dir_at(&self, at: usize) -> &Path {
        self.file_at(at).map_or(Path::new(""), |f| f.dir.as_path())
    }

    /// The position of a file in the map (for sorting errors: files in load order).
    pub fn file_index(&self, name: &str) -> usize {
        self.files.iter().position(|f| f.name == name).unwrap_or(usize::MAX)
    }

    /// An error at the start of `span` (1-based line and column, columns in characters).
    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let Some(file) = self.file_at(span.start) else {
            return ConfigError {
                file: String::new(),
                line: 1,
                col: 1,
                message: message.into(),
            };
        };
        let local = (span.start - file.base).min(file.len);
        let at = file.offsets.original(local).min(file.text.len());
        let at = (0..=at).rev().find(|&i| file.text.is_char_boundary(i)).unwrap_or(0);
        let before = &file.text[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        ConfigError {
            file: file.name.clone(),
            line,
            col,
            message: message.into(),
        }
    }

    /// `file:line:col` of offset `at`, to name another place in a message.
    pub fn place(&self, at: usize) -> String {
        let e = self.error(at..at, "");
        format!("{}:{}:{}", e.file, e.line, e.col)
    }
}

/// A TOML syntax or type error, at its place in `map`.
pub(crate) fn toml_error(map: &SourceMap, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    map.error(span, friendly_toml_message(e.message()))
}

/// Says serde's messages in the config's own terms: `invalid type: string "2", expected i64`
/// becomes `expected a whole number, not the string "2"`.
fn friendly_toml_message(message: &str) -> String {
    // A syntax error can come on two lines ("invalid table header\nexpected `.`, `]`"): one
    // error is one line, so that every line of a list of errors starts with its place.
    let one_line: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let one_line = one_line.join(": ");
    let message = one_line.as_str();
    if let Some(friendly) = crate::compile::suggest::unknown_name_message(message) {
        return friendly;
    }
    if message.contains("untagged enum RawErrorPage") {
        return "an error page is a file (\"errors/502.html\") or a table: { body = \"...\" }, { file = \"...\", content_type = \"...\" }, or { html = \"...\", json = \"...\", text = \"...\" }".to_string();
    }
    if message.contains("untagged enum RawTarget") {
        return "a target is \"host:port\" or { address = \"host:port\", weight = N, backup = true }".to_string();
    }
    let Some((found, expected)) = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.rsplit_once(", expected "))
    else {
        return message.to_string();
    };
    let expected = match expected {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "isize" | "usize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a borrowed string" | "a character" => "a string",
        "a sequence" => "a list",
        "a map" => "a table",
        s if s.starts_with("struct ") => "a table",
        other => other,
    };
    let quoted = |prefix: &str| found.strip_prefix(prefix).map(|v| v.trim_matches('`'));
    let found = if found.starts_with("string ") {
        format!("the {found}")
    } else if let Some(n) = quoted("integer ").or_else(|| quoted("floating point ")) {
        format!("the number {n}")
    } else if let Some(b) = quoted("boolean ") {
        b.to_string()
    } else {
        match found {
            "sequence" => "a list".to_string(),
            "map" => "a table".to_string(),
            other => other.to_string(),
        }
    };
    format!("expected {expected}, not {found}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_syntax_error_is_one_line_with_its_place() {
        let map = super::SourceMap::new("r.toml", "[global\nworkers = 2\n");
        let e = toml::from_str::<toml::Table>("[global\nworkers = 2\n").unwrap_err();
        let text = super::toml_error(&map, &e).to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("r.toml:1:"), "{text}");
    }

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

    #[test]
    fn each_file_of_a_map_has_its_own_offsets_and_directory() {
        let mut map = SourceMap::default();
        let first = "a = 1\n";
        assert_eq!(
            map.push("main.toml", first.to_string(), first.len(), OffsetMap::identity()),
            0
        );
        let second = "b = 2\nc = 3\n";
        let base = map.push("conf.d/b.toml", second.to_string(), second.len(), OffsetMap::identity());
        assert_eq!(base, first.len() + 1);
        // The end of the first file is still in it.
        assert_eq!(map.place(first.len()), "main.toml:2:1");
        let c = base + second.find('c').unwrap();
        assert_eq!(map.error(c..c, "x").to_string(), "conf.d/b.toml:2:1: x");
        assert_eq!(map.dir_at(c), Path::new("conf.d"));
        assert_eq!(map.dir_at(0), Path::new(""));
        assert_eq!(map.file_index("conf.d/b.toml"), 1);
    }
}
