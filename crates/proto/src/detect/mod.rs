//! Which protocol a connection speaks, from its first bytes ("delayed binding"): a TCP listener
//! reads into a buffer and calls [`detect`] each time more bytes arrive, until it says
//! [`Detection::Done`]; the connection is then routed on the [`Detected`] protocol (and, for TLS
//! and HTTP, on the server name or host).
//!
//! Sans-IO and pure: [`detect`] looks at the whole buffer so far (always from the connection's
//! first byte) and keeps no state, so a caller needs nothing but the buffer. Its answer is
//! monotonic: once a prefix gives `Done(d)`, every longer buffer gives the same `Done(d)` (the
//! `detect` fuzz target checks exactly this). It never panics, whatever the input.
//!
//! One sub-module per protocol, each with an incremental `peek` that says [`Verdict::NeedMore`],
//! [`Verdict::Match`] or [`Verdict::NotThis`]:
//!
//! - [`tls`]: a TLS ClientHello (reassembled across records and segments, read by `tls-parser`),
//!   with its SNI and ALPN list.
//! - [`http1`]: an HTTP/1.0 or HTTP/1.1 request line, or its whole head and the Host.
//! - [`h2`]: the HTTP/2 client connection preface (prior knowledge, cleartext).
//! - [`ssh`]: an SSH protocol version banner.
//! - [`postgres`]: a PostgreSQL client's first message (SSLRequest, GSSENCRequest, CancelRequest,
//!   StartupMessage v3).
//! - [`redis`]: a RESP command (an array of bulk strings).
//!
//! The first byte picks the detectors that can apply, so a plain HTTP request never runs the TLS
//! code. The protocols' first messages do not overlap (HTTP/1 rejects `PRI * HTTP/2.0`, which is
//! HTTP/2's), so at most one detector ever matches a buffer.

pub mod h2;
pub mod http1;
pub mod postgres;
pub mod redis;
pub mod ssh;
pub mod tls;

/// The protocols detection tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// A TLS handshake (a ClientHello).
    Tls,
    /// HTTP/1.0 or HTTP/1.1.
    Http,
    /// HTTP/2 with prior knowledge (the cleartext connection preface).
    H2,
    /// SSH (version 2, or 1.99 compatibility).
    Ssh,
    /// A PostgreSQL client (frontend) connection.
    Postgres,
    /// A Redis client speaking RESP.
    Redis,
    /// None of the above.
    #[default]
    Unknown,
}

impl Protocol {
    /// Every protocol, in declaration order.
    pub const ALL: [Protocol; 7] = [
        Protocol::Tls,
        Protocol::Http,
        Protocol::H2,
        Protocol::Ssh,
        Protocol::Postgres,
        Protocol::Redis,
        Protocol::Unknown,
    ];

    /// The protocol's lowercase name, as configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tls => "tls",
            Protocol::Http => "http",
            Protocol::H2 => "h2",
            Protocol::Ssh => "ssh",
            Protocol::Postgres => "postgres",
            Protocol::Redis => "redis",
            Protocol::Unknown => "unknown",
        }
    }

    /// The protocol named `name` (exactly as [`Protocol::as_str`] spells it), if any.
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caller needs beyond the protocol.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// For HTTP/1, wait for the whole request head (to read the Host) instead of stopping at the
    /// request line.
    pub http_head: bool,
}

/// The result of looking at the bytes received so far (always the connection's first bytes, from
/// offset 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detection {
    /// Some protocol could still match: call again with more bytes.
    NeedMore,
    /// Decided; longer buffers give the same answer.
    Done(Detected),
}

/// A decided connection: its protocol and what its first message says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Detected {
    /// The protocol ([`Protocol::Unknown`] when none matched).
    pub protocol: Protocol,
    /// TLS: the ClientHello's server name (type host_name), lowercased; `None` when there is none.
    pub sni: Option<String>,
    /// TLS: the ALPN protocol names offered, in the client's order.
    pub alpn: Vec<Vec<u8>>,
    /// HTTP/1 with [`Wants::http_head`]: the authority of an absolute-form target, else the Host
    /// header's value, lowercased and otherwise as sent (a port is kept); `None` when there is
    /// none, when there are several Host fields, or when the head could not be read.
    pub http_host: Option<String>,
    /// How many bytes of the buffer the recognised first message spans: TLS, every record that
    /// carries the ClientHello; HTTP/1, the head (or only the request line, when the head was not
    /// wanted or is over the limit); the others, the bytes looked at. 0 for `Unknown`.
    pub message_len: usize,
}

