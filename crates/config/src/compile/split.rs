//! A route's `split` (its requests shared among upstreams) and an upstream's `sticky_cookie` (a
//! client's requests kept on one target).

use rampart_model::split::{Mirror, Split, SplitWay};
use rampart_model::sticky::StickyCookie;
use toml::Spanned;

use super::Checker;
use crate::raw::{RawMirror, RawSplitWay, RawStickyCookie};

impl Checker<'_> {
    /// `split = [{ upstream = "stable", weight = 95 }, ...]`: every upstream known, weights 0 to
    /// 10,000 (1 when left out), not all 0; `None` after an error (reported).
    pub(super) fn split(
        &mut self,
        route: &str,
        raw: &Spanned<Vec<Spanned<RawSplitWay>>>,
        upstream_index: &dyn Fn(&str) -> Option<usize>,
        upstream_names: &str,
    ) -> Option<Split> {
        let errors = self.errors.len();
        let mut ways = Vec::new();
        for way in raw.get_ref() {
            let w = way.get_ref();
            let Some(upstream) = upstream_index(w.upstream.get_ref()) else {
                self.error(
                    w.upstream.span(),
                    format!(
                        "route `{route}`: split to unknown upstream `{}` {}",
                        w.upstream.get_ref(),
                        super::suggest::defined(w.upstream.get_ref(), upstream_names)
                    ),
                );
                continue;
            };
            let weight = match &w.weight {
                Some(n) => self.count(n, "weight", 0, 10_000).unwrap_or(0) as u32,
                None => 1,
            };
            let header = w.header.as_ref().map(|h| {
                let name = h.get_ref().trim().to_ascii_lowercase();
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) {
                    self.error(h.span(), format!("`{}` is not a header name", h.get_ref()));
                }
                name
            });
            let cookie = w.cookie.as_ref().map(|c| {
                let name = c.get_ref().trim().to_string();
                if name.is_empty() || name.contains(['=', ';', ' ']) {
                    self.error(c.span(), format!("`{}` is not a cookie name", c.get_ref()));
                }
                name
            });
            ways.push(SplitWay {
                upstream,
                weight,
                header,
                cookie,
            });
        }
        let total_weight: u32 = ways.iter().map(|w| w.weight).sum();
        if ways.is_empty() || total_weight == 0 {
            self.error(
                raw.span(),
                format!("route `{route}`: split needs at least one upstream with a weight above 0"),
            );
        }
        (self.errors.len() == errors).then_some(Split { ways, total_weight })
    }

    /// `sticky_cookie = { name = "rampart_sticky", max_age = "1h", secure = true }`.
    pub(super) fn sticky_cookie(&mut self, raw: &RawStickyCookie) -> StickyCookie {
        let name = match &raw.name {
            Some(n) => {
                let name = n.get_ref().trim();
                let token = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    self.error(n.span(), format!("`{}` is not a cookie name", n.get_ref()));
                }
                name.to_string()
            }
            None => "rampart_sticky".to_string(),
        };
        StickyCookie {
            name,
            max_age: raw
                .max_age
                .is_some()
                .then(|| self.duration(&raw.max_age, std::time::Duration::ZERO)),
            secure: raw.secure.unwrap_or(false),
        }
    }

    /// A route's `mirror = { upstream = "shadow", percent = 100 }`; `None` after an error.
    pub(super) fn mirror(
        &mut self,
        route: &str,
        raw: &RawMirror,
        upstream_index: &dyn Fn(&str) -> Option<usize>,
        upstream_names: &str,
    ) -> Option<Mirror> {
        let Some(upstream) = upstream_index(raw.upstream.get_ref()) else {
            self.error(
                raw.upstream.span(),
                format!(
                    "route `{route}`: mirror to unknown upstream `{}` {}",
                    raw.upstream.get_ref(),
                    super::suggest::defined(raw.upstream.get_ref(), upstream_names)
                ),
            );
            return None;
        };
        let percent = match &raw.percent {
            Some(p) => self.count(p, "percent", 0, 100)? as u32,
            None => 100,
        };
        Some(Mirror { upstream, percent })
    }
}
