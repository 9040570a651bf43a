//! `Accept-Encoding` (RFC 9110 12.5.3): what a request accepts, and which configured coding to send.
//!
//! A field is a list of codings, each with an optional weight: `gzip, br;q=0.8, *;q=0.1`. A coding
//! named explicitly takes its own weight; `*` gives its weight to every coding not named; a coding
//! neither named nor covered by `*` is not acceptable, and so is one with `q=0`. Weights run from
//! 0 to 1 with at most three decimals; a malformed weight (`q=2`, `q=0.1234`, `q=high`, a quoted
//! one) makes its coding not acceptable rather than guessing. A coding named twice takes its lowest
//! weight: a client that refused it once is not sent it. `x-gzip` is gzip. Tokens and the `q`
//! name are case-insensitive and whitespace around `,`, `;` and `=` is tolerated.
//!
//! Parsing is one pass over each field's bytes into a fixed-size summary (no allocation, no
//! backtracking), so a hostile header costs time linear in its length, which the header size limit
//! bounds. No `Accept-Encoding` at all, or an empty one, accepts no compressed coding here: RFC 9110
//! would allow any coding then, but every server sends identity to such clients.

use rampart_model::filter::compress::Algorithm;

use super::list;

/// A weight in thousandths: 0 (not acceptable) to 1000 (`q=1`, the default).
pub type Weight = u16;

/// The weight of a coding listed without `q`.
pub const FULL_WEIGHT: Weight = 1000;

/// What a request's `Accept-Encoding` fields say about the codings Rampart can produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptEncoding {
    /// Explicit weights, indexed by [`slot`].
    named: [Option<Weight>; 3],
    /// The weight of `*`.
    any: Option<Weight>,
}

impl AcceptEncoding {
    /// The summary of a request's `Accept-Encoding` field values, in order (several fields
    /// combine as one list).
    pub fn parse<'v>(values: impl IntoIterator<Item = &'v [u8]>) -> AcceptEncoding {
        let mut accept = AcceptEncoding::default();
        for value in values {
            accept.add_field(value);
        }
        accept
    }

    /// Adds one `Accept-Encoding` field value.
    pub fn add_field(&mut self, value: &[u8]) {
        for element in list::elements(value) {
            let (token, parameters) = list::token_and_parameters(element);
            let mut weight = FULL_WEIGHT;
            for parameter in parameters {
                let q = match list::name_and_value(parameter) {
                    Some((name, value)) if name.eq_ignore_ascii_case(b"q") => parse_weight(value),
                    // A bare `q` is a malformed weight; other parameters mean nothing here.
                    None if parameter.eq_ignore_ascii_case(b"q") => None,
                    _ => continue,
                };
                weight = weight.min(q.unwrap_or(0));
            }
            let entry = if token == b"*" {
                &mut self.any
            } else {
                match Algorithm::from_token(token) {
                    Some(algorithm) => &mut self.named[slot(algorithm)],
                    None => continue,
                }
            };
            *entry = Some(entry.map_or(weight, |earlier| earlier.min(weight)));
        }
    }

    /// The weight the request gives `algorithm`: its own, else that of `*`, else 0.
    pub fn weight(&self, algorithm: Algorithm) -> Weight {
        self.named[slot(algorithm)].or(self.any).unwrap_or(0)
    }

    /// The coding to send: the highest-weighted acceptable one of `preference`, the first listed
    /// among equals; `None` when none is acceptable.
    pub fn choose(&self, preference: &[Algorithm]) -> Option<Algorithm> {
        let mut best: Option<(Algorithm, Weight)> = None;
        for &algorithm in preference {
            let weight = self.weight(algorithm);
            if weight > best.map_or(0, |(_, w)| w) {
                best = Some((algorithm, weight));
            }
        }
        best.map(|(algorithm, _)| algorithm)
    }
}

/// The coding to send for these `Accept-Encoding` field values: see [`AcceptEncoding::choose`].
pub fn negotiate<'v>(values: impl IntoIterator<Item = &'v [u8]>, preference: &[Algorithm]) -> Option<Algorithm> {
    AcceptEncoding::parse(values).choose(preference)
}

fn slot(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::Zstd => 0,
        Algorithm::Brotli => 1,
        Algorithm::Gzip => 2,
    }
}

/// An RFC 9110 qvalue in thousandths: `0`, `0.`, `0.5`, `0.123`, `1`, `1.`, `1.000`; `None` for
/// anything else.
pub fn parse_weight(value: &[u8]) -> Option<Weight> {
    let (&first, rest) = value.split_first()?;
    let fraction = match rest {
        [] => &[][..],
        [b'.', digits @ ..] if digits.len() <= 3 => digits,
        _ => return None,
    };
    let mut thousandths: Weight = 0;
    let mut scale: Weight = 100;
    for &digit in fraction {
        if !digit.is_ascii_digit() {
            return None;
        }
        thousandths += Weight::from(digit - b'0') * scale;
        scale /= 10;
    }
    match first {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(FULL_WEIGHT),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
