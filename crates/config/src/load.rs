//! A config file with everything it pulls in: `include = [...]` files and `${VAR}` references.
//!
//! Each file is read, its environment variables substituted ([`crate::env`]) and parsed on its
//! own, but every file gets its own range of byte offsets in one [`SourceMap`] (the text is
//! parsed behind as many spaces as the files before it took), so the spans in the parsed
//! structs say which file they are in, and the compiler, which knows one map, reports every
//! error at the `file:line:col` of the file it is in. The files are then merged into one
//! [`RawConfig`] and compiled as one.
//!
//! - `include` entries are paths relative to the including file's directory; a `*` or `?` in
//!   the file-name part makes a pattern, expanded in name order (hidden files only when the
//!   pattern starts with `.`; a pattern that matches nothing adds nothing). Included files may
//!   include more, up to [`MAX_DEPTH`] deep; a cycle or a file included twice is an error.
//! - Merging: listeners, upstreams and caches of every file go into one table (a name defined twice is
//!   an error naming both places); `[global]` and `[admin]` may each be in one file only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::compile::{compile_raw, Compiled, LiveState};
use crate::env;
use crate::error::{toml_error, ConfigError, ConfigErrors, SourceMap};
use crate::raw::RawConfig;

/// How deep includes may nest (the main file is depth 0).
pub const MAX_DEPTH: usize = 8;

/// A compiled config file and what it was made of.
#[derive(Debug)]
pub struct LoadedConfig {
    pub compiled: Compiled,
    /// Every file of the config, the main one first, in the order read.
    pub sources: Vec<ConfigSource>,
    /// What to watch for changes that a reload would pick up.
    pub watch: WatchList,
}

/// One file of a config, as written (before `${VAR}` substitution).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The path as errors name it: the main file's as given, an included one's joined to the
    /// directory of the file that includes it.
    pub name: String,
    pub text: String,
}

/// The files a config depends on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchList {
    /// The config's own files and the files it reads (certificates, keys, credential files).
    pub files: Vec<PathBuf>,
    /// Include patterns, `(directory, file-name pattern)`: a new file there changes the config.
    pub patterns: Vec<(PathBuf, String)>,
}

impl LoadedConfig {
    /// The config's text as one: the file's text, or with includes each file's text after a
    /// `# file: NAME` line, in the order read.
    pub fn text(&self) -> String {
        match self.sources.as_slice() {
            [only] => only.text.clone(),
            all => all
                .iter()
                .map(|s| {
                    let newline = if s.text.ends_with('\n') || s.text.is_empty() {
                        ""
                    } else {
                        "\n"
                    };
                    format!("# file: {}\n{}{newline}", s.name, s.text)
                })
                .collect(),
        }
    }
}

/// Compiles the config file `file` whose text is `text`, with its includes, taking `${VAR}`
/// values from `lookup` (the process environment: [`compile_config_env`]).
pub fn compile_config(
    file: &str,
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    live: &mut LiveState,
) -> Result<LoadedConfig, ConfigErrors> {
    let mut loader = Loader {
        lookup,
        map: SourceMap::default(),
        raws: Vec::new(),
        sources: Vec::new(),
        loaded: HashMap::new(),
        watch: WatchList::default(),
        errors: Vec::new(),
    };
    let canonical = std::fs::canonicalize(file).unwrap_or_else(|_| PathBuf::from(file));
    loader.watch.files.push(PathBuf::from(file));
    loader.add_file(file, text.to_string(), canonical, &mut Vec::new());
    if !loader.errors.is_empty() {
        return Err(ConfigErrors(loader.errors));
    }
    let raw = merge(loader.raws, &loader.map)?;
    let compiled = compile_raw(&loader.map, raw, live)?;
    let mut watch = loader.watch;
    watch.files.extend(compiled.files.iter().cloned());
    Ok(LoadedConfig {
        compiled,
        sources: loader.sources,
        watch,
    })
}

/// [`compile_config`] with the process environment.
pub fn compile_config_env(file: &str, text: &str, live: &mut LiveState) -> Result<LoadedConfig, ConfigErrors> {
    compile_config(file, text, &|name| std::env::var(name).ok(), live)
}

struct Loader<'e> {
    lookup: &'e dyn Fn(&str) -> Option<String>,
    map: SourceMap,
    /// Each file parsed, in the order read.
    raws: Vec<RawConfig>,
    sources: Vec<ConfigSource>,
    /// Every file read (by canonical path) and where it was first read.
    loaded: HashMap<PathBuf, String>,
    watch: WatchList,
    errors: Vec<ConfigError>,
}

