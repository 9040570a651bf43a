//! Environment variables in config text: `${NAME}` and `${NAME:-default}` are replaced before the
//! TOML is parsed, everywhere except in comments; `$${` stands for a literal `${`.
//!
//! A substitution never changes the structure of the file:
//!
//! - inside a `"..."` or `"""..."""` string the value is escaped (`"`, `\` and control characters),
//!   so a value holding a quote or a newline stays one string value;
//! - inside a `'...'` or `'''...'''` string, which has no escapes, a value holding `'` (or a
//!   control character other than a tab, or a newline in a one-line string) is an error;
//! - outside strings (`port = ${PORT}`) the value must be a bare word: a number, `true`/`false`
//!   or a date (letters, digits and `_ . : + -`), or it is an error.
//!
//! `${NAME:-default}` takes the default when NAME is unset or empty, as the shell does. The
//! substituted text comes with an [`OffsetMap`] so that errors found in it still point at the
//! right place in the text as written.

use std::ops::Range;

/// The text with every reference replaced, and the way back to the original offsets.
#[derive(Debug, Clone)]
pub struct Substituted {
    pub text: String,
    pub offsets: OffsetMap,
}

/// Maps a byte offset in substituted text to the offset in the text as written: text copied
/// as it was maps one to one, and any offset inside a substituted value maps to the `$` of its
/// reference.
#[derive(Debug, Clone)]
pub struct OffsetMap {
    /// Sorted by `at`: from `at` in the substituted text on, offsets map to `from` (plus the
    /// distance from `at` when `copied`).
    shifts: Vec<Shift>,
}

#[derive(Debug, Clone, Copy)]
struct Shift {
    at: usize,
    from: usize,
    copied: bool,
}

impl OffsetMap {
    /// The map of a text that was not changed.
    pub fn identity() -> OffsetMap {
        OffsetMap {
            shifts: vec![Shift {
                at: 0,
                from: 0,
                copied: true,
            }],
        }
    }

    /// The offset in the original text of offset `at` in the substituted text.
    pub fn original(&self, at: usize) -> usize {
        let i = self.shifts.partition_point(|s| s.at <= at).saturating_sub(1);
        match self.shifts.get(i) {
            Some(s) if s.copied => s.from + (at - s.at),
            Some(s) => s.from,
            None => at,
        }
    }
}

/// A reference that cannot be substituted: where it is in the original text, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    pub at: Range<usize>,
    pub message: String,
}

/// Where in the TOML text the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Bare,
    Comment,
    Basic,
    MultiBasic,
    Literal,
    MultiLiteral,
}

