//! Answers of Rampart's own: errors (400, 404, 413, 414, 431, 502, 503, 504), the `respond`
//! action, redirects, and the `static` action's errors (403, 405, 412, 416). Each carries a
//! short plain body.

use std::io::Write;

/// The reason phrase for the statuses Rampart produces or commonly relays.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes a complete response into `out`. `close` adds `connection: close`; `head_only` omits
/// the body (responses to HEAD) but keeps its length.
pub fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
    head_only: bool,
) {
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason(status));
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(&super::date::now());
    out.extend_from_slice(b"\r\n");
    let mut has_type = false;
    for (name, value) in headers {
        has_type |= name.eq_ignore_ascii_case("content-type");
        let _ = write!(out, "{name}: {value}\r\n");
    }
    if !has_type && !body.is_empty() {
        out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\n");
    }
    let _ = write!(out, "content-length: {}\r\n", body.len());
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// The body of an error answer: `NNN Reason`.
pub fn error_body(status: u16) -> String {
    format!("{status} {}\n", reason(status))
}