/// One detector's verdict on the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// The bytes so far could still be this protocol.
    NeedMore,
    /// This protocol; longer buffers give the same match.
    Match(T),
    /// Not this protocol, whatever follows.
    NotThis,
}

/// Decides which protocol `buf` (a connection's first bytes, from offset 0) speaks.
///
/// [`Detection::NeedMore`] while some protocol could still match (an empty buffer included);
/// `Done` with the match as soon as one detector matches, or with [`Protocol::Unknown`] (and
/// nothing else) as soon as none can. The first byte picks the detectors: 0x16 TLS, `*` Redis,
/// 0x00 PostgreSQL, an uppercase letter, `-` or `_` HTTP/1, HTTP/2 and SSH; any other first
/// byte is unknown at once.
pub fn detect(buf: &[u8], wants: Wants) -> Detection {
    let Some(&first) = buf.first() else {
        return Detection::NeedMore;
    };
    match first {
        tls::CONTENT_TYPE_HANDSHAKE => combine([answer(tls::peek(buf), |hello| Detected {
            protocol: Protocol::Tls,
            sni: hello.sni,
            alpn: hello.alpn,
            message_len: hello.message_len,
            ..Detected::default()
        })]),
        b'*' => combine([answer(redis::peek(buf), |len| simple(Protocol::Redis, len))]),
        0 => combine([answer(postgres::peek(buf), |_| {
            simple(Protocol::Postgres, postgres::HEADER_LEN)
        })]),
        b'A'..=b'Z' | b'-' | b'_' => {
            // HTTP/1 and HTTP/2 share `P`, HTTP/1 and SSH share `S`: ask all three (the ones that
            // cannot apply say `NotThis` at the first byte). At most one ever matches.
            let h2 = answer(h2::peek(buf), |len| simple(Protocol::H2, len));
            let ssh = answer(ssh::peek(buf), |len| simple(Protocol::Ssh, len));
            let http = if wants.http_head {
                answer(http1::peek_head(buf), http_detected)
            } else {
                answer(http1::peek(buf), http_detected)
            };
            combine([h2, ssh, http])
        }
        _ => Detection::Done(Detected::default()),
    }
}

/// A per-detector answer on the way to a [`Detection`]: `None` for "not this".
fn answer<T>(verdict: Verdict<T>, f: impl FnOnce(T) -> Detected) -> Option<Detection> {
    match verdict {
        Verdict::NeedMore => Some(Detection::NeedMore),
        Verdict::Match(t) => Some(Detection::Done(f(t))),
        Verdict::NotThis => None,
    }
}

/// Any match wins; else "need more" while some detector could still match; else unknown.
fn combine<const N: usize>(answers: [Option<Detection>; N]) -> Detection {
    let mut need_more = false;
    for one in answers.into_iter().flatten() {
        match one {
            Detection::Done(d) => return Detection::Done(d),
            Detection::NeedMore => need_more = true,
        }
    }
    if need_more {
        Detection::NeedMore
    } else {
        Detection::Done(Detected::default())
    }
}

/// A match that carries nothing but its length.
fn simple(protocol: Protocol, message_len: usize) -> Detected {
    Detected {
        protocol,
        message_len,
        ..Detected::default()
    }
}

fn http_detected(request: http1::Request) -> Detected {
    Detected {
        protocol: Protocol::Http,
        http_host: request.host,
        message_len: request.message_len,
        ..Detected::default()
    }
}

/// Whether `buf` starts with the fixed string `literal`: its length once all of it is there.
fn literal(buf: &[u8], literal: &[u8]) -> Verdict<usize> {
    let n = buf.len().min(literal.len());
    if buf.get(..n) != literal.get(..n) {
        Verdict::NotThis
    } else if n == literal.len() {
        Verdict::Match(n)
    } else {
        Verdict::NeedMore
    }
}

#[cfg(test)]
mod tests;
