//! Path rewrites: a prefix replaced (or stripped), then a regex rewrite with `$1`-style
//! references. The query is kept.

use std::borrow::Cow;

use rampart_model::filter::Rewrite;

use crate::http::filter::{FilterCx, HttpFilter, RequestParts, Verdict};
use crate::http::target::split_target;

impl HttpFilter for Rewrite {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        if let Some(rewritten) = rewrite_target(&req.target, self) {
            req.target = Cow::Owned(rewritten);
        }
        Verdict::Continue
    }
}

/// The target after the rewrites, or `None` when they change nothing.
pub fn rewrite_target(target: &[u8], rewrite: &Rewrite) -> Option<Vec<u8>> {
    let (path, query) = split_target(target);
    let mut path: Cow<'_, [u8]> = Cow::Borrowed(path);
    if let Some((from, to)) = &rewrite.prefix {
        if path.starts_with(from.as_bytes()) {
            let mut p = to.as_bytes().to_vec();
            p.extend_from_slice(&path[from.len()..]);
            if p.first() != Some(&b'/') {
                p.insert(0, b'/');
            }
            path = Cow::Owned(p);
        }
    }
    if let Some((re, replacement)) = &rewrite.regex {
        if let Cow::Owned(replaced) = re.replace(&path, replacement.as_bytes()) {
            path = Cow::Owned(replaced);
        }
    }
    let Cow::Owned(mut out) = path else { return None };
    if !query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(query);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(target: &[u8], rewrite: &Rewrite) -> Vec<u8> {
        rewrite_target(target, rewrite).unwrap_or_else(|| target.to_vec())
    }

    #[test]
    fn prefix_and_regex_rewrites() {
        let mut r = Rewrite {
            prefix: Some(("/api".into(), "".into())),
            ..Default::default()
        };
        assert_eq!(apply(b"/api/users?id=1", &r), b"/users?id=1");
        assert_eq!(apply(b"/api", &r), b"/");
        assert_eq!(rewrite_target(b"/other", &r), None);
        r.prefix = Some(("/v1/".into(), "/v2/".into()));
        assert_eq!(apply(b"/v1/x", &r), b"/v2/x");
        r.prefix = None;
        r.regex = Some((
            regex::bytes::Regex::new("^/user/([0-9]+)$").unwrap(),
            "/users?id=$1".into(),
        ));
        assert_eq!(apply(b"/user/42", &r), b"/users?id=42");
        assert_eq!(rewrite_target(b"/user/x", &r), None);
    }
}
