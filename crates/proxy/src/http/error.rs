//! One error type for everything that can go wrong with an HTTP request: where it came from, the
//! status the client gets when nothing of the response has left yet, the name the access log
//! records, and whether trying again on another connection is allowed.

use rampart_model::metrics::UpstreamErrorKind;
use rampart_proto::h1::H1Error;

/// Which side of the proxy a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// The client: a malformed or oversized request, a timeout, a closed connection.
    Downstream,
    /// The upstream: no target, a failed connect, a broken or malformed response, a timeout.
    Upstream,
    /// Rampart itself: a file the `static` action could not read.
    Internal,
}

/// A failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("malformed request head: {0}")]
    BadRequest(H1Error),
    #[error("request head not complete in time")]
    ClientHeaderTimeout,
    #[error("malformed request body")]
    BadRequestBody,
    #[error("request body not sent in time")]
    ClientBodyTimeout,
    #[error("client connection closed or failed")]
    ClientGone,
    #[error("no healthy target")]
    NoHealthyTarget,
    #[error("every target tried failed")]
    UpstreamUnavailable,
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("connect failed")]
    ConnectFailed,
    #[error("TLS handshake with the upstream failed (certificate not verified, or nothing in common)")]
    UpstreamTls,
    #[error("upstream connection failed while sending the request")]
    UpstreamWriteFailed {
        /// Whether request body bytes had left (no retry then).
        body_sent: bool,
    },
    #[error("upstream did not take the request in time")]
    UpstreamWriteTimeout,
    #[error("upstream closed before answering")]
    UpstreamReset,
    #[error("upstream refused the stream unprocessed (HTTP/2 REFUSED_STREAM or GOAWAY)")]
    UpstreamRefused,
    #[error("upstream closed in the middle of the response")]
    UpstreamClosedEarly,
    #[error("malformed response head")]
    UpstreamBadResponse,
    #[error("no response head in time")]
    UpstreamTimeout,
    #[error("the upstream answered {status}, which `retry_on` tries again")]
    UpstreamStatus {
        status: u16,
        /// The response (head and body) was read whole and its connection can carry another
        /// request: it goes back to the pool rather than closed.
        reusable: bool,
    },
    #[error("every target at its request limit and the upstream's queue full")]
    QueueFull,
    #[error("every target at its request limit for the whole queue timeout")]
    QueueTimeout,
    #[error("malformed response body")]
    UpstreamBadBody,
    #[error("response body stalled")]
    UpstreamReadTimeout,
    #[error("whole-request time limit reached")]
    RequestTimeout,
    #[error("a static file could not be read (or got shorter while it was sent)")]
    FileRead,
    #[error("the request names a part of the configuration its snapshot lacks (a bug in Rampart; the request is refused, the worker goes on)")]
    MissingConfig,
    #[error("refused by a filter: {reason}")]
    Filtered {
        /// The status the client gets.
        status: u16,
        /// The access log's name for it.
        reason: &'static str,
    },
}

impl HttpError {
    /// Where the failure came from.
    pub fn source(self) -> ErrorSource {
        use HttpError::*;
        match self {
            BadRequest(_) | ClientHeaderTimeout | BadRequestBody | ClientBodyTimeout | ClientGone | Filtered { .. } => {
                ErrorSource::Downstream
            }
            FileRead | MissingConfig => ErrorSource::Internal,
            _ => ErrorSource::Upstream,
        }
    }

    /// The status the client is answered with (when no response byte has left yet).
    pub fn status(self) -> u16 {
        use HttpError::*;
        match self {
            BadRequest(e) => e.status(),
            ClientHeaderTimeout | ClientBodyTimeout => 408,
            BadRequestBody | ClientGone => 400,
            Filtered { status, .. } => status,
            FileRead | MissingConfig => 500,
            NoHealthyTarget | QueueFull | QueueTimeout => 503,
            UpstreamStatus { status, .. } => status,
            ConnectTimeout | UpstreamWriteTimeout | UpstreamTimeout | RequestTimeout | UpstreamReadTimeout => 504,
            UpstreamUnavailable
            | ConnectFailed
            | UpstreamTls
            | UpstreamWriteFailed { .. }
            | UpstreamReset
            | UpstreamRefused
            | UpstreamClosedEarly
            | UpstreamBadResponse
            | UpstreamBadBody => 502,
        }
    }

