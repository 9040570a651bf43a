//! Precompressed siblings: `NAME.br`, `NAME.zst`, `NAME.gz` beside `NAME`, served with
//! `Content-Encoding` to clients whose `Accept-Encoding` allows the coding. Among the codings a
//! client accepts (any q above 0, `*` for those it does not name), Rampart prefers br, then
//! zstd, then gzip: the order in which they usually compress text best.

/// A content coding with a precompressed file of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Brotli,
    Zstd,
    Gzip,
}

impl Coding {
    /// In the order they are preferred.
    pub const ALL: [Coding; 3] = [Coding::Brotli, Coding::Zstd, Coding::Gzip];

    /// The name in `Content-Encoding`.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The sibling's file name suffix.
    pub fn suffix(self) -> &'static [u8] {
        match self {
            Coding::Brotli => b".br",
            Coding::Zstd => b".zst",
            Coding::Gzip => b".gz",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The codings a client accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted([bool; 3]);

impl Accepted {
    /// Reads every `Accept-Encoding` value.
    pub fn from_values<'v>(values: impl Iterator<Item = &'v [u8]>) -> Accepted {
        // Per coding: Some(acceptable) once named; `*` decides the unnamed ones.
        let mut named = [None; 3];
        let mut star = None;
        for value in values {
            for item in value.split(|&b| b == b',') {
                let mut params = item.split(|&b| b == b';');
                let name = params.next().unwrap_or_default().trim_ascii();
                let acceptable = params.all(|p| {
                    let p = p.trim_ascii();
                    match p.get(..2) {
                        Some(q) if q.eq_ignore_ascii_case(b"q=") => !is_zero(&p[2..]),
                        _ => true,
                    }
                });
                let coding = if name.eq_ignore_ascii_case(b"br") {
                    Some(Coding::Brotli)
                } else if name.eq_ignore_ascii_case(b"zstd") {
                    Some(Coding::Zstd)
                } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                    Some(Coding::Gzip)
                } else {
                    None
                };
                match coding {
                    Some(c) => named[c.index()] = Some(acceptable),
                    None if name == b"*" => star = Some(acceptable),
                    None => {}
                }
            }
        }
        Accepted(named.map(|n| n.or(star).unwrap_or(false)))
    }

    pub fn allows(self, coding: Coding) -> bool {
        self.0[coding.index()]
    }

    pub fn any(self) -> bool {
        self.0.iter().any(|a| *a)
    }
}

/// Whether a q-value is zero (`0`, `0.`, `0.000`).
fn is_zero(q: &[u8]) -> bool {
    let q = q.trim_ascii();
    q.first() == Some(&b'0') && q[1..].iter().all(|&b| b == b'0' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(values: &[&str]) -> Vec<&'static str> {
        let a = Accepted::from_values(values.iter().map(|v| v.as_bytes()));
        Coding::ALL.iter().filter(|c| a.allows(**c)).map(|c| c.name()).collect()
    }

    #[test]
    fn codings_named_with_a_non_zero_q_are_accepted() {
        assert_eq!(accepted(&["gzip, deflate, br, zstd"]), ["br", "zstd", "gzip"]);
        assert_eq!(accepted(&["gzip"]), ["gzip"]);
        assert_eq!(accepted(&["GZIP;q=0.5", "br;q=1.0"]), ["br", "gzip"]);
        assert_eq!(accepted(&["x-gzip"]), ["gzip"]);
        assert_eq!(accepted(&["br;q=0, gzip"]), ["gzip"]);
        assert_eq!(accepted(&["br;q=0.000"]), Vec::<&str>::new());
        assert_eq!(accepted(&["br;q=0.001"]), ["br"]);
        assert_eq!(accepted(&[]), Vec::<&str>::new());
        assert_eq!(accepted(&["identity"]), Vec::<&str>::new());
    }

    #[test]
    fn a_star_covers_the_codings_not_named() {
        assert_eq!(accepted(&["*"]), ["br", "zstd", "gzip"]);
        assert_eq!(accepted(&["*, br;q=0"]), ["zstd", "gzip"]);
        assert_eq!(accepted(&["gzip, *;q=0"]), ["gzip"]);
    }
}
