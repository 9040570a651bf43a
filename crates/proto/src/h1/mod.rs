//! HTTP/1.x, sans-IO: one codec for both roles.
//!
//! - [`parse_request`] (server role) reads a request head into the owned
//!   [`RequestHead`](crate::message::RequestHead), in place, and [`parse_response`] (client role)
//!   a response head into the owned [`ResponseHead`](crate::message::ResponseHead); both decide
//!   how the body is framed, and return the codec's own facts ([`Parsed`]). They are strict where request
//!   smuggling lives: conflicting or malformed framing, bare LF, obs-fold, whitespace before a
//!   colon, control bytes in values, duplicate Host, invalid targets. Every rejection maps to the
//!   status a proxy should answer ([`H1Error::status`]).
//! - [`ChunkedDecoder`] walks a chunked body (sizes, extensions, trailers) so that a proxy can
//!   forward the bytes verbatim while knowing exactly where the body ends.
//!
//! Header fields are returned as byte ranges into the caller's buffer ([`Field`]), so parsing a
//! head allocates nothing once the caller's field vector has grown to size.

mod chunked;
mod head;

pub use chunked::{chunk_size_line, write_chunk, ChunkedDecoder, ChunkedPart, ChunkedProgress};
pub use head::{
    append_range, parse_request, parse_request_owned, parse_response, parse_response_owned, Field, Framing, Parsed,
    Version,
};
pub(crate) use head::{content_length, trim, valid_host, valid_target};

/// Size limits applied while parsing a head.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request line (method, target, version); past it, 414.
    pub max_request_line: usize,
    /// Longest head (start line plus fields); past it, 431.
    pub max_head: usize,
    /// Most header fields; past it, 431.
    pub max_fields: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_head: 64 * 1024,
            max_fields: 100,
        }
    }
}

/// Why a message was rejected. [`H1Error::status`] is the answer a proxy gives a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum H1Error {
    #[error("request line longer than the limit")]
    RequestLineTooLong,
    #[error("header section longer than the limit")]
    HeadTooLarge,
    #[error("more header fields than the limit")]
    TooManyFields,
    #[error("malformed start line")]
    BadStartLine,
    #[error("unsupported HTTP version")]
    BadVersion,
    #[error("invalid method")]
    BadMethod,
    #[error("invalid request target")]
    BadTarget,
    #[error("invalid header field name")]
    BadFieldName,
    #[error("invalid header field value")]
    BadFieldValue,
    #[error("bare LF line ending")]
    BareLf,
    #[error("obsolete line folding")]
    ObsFold,
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndChunked,
    #[error("invalid or conflicting Content-Length")]
    BadContentLength,
    #[error("Transfer-Encoding other than a final chunked")]
    BadTransferEncoding,
    #[error("missing Host header")]
    MissingHost,
    #[error("more than one Host header")]
    DuplicateHost,
    #[error("invalid chunk size line")]
    BadChunkSize,
    #[error("invalid chunk extension")]
    BadChunkExtension,
    #[error("missing CRLF after chunk data")]
    BadChunkEnd,
    #[error("invalid trailer section")]
    BadTrailer,
    #[error("invalid status code")]
    BadStatus,
}

impl H1Error {
    /// The status a proxy answers a client whose request failed this way.
    pub fn status(self) -> u16 {
        match self {
            H1Error::RequestLineTooLong => 414,
            H1Error::HeadTooLarge | H1Error::TooManyFields => 431,
            _ => 400,
        }
    }
}

#[cfg(test)]
mod tests;
