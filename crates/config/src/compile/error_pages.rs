//! `error_pages` of listeners and routes: keys are statuses (`404`) or classes (`5xx`), values a
//! file, an inline body, or variants by media type. Files are read at every load (so a reload
//! picks up an edited page), at most [`MAX_PAGE`] each.

use std::sync::Arc;

use rampart_model::error_pages::{ErrorPage, ErrorPages, PageMedia, PageVariant, StatusMatch};
use toml::Spanned;

use super::Checker;
use crate::raw::{RawErrorPage, RawErrorPageTable, RawErrorPages};

/// The largest error page file.
const MAX_PAGE: u64 = 1 << 20;

impl Checker<'_> {
    /// The pages of one `error_pages` table (`None` when it is empty or wrong).
    pub(super) fn error_pages(&mut self, raw: &RawErrorPages) -> Option<ErrorPages> {
        let mut pages = Vec::new();
        for (key, page) in raw {
            let Some(status) = self.status_match(key) else { continue };
            if let Some(variants) = self.page_variants(page) {
                pages.push(ErrorPage { status, variants });
            }
        }
        (!pages.is_empty()).then_some(ErrorPages { pages })
    }

    fn status_match(&mut self, key: &Spanned<String>) -> Option<StatusMatch> {
        let k = key.get_ref().as_str();
        let matched = match k.as_bytes() {
            [c @ (b'4' | b'5'), b'x' | b'X', b'x' | b'X'] => Some(StatusMatch::Class(c - b'0')),
            _ => k
                .parse::<u16>()
                .ok()
                .filter(|s| (400..=599).contains(s))
                .map(StatusMatch::Exact),
        };
        if matched.is_none() {
            self.error(
                key.span(),
                format!("error_pages: `{k}` is not a status from 400 to 599 or a class (\"4xx\", \"5xx\")"),
            );
        }
        matched
    }

    fn page_variants(&mut self, page: &Spanned<RawErrorPage>) -> Option<Vec<PageVariant>> {
        let at = page.span();
        match page.get_ref() {
            RawErrorPage::File(file) => self.page_file(at, file, None).map(|v| vec![v]),
            RawErrorPage::Table(t) => self.page_table(at, t),
        }
    }

    fn page_table(&mut self, at: std::ops::Range<usize>, t: &RawErrorPageTable) -> Option<Vec<PageVariant>> {
        let by_media = [
            (PageMedia::Html, &t.html),
            (PageMedia::Json, &t.json),
            (PageMedia::Text, &t.text),
        ];
        let forms = [
            t.body.is_some(),
            t.file.is_some(),
            by_media.iter().any(|(_, f)| f.is_some()),
        ];
        if forms.iter().filter(|f| **f).count() != 1 {
            self.error(
                at,
                "an error page is one of: a file (\"errors/502.html\"), { body = \"...\", content_type = \"...\" }, \
                 { file = \"...\", content_type = \"...\" }, or variants { html = \"...\", json = \"...\", text = \"...\" }",
            );
            return None;
        }
        if let Some(body) = &t.body {
            let content_type = t
                .content_type
                .clone()
                .unwrap_or_else(|| "text/plain; charset=utf-8".into());
            if !self.check_header_value(at.clone(), "content-type", &content_type, "error page") {
                return None;
            }
            return Some(vec![PageVariant {
                media: media_of_type(&content_type),
                content_type,
                body: Arc::from(body.as_bytes()),
            }]);
        }
        if let Some(file) = &t.file {
            return self.page_file(at, file, t.content_type.as_deref()).map(|v| vec![v]);
        }
        if t.content_type.is_some() {
            self.error(
                at,
                "error page variants take their content type from their media (leave out `content_type`)",
            );
            return None;
        }
        let mut variants = Vec::new();
        for (media, file) in by_media {
            let Some(file) = file else { continue };
            let mut v = self.page_file(at.clone(), file, Some(&with_charset(media.essence())))?;
            v.media = Some(media);
            variants.push(v);
        }
        Some(variants)
    }

    /// One page read from `file` (relative to the config file), its content type given or
    /// taken from the file's extension.
    fn page_file(&mut self, at: std::ops::Range<usize>, file: &str, content_type: Option<&str>) -> Option<PageVariant> {
        let content_type = match content_type {
            Some(t) => t.to_string(),
            None => match type_of_extension(file) {
                Some(t) => t.to_string(),
                None => {
                    self.error(
                        at,
                        format!("error page {file}: no known content type for its extension (.html, .json, .txt; or give {{ file = \"{file}\", content_type = \"...\" }})"),
                    );
                    return None;
                }
            },
        };
        if !self.check_header_value(at.clone(), "content-type", &content_type, "error page") {
            return None;
        }
        let path = self.path_at(file, at.clone());
        let read = std::fs::metadata(&path).and_then(|m| {
            if m.len() > MAX_PAGE {
                return Err(std::io::Error::other(format!(
                    "{} bytes is over the 1 MiB an error page may have",
                    m.len()
                )));
            }
            std::fs::read(&path)
        });
        match read {
            Ok(body) => Some(PageVariant {
                media: media_of_type(&content_type),
                content_type,
                body: Arc::from(body),
            }),
            Err(e) => {
                self.error(at, format!("error page {file}: cannot read: {e}"));
                None
            }
        }
    }
}

