//! `forward_auth` as compiled: a sub-request to an auth service decides each request (nginx's
//! `auth_request`, Traefik's ForwardAuth). A 2xx answer lets the request through, with chosen
//! headers of the answer copied onto it; any other answer goes back to the client as it is.

use std::time::Duration;

use super::endpoint::{EndpointTls, HttpEndpoint};

/// `forward_auth`: where the auth service is and what crosses to it and back.
#[derive(Debug)]
pub struct ForwardAuth {
    pub endpoint: HttpEndpoint,
    /// For `https://`: the client configuration and the name the service's certificate carries
    /// (its internal upstream's TLS is made from it).
    pub tls: Option<EndpointTls>,
    /// The index in the snapshot of the service's internal upstream (its URL's host and port as
    /// the target, by DNS for a name; TLS for `https://`; `protocol = "auto"`), which the checks
    /// go to through the internal client. Filters with the same service share one.
    pub upstream: usize,
    /// Time for one check: connect, request, the whole answer.
    pub timeout: Duration,
    /// The client's request headers sent to the service (lower-case); `None`: every end-to-end
    /// field the client sent.
    pub request_headers: Option<Vec<String>>,
    /// Fields of a 2xx answer set on the request sent upstream (lower-case); the client's fields
    /// of these names are removed whether or not the answer has them.
    pub response_headers: Vec<String>,
    /// A field of a 2xx answer that names the user (for the access log and later filters).
    pub user_header: Option<String>,
    /// The largest denial body passed on to the client; a larger one is a bad answer (502).
    pub max_body: usize,
}

impl ForwardAuth {
    /// Whether the client's field `name` goes to the auth service: named by `request_headers`,
    /// or (without the list) any field but the hop-by-hop ones, `Host`, `Content-Length`,
    /// `Expect` and the `X-Forwarded-*` fields Rampart writes itself.
    pub fn sends_header(&self, name: &[u8]) -> bool {
        if is_written_by_rampart(name) {
            return false;
        }
        match &self.request_headers {
            Some(list) => list.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes())),
            None => !is_hop_by_hop(name),
        }
    }
}

/// The fields of a request to the auth service that Rampart writes itself.
fn is_written_by_rampart(name: &[u8]) -> bool {
    const OURS: [&[u8]; 8] = [
        b"host",
        b"content-length",
        b"x-forwarded-method",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-uri",
        b"x-forwarded-for",
        b"expect",
    ];
    OURS.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Hop-by-hop fields (RFC 9110 section 7.6.1, with the ones HTTP/1.0 and proxies use): they
/// belong to one connection and never cross to another.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(request_headers: Option<Vec<String>>) -> ForwardAuth {
        ForwardAuth {
            endpoint: HttpEndpoint::parse("http://auth.internal/check").unwrap(),
            tls: None,
            upstream: 0,
            timeout: Duration::from_secs(1),
            request_headers,
            response_headers: Vec::new(),
            user_header: None,
            max_body: 1024,
        }
    }

    #[test]
    fn end_to_end_fields_go_to_the_service_unless_a_list_names_others() {
        let all = settings(None);
        for sent in [&b"Cookie"[..], b"authorization", b"X-Custom", b"accept"] {
            assert!(all.sends_header(sent), "{}", String::from_utf8_lossy(sent));
        }
        for kept in [
            &b"Connection"[..],
            b"keep-alive",
            b"Transfer-Encoding",
            b"upgrade",
            b"TE",
            b"host",
            b"Content-Length",
            b"X-Forwarded-For",
            b"x-forwarded-uri",
            b"expect",
        ] {
            assert!(!all.sends_header(kept), "{}", String::from_utf8_lossy(kept));
        }
        let listed = settings(Some(vec!["cookie".into(), "x-forwarded-for".into()]));
        assert!(listed.sends_header(b"Cookie"));
        assert!(!listed.sends_header(b"authorization"));
        // Rampart's own X-Forwarded-For wins over a client's, listed or not.
        assert!(!listed.sends_header(b"x-forwarded-for"));
    }
}
