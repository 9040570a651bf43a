//! The small HTTP/1.1 client behind the JWKS fetch ([`super::jwks_fetch`]), which runs on the
//! control plane and is not on the internal client yet (`forward_auth` is). It connects to an
//! [`HttpEndpoint`] (TLS through rustls for `https://`) and reads a response with Rampart's own
//! codec: the head (interim 1xx answers skipped), then a `Content-Length`, chunked or
//! close-delimited body of at most a given size. Nothing here has a time limit: callers bound
//! the whole exchange.

use rampart_model::filter::endpoint::{EndpointTls, HttpEndpoint};
use rampart_proto::h1::{
    parse_response, ChunkedDecoder, ChunkedPart, ChunkedProgress, Field, Framing, H1Error, Limits, ResponseHead,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::stream::Stream;

/// Why a request got no usable response. Messages hold no response content.
#[derive(Debug, thiserror::Error)]
pub enum SubrequestError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("bad response: {0}")]
    BadResponse(H1Error),
    #[error("response head too large")]
    HeadTooLarge,
    #[error("body larger than {0} bytes")]
    TooLarge(usize),
    /// The connection ended before the first byte of a response.
    #[error("connection closed before a response")]
    NoResponse,
    #[error("connection closed before the whole response")]
    Truncated,
}

/// Opens a connection to `endpoint` (a host name is resolved on each call).
pub async fn connect(endpoint: &HttpEndpoint, tls: Option<&EndpointTls>) -> Result<Stream, SubrequestError> {
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(SubrequestError::Connect)?;
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Ok(Stream::Tcp(tcp)),
        Some((config, name)) => Ok(Stream::Tls(Box::new(
            crate::tls::connect::connect(tcp, config, name)
                .await
                .map_err(|e| SubrequestError::Tls(e.to_string()))?,
        ))),
    }
}

/// Reads what the stream has into `buf`; returns how much (0 at the end).
pub async fn read_some(stream: &mut Stream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Reads a final response head into `buf` (which starts empty) and `fields`; interim 1xx
/// answers are read and dropped. On success `buf` starts with the head (`head.len` bytes),
/// followed by whatever body bytes came with it.
pub async fn read_response_head(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    fields: &mut Vec<Field>,
) -> Result<ResponseHead, SubrequestError> {
    let limits = Limits::default();
    let mut any = false;
    loop {
        let head = match parse_response(buf, &limits, false, fields) {
            Ok(Some(head)) => head,
            Ok(None) if buf.len() > limits.max_head => return Err(SubrequestError::HeadTooLarge),
            Ok(None) => {
                if read_some(stream, buf).await? == 0 {
                    return Err(if any {
                        SubrequestError::Truncated
                    } else {
                        SubrequestError::NoResponse
                    });
                }
                any = true;
                continue;
            }
            Err(e) => return Err(SubrequestError::BadResponse(e)),
        };
        if (100..200).contains(&head.status) && head.status != 101 {
            buf.drain(..head.len);
            continue;
        }
        return Ok(head);
    }
}

/// A body as read.
#[derive(Debug)]
pub struct ResponseBody {
    pub bytes: Vec<u8>,
    /// The body ended where the response said and nothing came after it: the connection can
    /// carry another request (if the response allows keep-alive).
    pub clean_end: bool,
}

/// The body after a head (`rest` is what came with the head), at most `max` bytes.
pub async fn read_body(
    stream: &mut Stream,
    framing: Framing,
    rest: Vec<u8>,
    max: usize,
) -> Result<ResponseBody, SubrequestError> {
    match framing {
        Framing::None => Ok(ResponseBody {
            clean_end: rest.is_empty(),
            bytes: Vec::new(),
        }),
        Framing::Length(len) => {
            if len > max as u64 {
                return Err(SubrequestError::TooLarge(max));
            }
            let len = len as usize;
            let mut body = rest;
            while body.len() < len {
                if read_some(stream, &mut body).await? == 0 {
                    return Err(SubrequestError::Truncated);
                }
            }
            let clean_end = body.len() == len;
            body.truncate(len);
            Ok(ResponseBody { bytes: body, clean_end })
        }
        Framing::UntilClose => {
            let mut body = rest;
            while read_some(stream, &mut body).await? > 0 {
                if body.len() > max {
                    return Err(SubrequestError::TooLarge(max));
                }
            }
            if body.len() > max {
                return Err(SubrequestError::TooLarge(max));
            }
            Ok(ResponseBody {
                bytes: body,
                clean_end: false,
            })
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            let mut body = Vec::new();
            let mut input = rest;
            loop {
                let (used, progress) = decoder
                    .decode(&input, |part| {
                        if let ChunkedPart::Data(data) = part {
                            body.extend_from_slice(data);
                        }
                    })
                    .map_err(SubrequestError::BadResponse)?;
                if decoder.declared_size() > max as u64 {
                    return Err(SubrequestError::TooLarge(max));
                }
                if progress == ChunkedProgress::Done {
                    return Ok(ResponseBody {
                        bytes: body,
                        clean_end: used == input.len(),
                    });
                }
                input.drain(..used);
                if read_some(stream, &mut input).await? == 0 {
                    return Err(SubrequestError::Truncated);
                }
            }
        }
    }
}
