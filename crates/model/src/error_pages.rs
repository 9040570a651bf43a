//! Error pages: what replaces the short plain body of an answer of Rampart's own (404 for no
//! route, 502/503/504, a filter's 401/403/429, 408, 413) when the operator gave one, per listener
//! or per route, by exact status or status class (`5xx`). A page can have variants by media type
//! (HTML, JSON, plain text), chosen by the request's `Accept` field; bodies are read from files
//! when the config is loaded, so answering costs no file access.

use std::sync::Arc;

/// Which statuses a page is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    /// Exactly this status.
    Exact(u16),
    /// Any status of this class (`4` for `4xx`).
    Class(u8),
}

impl StatusMatch {
    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusMatch::Exact(s) => s == status,
            StatusMatch::Class(c) => status / 100 == u16::from(c),
        }
    }
}

/// The media types an error page variant can have, and a request can prefer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageMedia {
    Html,
    Json,
    Text,
}

impl PageMedia {
    pub const ALL: [PageMedia; 3] = [PageMedia::Html, PageMedia::Json, PageMedia::Text];

    /// The media type (`type/subtype`).
    pub fn essence(self) -> &'static str {
        match self {
            PageMedia::Html => "text/html",
            PageMedia::Json => "application/json",
            PageMedia::Text => "text/plain",
        }
    }
}

/// One body of a page.
#[derive(Debug, Clone)]
pub struct PageVariant {
    pub media: Option<PageMedia>,
    /// The `Content-Type` sent with it.
    pub content_type: String,
    pub body: Arc<[u8]>,
}

/// One page: the statuses it is for and its variants (at least one), in the config's order.
#[derive(Debug, Clone)]
pub struct ErrorPage {
    pub status: StatusMatch,
    pub variants: Vec<PageVariant>,
}

impl ErrorPage {
    /// The variant for a request whose `Accept` field gave `weights` (`None`: no field): the one
    /// whose media type it accepts with the highest weight (ties: the config's order); the first
    /// variant when it accepts none of them, or has no field.
    pub fn variant(&self, weights: Option<MediaWeights>) -> &PageVariant {
        let first = &self.variants[0];
        let Some(weights) = weights else { return first };
        let mut best: Option<(u16, &PageVariant)> = None;
        for v in &self.variants {
            let Some(media) = v.media else { continue };
            let q = weights.of(media);
            if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, v));
            }
        }
        best.map_or(first, |(_, v)| v)
    }
}

/// How much a request's `Accept` field wants each [`PageMedia`] (0 to 1000), read once per
/// request that may get an error page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaWeights([u16; 3]);

impl MediaWeights {
    /// The weights an `Accept` field gives.
    pub fn from_accept(accept: &[u8]) -> MediaWeights {
        MediaWeights(PageMedia::ALL.map(|m| accept_weight(accept, m.essence())))
    }

    pub fn of(self, media: PageMedia) -> u16 {
        self.0[media as usize]
    }
}

/// The error pages of a listener or a route: exact statuses before classes.
#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    pub pages: Vec<ErrorPage>,
}

impl ErrorPages {
    /// The page for `status`, if there is one: an exact match wins over a class.
    pub fn find(&self, status: u16) -> Option<&ErrorPage> {
        let exact = self.pages.iter().find(|p| p.status == StatusMatch::Exact(status));
        exact.or_else(|| self.pages.iter().find(|p| p.status.matches(status)))
    }

    /// These pages with `fallback`'s for the statuses they do not cover (a route's pages over
    /// its listener's).
    pub fn over(&self, fallback: &ErrorPages) -> ErrorPages {
        let mut pages = self.pages.clone();
        for p in &fallback.pages {
            if !pages.iter().any(|own| own.status == p.status) {
                pages.push(p.clone());
            }
        }
        ErrorPages { pages }
    }
}

/// The weight (0 to 1000) an `Accept` field gives `essence` (`type/subtype`): by the most
/// specific range that covers it (`type/subtype`, then `type/*`, then `*/*`), RFC 9110 §12.5.1.
pub fn accept_weight(accept: &[u8], essence: &str) -> u16 {
    let (kind, _) = essence.split_once('/').unwrap_or((essence, ""));
    let mut best: Option<(u8, u16)> = None;
    for item in accept.split(|&b| b == b',') {
        let mut params = item.split(|&b| b == b';');
        let range = trim(params.next().unwrap_or_default());
        let specificity = if range.eq_ignore_ascii_case(essence.as_bytes()) {
            3
        } else if range.len() == kind.len() + 2
            && range[..kind.len()].eq_ignore_ascii_case(kind.as_bytes())
            && &range[kind.len()..] == b"/*"
        {
            2
        } else if range == b"*/*" {
            1
        } else {
            continue;
        };
        let q = params
            .map(trim)
            .find_map(|p| p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")))
            .map_or(1000, parse_q);
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0, |(_, q)| q)
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// `0.5` as 500; anything malformed as 0.
fn parse_q(v: &[u8]) -> u16 {
    let text = std::str::from_utf8(v).unwrap_or("0");
    text.parse::<f32>()
        .map_or(0, |q| (q.clamp(0.0, 1.0) * 1000.0).round() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(status: StatusMatch, media: &[PageMedia]) -> ErrorPage {
        ErrorPage {
            status,
            variants: media
                .iter()
                .map(|m| PageVariant {
                    media: Some(*m),
                    content_type: m.essence().to_string(),
                    body: Arc::from(m.essence().as_bytes()),
                })
                .collect(),
        }
    }

    #[test]
    fn accept_chooses_the_variant() {
        let p = page(StatusMatch::Class(5), &[PageMedia::Html, PageMedia::Json]);
        let chosen = |accept: Option<&str>| p.variant(accept.map(|a| MediaWeights::from_accept(a.as_bytes()))).media;
        assert_eq!(chosen(None), Some(PageMedia::Html));
        assert_eq!(chosen(Some("application/json")), Some(PageMedia::Json));
        assert_eq!(
            chosen(Some("text/html,application/xhtml+xml,*/*;q=0.8")),
            Some(PageMedia::Html)
        );
        assert_eq!(
            chosen(Some("application/json;q=0.9, text/html;q=0.5")),
            Some(PageMedia::Json)
        );
        assert_eq!(chosen(Some("*/*")), Some(PageMedia::Html));
        assert_eq!(chosen(Some("image/png")), Some(PageMedia::Html));
        assert_eq!(chosen(Some("text/*;q=0.2, application/*")), Some(PageMedia::Json));
        assert_eq!(chosen(Some("application/json;q=0")), Some(PageMedia::Html));
    }

    #[test]
    fn exact_statuses_win_over_classes_and_routes_over_listeners() {
        let listener = ErrorPages {
            pages: vec![
                page(StatusMatch::Class(5), &[PageMedia::Text]),
                page(StatusMatch::Exact(404), &[PageMedia::Text]),
            ],
        };
        let route = ErrorPages {
            pages: vec![page(StatusMatch::Exact(503), &[PageMedia::Json])],
        };
        let both = route.over(&listener);
        assert_eq!(both.find(503).unwrap().variants[0].media, Some(PageMedia::Json));
        assert_eq!(both.find(502).unwrap().status, StatusMatch::Class(5));
        assert_eq!(both.find(404).unwrap().status, StatusMatch::Exact(404));
        assert!(both.find(401).is_none());
    }
}
