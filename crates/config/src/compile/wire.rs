//! Config strings that reach the wire as written: header names and values (route header edits,
//! `respond` headers, filter header edits), redirect targets. Each is checked once, at compile
//! time, at its own `file:line:col`, so that no config can split a header field or smuggle a
//! second one into a response (`"a\r\nSet-Cookie: x=1"`).

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::Checker;

/// Whether `s` is an HTTP token (RFC 9110 §5.6.2): a header name, a method, a cookie name.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Why `value` cannot be sent as a header field value, if it cannot: a line break would end the
/// field (and start another), and other control characters are refused by clients and servers.
pub(crate) fn field_value_problem(value: &str) -> Option<&'static str> {
    value.bytes().find_map(|b| match b {
        b'\r' | b'\n' => Some("has a line break (CR or LF), which would end the header field"),
        0 => Some("has a NUL byte"),
        b'\t' => None,
        b if b < 0x20 || b == 0x7f => Some("has a control character"),
        _ => None,
    })
}

/// Why `target` cannot be a `Location`, if it cannot: it is sent as one header field value, and
/// a URI has no spaces or control characters (percent-encode them).
pub(crate) fn uri_problem(target: &str) -> Option<&'static str> {
    if target.is_empty() {
        return Some("is empty");
    }
    if let Some(why) = field_value_problem(target) {
        return Some(why);
    }
    target
        .bytes()
        .any(|b| b == b' ' || b == b'\t')
        .then_some("has a space (percent-encode it as %20)")
}

impl Checker<'_> {
    /// Checks a header name at `at`; `what` names the setting in the message.
    pub(super) fn check_header_name(&mut self, at: Range<usize>, name: &str, what: &str) -> bool {
        if is_token(name) {
            return true;
        }
        self.error(
            at,
            format!(
                "{what}: `{}` is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)",
                name.escape_debug()
            ),
        );
        false
    }

    /// Checks a header value at `at`.
    pub(super) fn check_header_value(&mut self, at: Range<usize>, name: &str, value: &str, what: &str) -> bool {
        match field_value_problem(value) {
            None => true,
            Some(why) => {
                self.error(at, format!("{what}: the value of `{name}` {why}"));
                false
            }
        }
    }

    /// Checks a redirect target at `at`.
    pub(super) fn check_uri(&mut self, at: Range<usize>, target: &str, what: &str) -> bool {
        match uri_problem(target) {
            None => true,
            Some(why) => {
                self.error(at, format!("{what}: `{}` {why}", target.escape_debug()));
                false
            }
        }
    }

    /// A table of header names to values, each checked at its own place; `None` when any is
    /// wrong (each reported).
    pub(super) fn header_pairs(
        &mut self,
        pairs: &BTreeMap<Spanned<String>, Spanned<String>>,
        what: &str,
    ) -> Option<Vec<(String, String)>> {
        let mut ok = true;
        for (name, value) in pairs {
            ok &= self.check_header_name(name.span(), name.get_ref(), what);
            ok &= self.check_header_value(value.span(), name.get_ref(), value.get_ref(), what);
        }
        ok.then(|| {
            pairs
                .iter()
                .map(|(n, v)| (n.get_ref().clone(), v.get_ref().clone()))
                .collect()
        })
    }

    /// Header names, each checked at its own place.
    pub(super) fn header_names(&mut self, names: &[Spanned<String>], what: &str) -> Option<Vec<String>> {
        let mut ok = true;
        for name in names {
            ok &= self.check_header_name(name.span(), name.get_ref(), what);
        }
        ok.then(|| names.iter().map(|n| n.get_ref().to_ascii_lowercase()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_would_split_a_field_are_refused() {
        assert_eq!(field_value_problem("a; b=\"c\"\tok"), None);
        assert_eq!(field_value_problem("caf\u{e9}"), None);
        for bad in ["a\r\nSet-Cookie: x=1", "a\nb", "a\rb", "a\0b", "a\x1bb", "a\x7fb"] {
            assert!(field_value_problem(bad).is_some(), "{bad:?}");
        }
        assert!(uri_problem("https://example.com/a?b=c#d").is_none());
        assert!(uri_problem("/a b").is_some());
        assert!(uri_problem("").is_some());
        assert!(uri_problem("/a\r\nSet-Cookie: x=1").is_some());
        assert!(is_token("X-Request-Id") && !is_token("X Bad") && !is_token("") && !is_token("a:b"));
    }

    fn errors(src: &str) -> Vec<String> {
        let live = &mut crate::compile::LiveState::default();
        match crate::compile::compile_toml("gw.toml", src, live) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    const HEAD: &str =
        "[listeners.gw]\nbind = \"127.0.0.1:0\"\nprotocol = \"http\"\n[upstreams.app]\ntargets = [\"127.0.0.1:1\"]\n";

    #[test]
    fn every_config_string_that_reaches_the_wire_is_checked_at_its_place() {
        let cases = [
            (
                "[[listeners.gw.routes]]\nupstream = \"app\"\nresponse_headers = { set = { \"x\" = \"a\\r\\nSet-Cookie: evil=1\" } }\n",
                "gw.toml:8:36: response_headers: the value of `x` has a line break (CR or LF), which would end the header field",
            ),
            (
                "[[listeners.gw.routes]]\nupstream = \"app\"\nrequest_headers = { add = { \"X Bad\" = \"1\" } }\n",
                "gw.toml:8:29: request_headers: `X Bad` is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)",
            ),
            (
                "[[listeners.gw.routes]]\nupstream = \"app\"\nresponse_headers = { remove = [\"a:b\"] }\n",
                "gw.toml:8:32: response_headers: `a:b` is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)",
            ),
            (
                "[[listeners.gw.routes]]\nrespond = { status = 200, headers = { \"x-a\" = \"1\\n2\" } }\n",
                "gw.toml:7:47: route `gw#1`: respond: the value of `x-a` has a line break (CR or LF), which would end the header field",
            ),
            (
                "[[listeners.gw.routes]]\nredirect = { to = \"https://a.example/\\r\\nSet-Cookie: x=1\" }\n",
                "gw.toml:7:19: route `gw#1`: redirect `to`: `https://a.example/\\r\\nSet-Cookie: x=1` has a line break (CR or LF), which would end the header field",
            ),
            (
                "[[listeners.gw.routes]]\nupstream = \"app\"\nfilters = [{ type = \"response_headers\", set = { \"x\" = \"a\\u0000\" } }]\n",
                "gw.toml:8:12: a `response_headers` filter: the value of `x` has a NUL byte",
            ),
        ];
        for (route, want) in cases {
            let got = errors(&format!("{HEAD}{route}"));
            assert_eq!(got, [want], "{route}");
        }
    }
}
