//! `GET /` (and `/index.html`): the live status page. One self-contained HTML document built into
//! the binary from `page/index.html`, `page/page.css`, `page/chart.js` (line charts on a canvas),
//! `page/certificates.js` and `page/caches.js` (those two tables) and `page/page.js` (polling,
//! cards, the target table, the token). Nothing external, so it works offline and behind any
//! firewall. It holds no data of its own: its script reads the JSON API (`/api/history`,
//! `/api/upstreams`, `/api/status`, `/api/caches`) and posts drain, enable and reload,
//! sending the admin token it was given (kept in the tab's `sessionStorage`) as
//! `Authorization: Bearer`. That is why the document itself is served without the token: a
//! browser cannot send one when it navigates to a page.

use std::sync::LazyLock;

use super::api::Answer;
use super::Request;

/// The paths the page answers on.
pub const PATHS: &[&str] = &["/", "/index.html"];

const HTML: &str = include_str!("page/index.html");
const CSS: &str = include_str!("page/page.css");
const CHART_JS: &str = include_str!("page/chart.js");
const CERTIFICATES_JS: &str = include_str!("page/certificates.js");
const CACHES_JS: &str = include_str!("page/caches.js");
const JS: &str = include_str!("page/page.js");

/// The document with its style sheet and script inlined where `index.html` marks them.
static DOCUMENT: LazyLock<Vec<u8>> = LazyLock::new(|| {
    HTML.replacen("/*PAGE_CSS*/", CSS, 1)
        .replacen(
            "/*PAGE_JS*/",
            &format!("{CHART_JS}\n{CERTIFICATES_JS}\n{CACHES_JS}\n{JS}"),
            1,
        )
        .into_bytes()
});

/// Whether `path` is the page's.
pub fn serves(path: &str) -> bool {
    PATHS.contains(&path)
}

/// The page for GET and HEAD; 405 for any other method.
pub fn answer(request: &Request) -> Answer {
    if request.method != "GET" && request.method != "HEAD" {
        let mut answer = Answer::error(405, &format!("{} takes GET", request.path));
        answer.allow = Some("GET");
        return answer;
    }
    Answer {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: DOCUMENT.clone(),
        allow: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(method: &str) -> Request {
        Request {
            method: method.into(),
            path: "/".into(),
            query: String::new(),
            authorization: None,
            keep_alive: false,
        }
    }

    #[test]
    fn the_document_inlines_its_style_and_script_and_names_nothing_outside() {
        let answer = answer(&get("GET"));
        assert_eq!(answer.status, 200);
        assert!(answer.content_type.starts_with("text/html"));
        let text = String::from_utf8(answer.body).unwrap();
        assert!(!text.contains("/*PAGE_CSS*/") && !text.contains("/*PAGE_JS*/"));
        assert!(text.contains(CSS) && text.contains(CHART_JS) && text.contains(JS));
        assert!(text.contains(CERTIFICATES_JS) && text.contains(CACHES_JS));
        // No external resource: nothing is fetched from another origin.
        for needle in ["http://", "https://", "//cdn", "src=\"/", "href=\"/"] {
            assert!(!text.contains(needle), "the page names {needle}");
        }
    }

    #[test]
    fn other_methods_get_405_with_allow() {
        let answer = answer(&get("POST"));
        assert_eq!(answer.status, 405);
        assert_eq!(answer.allow, Some("GET"));
    }
}
