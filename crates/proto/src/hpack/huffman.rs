//! HPACK's Huffman code (RFC 7541 section 5.2 and Appendix B): a canonical code, so the bit
//! length of each symbol's code is all the table holds; the codes follow from the lengths
//! ([`CODES`], computed at compile time), and decoding walks the code length by length.

use super::HpackError;

/// The code length in bits of each symbol: the 256 octets, then EOS (RFC 7541 Appendix B).
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
    28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
    10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
    5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
    22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
    22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
    27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
    27, 27, 27, 27, 27, 26, 30,
];

/// The number of symbols (the octets and EOS).
const SYMBOLS: usize = 257;
/// The longest code, in bits.
const MAX_LEN: usize = 30;

/// The canonical code of each symbol: codes are given in order of length, then of symbol, each
/// one more than the one before, shifted left when the length grows.
const CODES: [u32; SYMBOLS] = {
    let mut codes = [0u32; SYMBOLS];
    let mut code: u32 = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        let mut symbol = 0;
        while symbol < SYMBOLS {
            if LENGTHS[symbol] as usize == len {
                codes[symbol] = code;
                code += 1;
            }
            symbol += 1;
        }
        if len < MAX_LEN {
            code <<= 1;
        }
        len += 1;
    }
    codes
};

/// What decoding needs per code length: the first code of that length, how many codes have it,
/// and where its symbols start in [`SORTED`].
struct Lengths {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
}

const BY_LENGTH: Lengths = {
    let mut first = [0u32; MAX_LEN + 1];
    let mut count = [0u32; MAX_LEN + 1];
    let mut offset = [0u16; MAX_LEN + 1];
    let mut seen: u16 = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        offset[len] = seen;
        let mut symbol = 0;
        let mut found = false;
        while symbol < SYMBOLS {
            if LENGTHS[symbol] as usize == len {
                if !found {
                    first[len] = CODES[symbol];
                    found = true;
                }
                count[len] += 1;
                seen += 1;
            }
            symbol += 1;
        }
        len += 1;
    }
    Lengths { first, count, offset }
};

/// The symbols in code order (by length, then by symbol).
const SORTED: [u16; SYMBOLS] = {
    let mut sorted = [0u16; SYMBOLS];
    let mut at = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        let mut symbol = 0;
        while symbol < SYMBOLS {
            if LENGTHS[symbol] as usize == len {
                sorted[at] = symbol as u16;
                at += 1;
            }
            symbol += 1;
        }
        len += 1;
    }
    sorted
};

/// The length in octets of `src` Huffman-encoded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| LENGTHS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-encoded to `out`, padded with the most significant bits of EOS (ones).
/// Codes gather in a 64-bit accumulator and leave it 32 bits at a time (a code is at most 30
/// bits, so the accumulator never holds more than 61).
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    out.reserve(src.len());
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &b in src {
        let len = LENGTHS[b as usize] as u32;
        acc = (acc << len) | u64::from(CODES[b as usize]);
        bits += len;
        if bits >= 32 {
            bits -= 32;
            out.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
            acc &= (1u64 << bits) - 1;
        }
    }
    while bits >= 8 {
        bits -= 8;
        out.push((acc >> bits) as u8);
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push((((acc & ((1u64 << bits) - 1)) << pad) | ((1u64 << pad) - 1)) as u8);
    }
}

/// Appends the Huffman-decoded `src` to `out`. Refuses an EOS symbol in the string, padding
/// longer than seven bits, and padding that is not the most significant bits of EOS (all ones)
/// (RFC 7541 section 5.2).
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let mut code: u32 = 0;
    let mut len = 0usize;
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len < 5 {
                continue;
            }
            let index = code.wrapping_sub(BY_LENGTH.first[len]);
            if index < BY_LENGTH.count[len] {
                let symbol = SORTED[BY_LENGTH.offset[len] as usize + index as usize];
                if symbol == 256 {
                    return Err(HpackError::Huffman);
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            } else if len == MAX_LEN {
                return Err(HpackError::Huffman);
            }
        }
    }
    // What is left is padding: at most seven bits, all ones.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_is_canonical_and_prefix_free() {
        // EOS is thirty ones, and so is the end of every longer-than-any code space.
        assert_eq!(CODES[256], (1 << 30) - 1);
        // A few codes from RFC 7541 Appendix B.
        assert_eq!((CODES[b'0' as usize], LENGTHS[b'0' as usize]), (0x0, 5));
        assert_eq!((CODES[b'a' as usize], LENGTHS[b'a' as usize]), (0x3, 5));
        assert_eq!((CODES[b' ' as usize], LENGTHS[b' ' as usize]), (0x14, 6));
        assert_eq!((CODES[0], LENGTHS[0]), (0x1ff8, 13));
        for a in 0..SYMBOLS {
            for b in 0..SYMBOLS {
                let (la, lb) = (LENGTHS[a] as u32, LENGTHS[b] as u32);
                if a != b && la <= lb {
                    assert_ne!(CODES[b] >> (lb - la), CODES[a], "{a} is a prefix of {b}");
                }
            }
        }
    }

    #[test]
    fn every_octet_string_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for src in [&b""[..], b"www.example.com", b"no-cache", b"custom-value", &all] {
            let mut enc = Vec::new();
            encode(src, &mut enc);
            assert_eq!(enc.len(), encoded_len(src));
            let mut dec = Vec::new();
            decode(&enc, &mut dec).unwrap();
            assert_eq!(dec, src);
        }
        // RFC 7541 C.4.1: "www.example.com".
        let mut enc = Vec::new();
        encode(b"www.example.com", &mut enc);
        assert_eq!(
            enc,
            [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff]
        );
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "a" is 00011: padded with ones, 0x1f; with zeros, refused.
        let mut out = Vec::new();
        assert!(decode(&[0x1f], &mut out).is_ok());
        assert_eq!(out, b"a");
        assert_eq!(decode(&[0x18], &mut Vec::new()), Err(HpackError::Huffman));
        // A whole octet of padding.
        assert_eq!(decode(&[0x1f, 0xff], &mut Vec::new()), Err(HpackError::Huffman));
        // EOS itself (thirty ones, then padding).
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err(HpackError::Huffman)
        );
    }
}