/// Replaces every `${NAME}` and `${NAME:-default}` outside comments with `lookup(NAME)`.
pub fn substitute(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Substituted, Vec<EnvError>> {
    let mut out = Substitution {
        text,
        out: String::with_capacity(text.len()),
        copied_to: 0,
        shifts: vec![Shift {
            at: 0,
            from: 0,
            copied: true,
        }],
        errors: Vec::new(),
    };
    let b = text.as_bytes();
    let starts = |i: usize, s: &str| b[i..].starts_with(s.as_bytes());
    let mut context = Context::Bare;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && context != Context::Comment {
            i = out.dollar(i, context, lookup);
            continue;
        }
        match (context, b[i]) {
            (Context::Bare, b'#') => context = Context::Comment,
            (Context::Bare, b'"') if starts(i, "\"\"\"") => {
                context = Context::MultiBasic;
                i += 2;
            }
            (Context::Bare, b'"') => context = Context::Basic,
            (Context::Bare, b'\'') if starts(i, "'''") => {
                context = Context::MultiLiteral;
                i += 2;
            }
            (Context::Bare, b'\'') => context = Context::Literal,
            (Context::Basic | Context::MultiBasic, b'\\') => i += 1,
            (Context::Basic, b'"') | (Context::Literal, b'\'') => context = Context::Bare,
            (Context::Comment | Context::Basic | Context::Literal, b'\n') => context = Context::Bare,
            (Context::MultiBasic, b'"') if starts(i, "\"\"\"") => {
                context = Context::Bare;
                i = closing_quotes(b, i, b'"');
                continue;
            }
            (Context::MultiLiteral, b'\'') if starts(i, "'''") => {
                context = Context::Bare;
                i = closing_quotes(b, i, b'\'');
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.finish()
}

/// Past the `"""` (or `'''`) at `i` and up to two more quotes, which belong to the string.
fn closing_quotes(b: &[u8], i: usize, quote: u8) -> usize {
    let mut end = i + 3;
    while end < b.len() && end < i + 5 && b[end] == quote {
        end += 1;
    }
    end
}

/// The substituted text being built.
struct Substitution<'t> {
    text: &'t str,
    out: String,
    /// The original text up to here is in `out`.
    copied_to: usize,
    shifts: Vec<Shift>,
    errors: Vec<EnvError>,
}

impl Substitution<'_> {
    /// Handles the `$` at `i` and returns where scanning goes on.
    fn dollar(&mut self, i: usize, context: Context, lookup: &dyn Fn(&str) -> Option<String>) -> usize {
        let rest = &self.text[i..];
        if rest.starts_with("$${") {
            // Drop the first `$`; the `${` after it is text.
            self.copy_to(i);
            self.copied_to = i + 1;
            self.shifts.push(Shift {
                at: self.out.len(),
                from: i + 1,
                copied: true,
            });
            return i + 3;
        }
        if !rest.starts_with("${") {
            return i + 1;
        }
        let Some(close) = rest.find(['}', '\n']).filter(|&c| rest.as_bytes()[c] == b'}') else {
            self.error(
                i..i + 2,
                "`${` starts an environment variable: write ${NAME} or ${NAME:-default} (or $${ for a literal ${)",
            );
            return i + 2;
        };
        let inner = &rest[2..close];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let end = i + close + 1;
        if !is_variable_name(name) {
            self.error(
                i..end,
                format!("`${{{inner}}}` is not an environment variable reference: write ${{NAME}} or ${{NAME:-default}} (NAME of letters, digits and _, not starting with a digit), or $${{ for a literal ${{ (as in a regex replacement's $${{1}})"),
            );
            return end;
        }
        let value = match (lookup(name).filter(|v| !v.is_empty() || default.is_none()), default) {
            (Some(v), _) => v,
            (None, Some(d)) => d.to_string(),
            (None, None) => {
                self.error(
                    i..end,
                    format!("environment variable {name} is not set (write ${{{name}:-default}} for a default)"),
                );
                return end;
            }
        };
        match placed(&value, context) {
            Ok(text) => {
                self.copy_to(i);
                self.shifts.push(Shift {
                    at: self.out.len(),
                    from: i,
                    copied: false,
                });
                self.out.push_str(&text);
                self.shifts.push(Shift {
                    at: self.out.len(),
                    from: end,
                    copied: true,
                });
                self.copied_to = end;
            }
            Err(why) => self.error(i..end, format!("environment variable {name}: {why}")),
        }
        end
    }

    fn copy_to(&mut self, i: usize) {
        self.out.push_str(&self.text[self.copied_to..i]);
        self.copied_to = i;
    }

    fn error(&mut self, at: Range<usize>, message: impl Into<String>) {
        self.errors.push(EnvError {
            at,
            message: message.into(),
        });
    }

    fn finish(mut self) -> Result<Substituted, Vec<EnvError>> {
        if !self.errors.is_empty() {
            return Err(self.errors);
        }
        self.copy_to(self.text.len());
        Ok(Substituted {
            text: self.out,
            offsets: OffsetMap { shifts: self.shifts },
        })
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `value` as it goes into the text at a place of `context`, or why it cannot.
fn placed(value: &str, context: Context) -> Result<String, String> {
    match context {
        Context::Basic | Context::MultiBasic => Ok(escape_basic(value)),
        Context::Literal | Context::MultiLiteral => {
            let multiline = context == Context::MultiLiteral;
            let bad = value
                .chars()
                .any(|c| c == '\'' || (c.is_control() && c != '\t' && !(multiline && c == '\n')));
            if bad {
                Err(format!(
                    "its value holds a ' or a control character, which a '...' string cannot hold: use a \"...\" string (value {value:?})"
                ))
            } else {
                Ok(value.to_string())
            }
        }
        Context::Bare | Context::Comment => {
            let bare = !value.is_empty()
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '+' | '-'));
            if bare {
                Ok(value.to_string())
            } else {
                Err(format!(
                    "{value:?} cannot stand outside a string (only numbers, true/false and dates can): put the reference in quotes, \"${{...}}\""
                ))
            }
        }
    }
}

/// `value` escaped for a TOML basic string, without the quotes.
fn escape_basic(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push('\t'),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