    /// The name the access log records.
    pub fn reason(self) -> &'static str {
        use HttpError::*;
        match self {
            BadRequest(e) => match e.status() {
                414 => "request_line_too_long",
                431 => "header_too_large",
                _ => "bad_request",
            },
            ClientHeaderTimeout => "client_header_timeout",
            BadRequestBody => "bad_request_body",
            ClientBodyTimeout => "client_body_timeout",
            ClientGone => "client_error",
            NoHealthyTarget => "no_healthy_target",
            UpstreamUnavailable => "upstream_unavailable",
            ConnectTimeout => "connect_timeout",
            ConnectFailed => "connect_failed",
            UpstreamTls => "upstream_tls",
            UpstreamWriteFailed { .. } => "upstream_write_failed",
            UpstreamWriteTimeout => "upstream_write_timeout",
            UpstreamReset => "upstream_reset",
            UpstreamRefused => "upstream_refused",
            UpstreamClosedEarly => "upstream_closed_early",
            UpstreamBadResponse => "upstream_bad_response",
            UpstreamTimeout => "upstream_timeout",
            UpstreamStatus { .. } => "upstream_status_retried",
            QueueFull => "queue_full",
            QueueTimeout => "queue_timeout",
            UpstreamBadBody => "upstream_bad_body",
            UpstreamReadTimeout => "upstream_read_timeout",
            RequestTimeout => "request_timeout",
            FileRead => "file_read_failed",
            MissingConfig => "internal_error",
            Filtered { reason, .. } => reason,
        }
    }

    /// How a failure of a chosen target counts in its error metrics; `None` for failures that are
    /// not a target's (the client's, no target at all). Connect failures are counted where the
    /// connect is tried ([`crate::connect::connect_upstream`]), so they are `None` here too.
    pub fn target_error(self) -> Option<UpstreamErrorKind> {
        use HttpError::*;
        match self {
            UpstreamWriteFailed { .. } | UpstreamReset | UpstreamRefused | UpstreamClosedEarly => {
                Some(UpstreamErrorKind::Reset)
            }
            UpstreamWriteTimeout | UpstreamTimeout | UpstreamReadTimeout | RequestTimeout => {
                Some(UpstreamErrorKind::Timeout)
            }
            UpstreamBadResponse | UpstreamBadBody => Some(UpstreamErrorKind::BadResponse),
            _ => None,
        }
    }

    /// Whether the client is answered at all: not when its connection is what failed.
    pub fn answerable(self) -> bool {
        self != HttpError::ClientGone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_status_source_and_reason() {
        assert_eq!(HttpError::BadRequest(H1Error::RequestLineTooLong).status(), 414);
        assert_eq!(
            HttpError::BadRequest(H1Error::RequestLineTooLong).reason(),
            "request_line_too_long"
        );
        assert_eq!(HttpError::BadRequest(H1Error::TooManyFields).status(), 431);
        assert_eq!(HttpError::ClientHeaderTimeout.source(), ErrorSource::Downstream);
        assert_eq!(HttpError::NoHealthyTarget.status(), 503);
        assert_eq!(HttpError::ConnectTimeout.status(), 504);
        assert_eq!(HttpError::UpstreamReset.source(), ErrorSource::Upstream);
        assert_eq!(
            HttpError::UpstreamStatus {
                status: 503,
                reusable: false
            }
            .status(),
            503
        );
        assert!(!HttpError::ClientGone.answerable());
        assert_eq!(
            HttpError::UpstreamClosedEarly.target_error(),
            Some(UpstreamErrorKind::Reset)
        );
        assert_eq!(
            HttpError::UpstreamReadTimeout.target_error(),
            Some(UpstreamErrorKind::Timeout)
        );
        assert_eq!(
            HttpError::UpstreamBadBody.target_error(),
            Some(UpstreamErrorKind::BadResponse)
        );
        assert_eq!(HttpError::ConnectFailed.target_error(), None);
        assert_eq!(HttpError::FileRead.source(), ErrorSource::Internal);
        assert_eq!(HttpError::FileRead.status(), 500);
        assert_eq!(HttpError::FileRead.target_error(), None);
        assert_eq!(HttpError::ClientGone.target_error(), None);
        assert_eq!(HttpError::MissingConfig.status(), 500);
        assert_eq!(HttpError::MissingConfig.source(), ErrorSource::Internal);
    }
}
