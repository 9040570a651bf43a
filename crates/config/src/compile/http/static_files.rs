//! Compiling the `static` route action: the root must be a directory that exists now, index
//! names are plain file names, the fallback is a path under the root.

use rampart_model::route::StaticFiles;

use super::Checker;
use crate::raw::RawStatic;

/// The index names when the action sets none.
const DEFAULT_INDEX: &str = "index.html";

impl Checker<'_> {
    /// The `static` action, or `None` after reporting what is wrong (each error at its value).
    pub(super) fn static_files(&mut self, s: &RawStatic) -> Option<StaticFiles> {
        let root = s.root.get_ref();
        let mut ok = true;
        match std::fs::metadata(root) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                self.error(s.root.span(), format!("static root `{root}` is not a directory"));
                ok = false;
            }
            Err(e) => {
                self.error(s.root.span(), format!("static root `{root}`: {e}"));
                ok = false;
            }
        }
        // Absolute, but with its symbolic links kept: they are followed on every request.
        let root = std::path::absolute(root).unwrap_or_else(|_| root.into());
        let mut index = Vec::new();
        match &s.index {
            None => index.push(DEFAULT_INDEX.to_string()),
            Some(names) => {
                for name in names {
                    let n = name.get_ref();
                    if n.is_empty() || n == "." || n == ".." || n.contains(['/', '\\', '\0']) {
                        self.error(
                            name.span(),
                            format!("index `{n}` must be a file name (no `/`, not `.` or `..`)"),
                        );
                        ok = false;
                    } else {
                        index.push(n.clone());
                    }
                }
            }
        }
        let fallback = match &s.fallback {
            None => None,
            Some(f) => {
                let path = f.get_ref();
                if !path.starts_with('/') {
                    self.error(f.span(), format!("fallback `{path}` must start with /"));
                    ok = false;
                } else if path.split('/').any(|seg| seg == "..") || path.contains(['\\', '\0', '?', '%']) {
                    self.error(
                        f.span(),
                        format!("fallback `{path}` must be a plain path under the root (no `..`, `\\`, `?` or `%`)"),
                    );
                    ok = false;
                }
                Some(path.clone())
            }
        };
        ok.then_some(StaticFiles {
            root,
            index,
            fallback,
            precompressed: s.precompressed,
            list: s.list,
        })
    }
}
