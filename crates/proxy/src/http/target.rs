//! Request targets: origin-form or absolute-form (RFC 9112 §3.2), the path and query, the host to
//! route on (rewrites are a filter: `crate::filters::rewrite`).

use std::borrow::Cow;

/// A request target as routing and forwarding see it.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestTarget<'a> {
    /// Path and query as sent upstream before rewrites: an absolute-form target is forwarded in
    /// origin-form, as nginx does.
    pub origin_form: Cow<'a, [u8]>,
    pub path: &'a [u8],
    pub query: &'a [u8],
    /// The host to route on, without its port.
    pub host: &'a [u8],
    /// The authority (`host[:port]`) of an absolute-form target; empty otherwise.
    pub authority: &'a [u8],
    /// The target was absolute-form: its authority is the request's host and replaces the `Host`
    /// field (RFC 9112 §3.2.2).
    pub from_authority: bool,
}

/// Reads a request target with the `Host` field the request had.
pub fn request_target<'a>(target: &'a [u8], host_field: Option<&'a [u8]>) -> RequestTarget<'a> {
    let (path, query) = split_target(target);
    let absolute = target.first() != Some(&b'/');
    let Some(scheme_end) = absolute.then(|| target.windows(3).position(|w| w == b"://")).flatten() else {
        return RequestTarget {
            origin_form: Cow::Borrowed(target),
            path,
            query,
            host: host_field.map(strip_port).unwrap_or(b""),
            authority: b"",
            from_authority: false,
        };
    };
    let rest = &target[scheme_end + 3..];
    let authority_len = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let origin_form = match &rest[authority_len..] {
        [] => Cow::Borrowed(&b"/"[..]),
        after @ [b'/', ..] => Cow::Borrowed(after),
        query_only => {
            let mut with_root = b"/".to_vec();
            with_root.extend_from_slice(query_only);
            Cow::Owned(with_root)
        }
    };
    RequestTarget {
        origin_form,
        path,
        query,
        host: strip_port(authority),
        authority,
        from_authority: true,
    }
}

/// The path and query of a request target (origin-form or absolute-form).
pub fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    let path_start = if target.first() == Some(&b'/') {
        0
    } else if let Some(scheme_end) = target.windows(3).position(|w| w == b"://") {
        let authority = scheme_end + 3;
        target[authority..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(target.len(), |p| authority + p)
    } else {
        0
    };
    let rest = &target[path_start..];
    match rest.iter().position(|&b| b == b'?') {
        Some(q) => (&rest[..q], &rest[q + 1..]),
        None => (if rest.is_empty() { b"/" } else { rest }, b""),
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
pub fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return host.iter().position(|&b| b == b']').map_or(host, |e| &host[..=e]);
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(c) if host[c + 1..].iter().all(u8::is_ascii_digit) => &host[..c],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_into_path_and_query() {
        assert_eq!(split_target(b"/a/b?x=1"), (&b"/a/b"[..], &b"x=1"[..]));
        assert_eq!(split_target(b"/a"), (&b"/a"[..], &b""[..]));
        assert_eq!(split_target(b"http://h:1/p?q"), (&b"/p"[..], &b"q"[..]));
        assert_eq!(split_target(b"http://h"), (&b"/"[..], &b""[..]));
        assert_eq!(strip_port(b"example.com:8080"), b"example.com");
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
        assert_eq!(strip_port(b"example.com"), b"example.com");
    }

    #[test]
    fn absolute_form_routes_on_its_authority_and_goes_upstream_in_origin_form() {
        let t = request_target(b"http://api.example:8080/x/y?q=1", Some(b"other.example"));
        assert_eq!(&*t.origin_form, b"/x/y?q=1");
        assert_eq!((t.path, t.query), (&b"/x/y"[..], &b"q=1"[..]));
        assert_eq!(t.host, b"api.example");
        assert_eq!(t.authority, b"api.example:8080");
        assert!(t.from_authority);
        let t = request_target(b"HTTPS://api.example", None);
        assert_eq!(&*t.origin_form, b"/");
        assert_eq!(t.host, b"api.example");
        assert_eq!(&*request_target(b"http://h?a=b", None).origin_form, b"/?a=b");
        let t = request_target(b"/plain?x", Some(b"h.example:80"));
        assert_eq!(&*t.origin_form, b"/plain?x");
        assert_eq!(t.host, b"h.example");
        assert!(!t.from_authority);
        assert_eq!(request_target(b"/p", None).host, b"");
    }
}
