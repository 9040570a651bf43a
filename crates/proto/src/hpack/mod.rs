//! HPACK, HTTP/2's header compression (RFC 7541), sans-IO: a [`Decoder`] that decodes a field
//! block straight into a buffer the caller owns (an owned head's bytes: one copy from the wire,
//! names and values as ranges), and an [`Encoder`] that encodes fields from wherever they are.
//! Each keeps its side's dynamic table. The Huffman code is [`huffman`]'s.
//!
//! Not yet used by the proxy (the `h2` crate still does its HTTP/2): the first part of issue 38's
//! own HTTP/2, checked against the RFC's examples and against the `h2` crate as an independent
//! implementation (`crates/proto/tests/h2_oracle.rs`).

mod decoder;
mod encoder;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod huffman;
mod table;

pub use decoder::Decoder;
pub use encoder::Encoder;

/// Why a field block could not be decoded: each is a connection error (COMPRESSION_ERROR, RFC
/// 9113 section 4.3), except [`HpackError::ListTooLarge`], which the stream answers (431 or
/// RST_STREAM) while the table stays in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("field block ends inside a representation")]
    Truncated,
    #[error("integer too large")]
    IntegerOverflow,
    #[error("index {0} is in neither table")]
    BadIndex(usize),
    #[error("invalid Huffman code or padding")]
    Huffman,
    #[error("dynamic table size update above the limit, or not at the start of the block")]
    BadSizeUpdate,
    #[error("decoded field list larger than the limit")]
    ListTooLarge,
}

/// The static table (RFC 7541 Appendix A): index `i` is entry `i + 1`.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The index of the first static table entry named `name` (entries of one name are
/// consecutive), without walking the table.
fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// The static table's entry for `name` with `value` (`(index, true)`), or its first entry of that
/// name (`(index, false)`).
pub(super) fn static_lookup(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let first = static_name(name)?;
    let mut i = first;
    while i <= STATIC.len() && STATIC[i - 1].0 == name {
        if STATIC[i - 1].1 == value {
            return Some((i, true));
        }
        i += 1;
    }
    Some((first, false))
}

/// What an entry costs in a dynamic table: its name and value and 32 octets (RFC 7541 4.1).
fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

/// Reads an integer with an `n`-bit prefix from the start of `src` (RFC 7541 5.1); returns it
/// and the octets it took. Values past 2^28, and more than five continuation octets, are refused
/// (no field or table is that large).
fn read_int(src: &[u8], n: u32) -> Result<(usize, usize), HpackError> {
    let first = *src.first().ok_or(HpackError::Truncated)?;
    let max = (1usize << n) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok((value, 1));
    }
    let mut shift = 0;
    for (i, &b) in src.iter().enumerate().skip(1) {
        // Five continuation octets carry 35 bits, past what any value may be (and a run of
        // octets that add nothing, 0x80, ends here too).
        if shift > 28 {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(b & 0x7f) << shift;
        if value > 1 << 28 {
            return Err(HpackError::IntegerOverflow);
        }
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
    }
    Err(HpackError::Truncated)
}

/// Appends `value` with an `n`-bit prefix whose other bits are `flags` (RFC 7541 5.1).
fn write_int(out: &mut Vec<u8>, flags: u8, n: u32, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests;