/// The content type of a page file by its extension.
fn type_of_extension(file: &str) -> Option<&'static str> {
    let ext = file.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "json" => "application/json",
        "txt" | "text" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        _ => return None,
    })
}

fn with_charset(essence: &str) -> String {
    match essence {
        "application/json" => essence.to_string(),
        _ => format!("{essence}; charset=utf-8"),
    }
}

/// The [`PageMedia`] a content type is, if any.
fn media_of_type(content_type: &str) -> Option<PageMedia> {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    PageMedia::ALL
        .into_iter()
        .find(|m| m.essence().eq_ignore_ascii_case(essence))
}

#[cfg(test)]
mod tests {
    use crate::compile::{compile_toml, LiveState};

    fn load(dir: &std::path::Path, pages: &str) -> Result<crate::Compiled, Vec<String>> {
        let path = dir.join("gw.toml");
        let text = format!(
            "[listeners.gw]\nbind = \"127.0.0.1:0\"\nprotocol = \"http\"\nupstream = \"app\"\n[listeners.gw.error_pages]\n{pages}\n[upstreams.app]\ntargets = [\"127.0.0.1:1\"]\n"
        );
        std::fs::write(&path, &text).unwrap();
        let name = path.display().to_string();
        compile_toml(&name, &text, &mut LiveState::default()).map_err(|e| e.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn pages_are_read_and_wrong_ones_named_at_their_place() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("5xx.html"), "<h1>down</h1>").unwrap();
        std::fs::write(dir.path().join("5xx.json"), "{\"error\":\"down\"}").unwrap();
        let c = load(
            dir.path(),
            "404 = { body = \"nothing here\" }\n5xx = { html = \"5xx.html\", json = \"5xx.json\" }\n503 = \"5xx.html\"",
        )
        .unwrap();
        let pages = c.snapshot.listeners[0].http().unwrap().error_pages.clone().unwrap();
        assert_eq!(&*pages.find(404).unwrap().variants[0].body, b"nothing here");
        assert_eq!(pages.find(502).unwrap().variants.len(), 2);
        assert_eq!(
            pages.find(503).unwrap().variants[0].content_type,
            "text/html; charset=utf-8"
        );
        // The route that proxies gets the listener's pages.
        assert!(c.snapshot.listeners[0].http().unwrap().routes[0].error_pages.is_some());

        let dir_name = dir.path().join("gw.toml").display().to_string();
        let errors = load(
            dir.path(),
            "200 = \"5xx.html\"\n6xx = \"5xx.html\"\n404 = \"missing.html\"\n410 = \"page.bin\"\n",
        )
        .unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!("{dir_name}:6:1: error_pages: `200` is not a status")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("6:") || e.contains("`6xx` is not a status")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("error page missing.html: cannot read")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("error page page.bin: no known content type")),
            "{errors:?}"
        );
    }
}