impl Loader<'_> {
    /// Substitutes, parses and records one file, then reads what it includes. `stack` holds
    /// the files that include this one (to refuse cycles).
    fn add_file(&mut self, name: &str, text: String, canonical: PathBuf, stack: &mut Vec<PathBuf>) {
        self.loaded.insert(canonical.clone(), name.to_string());
        self.sources.push(ConfigSource {
            name: name.to_string(),
            text: text.clone(),
        });
        let substituted = match env::substitute(&text, self.lookup) {
            Ok(s) => s,
            Err(errors) => {
                let map = SourceMap::new(name, &text);
                self.errors
                    .extend(errors.into_iter().map(|e| map.error(e.at, e.message)));
                return;
            }
        };
        // Behind as many spaces as the files before took, the file's spans are its own range.
        let base = self.map.next_base();
        let mut padded = " ".repeat(base);
        // A byte-order mark may only start a text: here it becomes as many spaces.
        match substituted.text.strip_prefix('\u{feff}') {
            Some(rest) => {
                padded.push_str("   ");
                padded.push_str(rest);
            }
            None => padded.push_str(&substituted.text),
        }
        self.map.push(name, text, substituted.text.len(), substituted.offsets);
        let mut raw: RawConfig = match toml::from_str(&padded) {
            Ok(raw) => raw,
            Err(e) => {
                self.errors.push(toml_error(&self.map, &e));
                return;
            }
        };
        let includes = std::mem::take(&mut raw.include);
        self.raws.push(raw);
        let dir = Path::new(name).parent().unwrap_or(Path::new("")).to_path_buf();
        stack.push(canonical);
        for entry in includes {
            for path in self.expand(&dir, &entry) {
                self.include(&path, &entry, stack);
            }
        }
        stack.pop();
    }

    /// Reads the file `path` that `entry` includes.
    fn include(&mut self, path: &Path, entry: &toml::Spanned<String>, stack: &mut Vec<PathBuf>) {
        let name = path.display().to_string();
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(e) => return self.error(entry, format!("include {name}: {e}")),
        };
        if let Some(at) = stack.iter().position(|p| *p == canonical) {
            let cycle: Vec<String> = stack[at..]
                .iter()
                .map(|p| self.loaded.get(p).cloned().unwrap_or_default())
                .chain([name])
                .collect();
            return self.error(entry, format!("include cycle: {}", cycle.join(" -> ")));
        }
        if let Some(first) = self.loaded.get(&canonical) {
            return self.error(entry, format!("include {name}: already included (as {first})"));
        }
        if stack.len() > MAX_DEPTH {
            return self.error(
                entry,
                format!("include {name}: includes nest more than {MAX_DEPTH} deep"),
            );
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return self.error(entry, format!("include {name}: cannot read: {e}")),
        };
        self.watch.files.push(path.to_path_buf());
        self.add_file(&name, text, canonical, stack);
    }

    /// The files an `include` entry names: itself, or what its pattern matches, in name order.
    fn expand(&mut self, dir: &Path, entry: &toml::Spanned<String>) -> Vec<PathBuf> {
        let path = dir.join(entry.get_ref());
        let pattern = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_pattern(&pattern) {
            return vec![path];
        }
        let parent = path.parent().unwrap_or(Path::new("")).to_path_buf();
        if parent.to_string_lossy().contains(['*', '?']) {
            self.error(
                entry,
                "`*` and `?` may only be in the file name of an include, not in its directories",
            );
            return Vec::new();
        }
        let read_from = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &parent
        };
        let entries = match std::fs::read_dir(read_from) {
            Ok(entries) => entries,
            Err(e) => {
                self.error(
                    entry,
                    format!("include {}: cannot read directory: {e}", parent.display()),
                );
                return Vec::new();
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| glob_match(&pattern, n))
            .collect();
        names.sort();
        self.watch.patterns.push((parent.clone(), pattern));
        names.into_iter().map(|n| parent.join(n)).collect()
    }

    fn error(&mut self, at: &toml::Spanned<String>, message: impl Into<String>) {
        self.errors.push(self.map.error(at.span(), message));
    }
}

fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// Whether file name `name` matches `pattern`: `*` any run of characters, `?` any one; a name
/// starting with `.` only matches a pattern that does too.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with one backtrack point (the last `*`).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// One config out of the files' parts: listeners, upstreams and caches together, `[global]` and
/// `[admin]` from the one file that has each.
fn merge(raws: Vec<RawConfig>, map: &SourceMap) -> Result<RawConfig, ConfigErrors> {
    let mut raws = raws.into_iter();
    let mut merged = raws.next().expect("the main file was parsed");
    let mut errors = Vec::new();
    for raw in raws {
        for (name, listener) in raw.listeners {
            match merged.listeners.get_key_value(&name) {
                Some((first, _)) => errors.push(map.error(
                    name.span(),
                    format!(
                        "listener `{}` is already defined at {}",
                        name.get_ref(),
                        map.place(first.span().start)
                    ),
                )),
                None => {
                    merged.listeners.insert(name, listener);
                }
            }
        }
        for (name, upstream) in raw.upstreams {
            match merged.upstreams.get_key_value(&name) {
                Some((first, _)) => errors.push(map.error(
                    name.span(),
                    format!(
                        "upstream `{}` is already defined at {}",
                        name.get_ref(),
                        map.place(first.span().start)
                    ),
                )),
                None => {
                    merged.upstreams.insert(name, upstream);
                }
            }
        }
        for (name, cache) in raw.caches {
            match merged.caches.get_key_value(&name) {
                Some((first, _)) => errors.push(map.error(
                    name.span(),
                    format!(
                        "cache `{}` is already defined at {}",
                        name.get_ref(),
                        map.place(first.span().start)
                    ),
                )),
                None => {
                    merged.caches.insert(name, cache);
                }
            }
        }
        one_only("[global]", &mut merged.global, raw.global, map, &mut errors);
        one_only("[admin]", &mut merged.admin, raw.admin, map, &mut errors);
        one_only("[tracing]", &mut merged.tracing, raw.tracing, map, &mut errors);
    }
    if errors.is_empty() {
        Ok(merged)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Takes a table that may be in one file only.
fn one_only<T>(
    what: &str,
    into: &mut Option<toml::Spanned<T>>,
    from: Option<toml::Spanned<T>>,
    map: &SourceMap,
    errors: &mut Vec<ConfigError>,
) {
    let Some(from) = from else { return };
    match into {
        Some(first) => errors.push(map.error(
            from.span(),
            format!(
                "{what} is already set at {}: it may be in one file of a config only",
                map.place(first.span().start)
            ),
        )),
        None => *into = Some(from),
    }
}

#[cfg(test)]
mod tests;
