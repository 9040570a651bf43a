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
        // Relative to the config file's directory, as every path a config names.
        let root = self.relative_path(&s.root);
        let mut ok = true;
        match std::fs::metadata(&root) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                self.error(
                    s.root.span(),
                    format!("static root `{}` is not a directory", root.display()),
                );
                ok = false;
            }
            Err(e) => {
                self.error(s.root.span(), format!("static root `{}`: {e}", root.display()));
                ok = false;
            }
        }
        // Absolute, but with its symbolic links kept: they are followed on every request.
        let root = std::path::absolute(&root).unwrap_or(root);
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

#[cfg(test)]
mod tests {
    use rampart_model::route::RouteAction;
    use rampart_model::ListenerProtocol;

    use crate::compile::{compile_toml, LiveState};

    fn config(root: &str, extra: &str) -> String {
        format!(
            "[listeners.web]\nbind = \"127.0.0.1:1\"\nprotocol = \"http\"\n\n\
             [[listeners.web.routes]]\nstatic = {{ root = \"{root}\"{extra} }}\n"
        )
    }

    fn errors(src: &str) -> Vec<String> {
        match compile_toml("test.toml", src, &mut LiveState::default()) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_static_route_compiles_with_its_defaults() {
        let dir = std::env::temp_dir();
        let root = dir.to_str().unwrap();
        let compiled = compile_toml("test.toml", &config(root, ""), &mut LiveState::default()).unwrap();
        let ListenerProtocol::Http(http) = &compiled.snapshot.listeners[0].protocol else {
            panic!("an HTTP listener");
        };
        let RouteAction::Static(files) = &http.routes[0].action else {
            panic!("a static route");
        };
        assert_eq!(files.root, dir);
        assert_eq!(files.index, ["index.html"]);
        assert_eq!(files.fallback, None);
        assert!(!files.precompressed && !files.list);
        let src = config(
            root,
            ", index = [\"index.htm\", \"default.html\"], fallback = \"/app/index.html\", precompressed = true, list = true",
        );
        let compiled = compile_toml("test.toml", &src, &mut LiveState::default()).unwrap();
        let ListenerProtocol::Http(http) = &compiled.snapshot.listeners[0].protocol else {
            panic!("an HTTP listener");
        };
        let RouteAction::Static(files) = &http.routes[0].action else {
            panic!("a static route");
        };
        assert_eq!(files.index, ["index.htm", "default.html"]);
        assert_eq!(files.fallback.as_deref(), Some("/app/index.html"));
        assert!(files.precompressed && files.list);
    }

    #[test]
    fn bad_static_settings_point_at_their_values() {
        let dir = std::env::temp_dir().join(format!("rampart-static-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file.txt");
        std::fs::write(&file, b"x").unwrap();
        let (root, file) = (dir.to_str().unwrap(), file.to_str().unwrap());
        let missing = format!("{root}/missing");
        let cases = [
            (
                config(&missing, ""),
                format!("test.toml:6:19: static root `{missing}`: No such file"),
            ),
            (
                config(file, ""),
                format!("test.toml:6:19: static root `{file}` is not a directory"),
            ),
            (
                config(root, ", fallback = \"index.html\""),
                "fallback `index.html` must start with /".to_string(),
            ),
            (
                config(root, ", fallback = \"/../x\""),
                "fallback `/../x` must be a plain path under the root".to_string(),
            ),
            (
                config(root, ", index = [\"a/b.html\"]"),
                "index `a/b.html` must be a file name".to_string(),
            ),
            (
                config(root, ", lst = true"),
                "unknown key `lst` (did you mean `list`?)".to_string(),
            ),
            (
                config(root, "").replace("static =", "upstream = \"x\"\nstatic ="),
                "needs exactly one of `upstream`, `split`, `respond`, `redirect` or `static`".to_string(),
            ),
        ];
        for (src, want) in cases {
            let got = errors(&src);
            assert!(got.iter().any(|e| e.contains(&want)), "{want:?} not in {got:?}\n{src}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_static_action_on_a_tcp_route_is_refused() {
        let src = format!(
            "[listeners.t]\nbind = \"127.0.0.1:1\"\nprotocol = \"tcp\"\n\n\
             [[listeners.t.routes]]\nupstream = \"b\"\nstatic = {{ root = \"{}\" }}\n\n\
             [upstreams.b]\ntargets = [\"127.0.0.1:2\"]\n",
            std::env::temp_dir().display()
        );
        let got = errors(&src);
        assert!(
            got.iter()
                .any(|e| e.contains("`static` is for routes of HTTP listeners")),
            "{got:?}"
        );
    }
}
