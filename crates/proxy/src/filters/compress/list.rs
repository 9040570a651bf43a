//! HTTP list field values (RFC 9110 5.6.1): elements separated by commas, each element possibly
//! followed by `;` parameters whose values may be quoted strings (which may hold commas and
//! semicolons). One pass over the bytes, no allocation; malformed input (an unterminated quote)
//! ends the piece at the end of the value instead of failing.

/// The pieces of `value` between `separator`s outside quoted strings, trimmed of whitespace; empty
/// pieces included.
pub(crate) fn pieces(value: &[u8], separator: u8) -> Pieces<'_> {
    Pieces {
        rest: Some(value),
        separator,
    }
}

/// The non-empty elements of a list field value.
pub(crate) fn elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    pieces(value, b',').filter(|element| !element.is_empty())
}

/// An element's first piece (its token or name) and its parameters, split at `;`.
pub(crate) fn token_and_parameters(element: &[u8]) -> (&[u8], Pieces<'_>) {
    let mut pieces = pieces(element, b';');
    let token = pieces.next().unwrap_or_default();
    (token, pieces)
}

/// A `name=value` piece split at its first `=`, both sides trimmed; `None` without `=`.
pub(crate) fn name_and_value(piece: &[u8]) -> Option<(&[u8], &[u8])> {
    let equals = piece.iter().position(|&b| b == b'=')?;
    Some((piece[..equals].trim_ascii(), piece[equals + 1..].trim_ascii()))
}

/// See [`pieces`].
pub(crate) struct Pieces<'a> {
    /// `None` once the last piece has been returned.
    rest: Option<&'a [u8]>,
    separator: u8,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        let mut in_quotes = false;
        let mut escaped = false;
        let mut end = rest.len();
        for (i, &b) in rest.iter().enumerate() {
            if in_quotes {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_quotes = false;
                }
            } else if b == b'"' {
                in_quotes = true;
            } else if b == self.separator {
                end = i;
                break;
            }
        }
        self.rest = rest.get(end + 1..);
        Some(rest[..end].trim_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect<'a>(it: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
        it.map(|p| String::from_utf8_lossy(p).into_owned()).collect()
    }

    #[test]
    fn elements_skip_empties_and_trim() {
        assert_eq!(
            collect(elements(b" gzip , ,br;q=0.5,\tzstd ,")),
            ["gzip", "br;q=0.5", "zstd"]
        );
        assert_eq!(collect(elements(b"")), Vec::<String>::new());
        assert_eq!(collect(elements(b" , ,, ")), Vec::<String>::new());
    }

    #[test]
    fn quoted_strings_do_not_split() {
        let value = br#"a;x="1,2;3", b;y="q\"u,o\\", c"#;
        assert_eq!(collect(elements(value)), [r#"a;x="1,2;3""#, r#"b;y="q\"u,o\\""#, "c"]);
        let (token, params) = token_and_parameters(br#"a ; x="1;2" ;q=1"#);
        assert_eq!(token, b"a");
        assert_eq!(collect(params), [r#"x="1;2""#, "q=1"]);
    }

    #[test]
    fn an_unterminated_quote_runs_to_the_end() {
        assert_eq!(collect(elements(br#"a;x="1,2, b"#)), [r#"a;x="1,2, b"#]);
    }

    #[test]
    fn pieces_keep_empties_so_a_missing_token_stays_missing() {
        let (token, params) = token_and_parameters(b";q=1");
        assert_eq!(token, b"");
        assert_eq!(collect(params), ["q=1"]);
        assert_eq!(collect(pieces(b"a;;b;", b';')), ["a", "", "b", ""]);
    }

    #[test]
    fn name_and_value_split_at_the_first_equals() {
        assert_eq!(name_and_value(b" q = 0.5 "), Some((&b"q"[..], &b"0.5"[..])));
        assert_eq!(name_and_value(b"x=\"a=b\""), Some((&b"x"[..], &b"\"a=b\""[..])));
        assert_eq!(name_and_value(b"q"), None);
        assert_eq!(name_and_value(b"=1"), Some((&b""[..], &b"1"[..])));
    }
}
