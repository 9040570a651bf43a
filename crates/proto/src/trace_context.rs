//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` request fields, read as the specification and its test suite say, and written.
//! Sans-IO: bytes in, values out.
//!
//! - `traceparent`: `VERSION-TRACE_ID-PARENT_ID-FLAGS` in lowercase hex. Version `00` is exactly
//!   55 octets; a later version (not `ff`) is read by its first four fields, and may go on only
//!   after a `-`. An all-zero trace id or parent id, a field of the wrong length or with other
//!   characters, or more than one `traceparent` field makes it invalid: a new trace begins.
//!   Leading and trailing spaces and tabs are allowed. It is always written as version `00`.
//! - `tracestate`: the fields' values joined by commas, as one list of `key=value` members (empty
//!   members and spaces or tabs around members allowed). Keys are lowercase (`a-z`, digits, `_`,
//!   `-`, `*`, `/`; a multi-tenant key `tenant@system`), values printable ASCII without `,` and
//!   `=` and not ending in a space. A bad member, a key seen twice, or more than 32 members
//!   makes the whole list invalid, and it is dropped; so is a `tracestate` without a valid
//!   `traceparent`.

/// The members a `tracestate` may have.
pub const MAX_MEMBERS: usize = 32;

/// The length of a version-00 `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

/// A parsed `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The caller's span: the parent of the spans this hop makes.
    pub parent_id: [u8; 8],
    /// Bit 0: sampled.
    pub flags: u8,
}

impl TraceParent {
    /// Whether the caller sampled the trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The field value for it, version `00`.
    pub fn to_bytes(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = [b'-'; TRACEPARENT_LEN];
        out[..2].copy_from_slice(b"00");
        hex_into(&self.trace_id, &mut out[3..35]);
        hex_into(&self.parent_id, &mut out[36..52]);
        hex_into(&[self.flags], &mut out[53..55]);
        out
    }
}

/// The `traceparent` of a request whose `traceparent` fields have `values` (none, one, or too
/// many): `None` when it has none or they are not one valid value.
pub fn parse_traceparent<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Option<TraceParent> {
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_one(trim(value))
}

fn parse_one(v: &[u8]) -> Option<TraceParent> {
    if v.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = hex_byte(&v[..2])?;
    let longer_ok = match version {
        0xff => return None,
        0 => false,
        _ => true,
    };
    if v.len() > TRACEPARENT_LEN && (!longer_ok || v[TRACEPARENT_LEN] != b'-') {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    let mut parent_id = [0u8; 8];
    hex_from(&v[3..35], &mut trace_id)?;
    hex_from(&v[36..52], &mut parent_id)?;
    let flags = hex_byte(&v[53..55])?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        trace_id,
        parent_id,
        flags,
    })
}

/// A valid `tracestate` list: its members in order, as `key=value` ranges of `text`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceState {
    text: Vec<u8>,
    members: Vec<(usize, usize)>,
}

impl TraceState {
    /// The list of the `tracestate` fields' `values` (in order): `None` when invalid, and empty
    /// (`Some` with no member) when there is none or every value is blank.
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<TraceState> {
        let mut state = TraceState::default();
        for value in values {
            for member in value.split(|&b| b == b',') {
                let member = trim(member);
                if member.is_empty() {
                    continue;
                }
                let eq = member.iter().position(|&b| b == b'=')?;
                let (key, value) = (&member[..eq], &member[eq + 1..]);
                if !valid_key(key) || !valid_value(value) || state.get(key).is_some() {
                    return None;
                }
                if state.members.len() == MAX_MEMBERS {
                    return None;
                }
                if !state.text.is_empty() {
                    state.text.push(b',');
                }
                let from = state.text.len();
                state.text.extend_from_slice(member);
                state.members.push((from, state.text.len()));
            }
        }
        Some(state)
    }

    /// The value of member `key`, if the list has it.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.members.iter().find_map(|&(from, to)| {
            let member = &self.text[from..to];
            let eq = member.iter().position(|&b| b == b'=')?;
            (&member[..eq] == key).then(|| &member[eq + 1..])
        })
    }

    /// How many members it has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The field value to send on: the members as they came, joined by commas.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text
    }
}

/// A key: `simple-key` (`lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")`) or
/// `tenant@system` (tenant: `(lcalpha / DIGIT) 0*240(...)`, system: `lcalpha 0*13(...)`).
fn valid_key(key: &[u8]) -> bool {
    let rest_ok = |s: &[u8]| {
        s.iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    match key.iter().position(|&b| b == b'@') {
        None => key.len() <= 256 && key.first().is_some_and(u8::is_ascii_lowercase) && rest_ok(&key[1..]),
        Some(at) => {
            let (tenant, system) = (&key[..at], &key[at + 1..]);
            let tenant_ok = (1..=241).contains(&tenant.len())
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && rest_ok(&tenant[1..]);
            let system_ok = (1..=14).contains(&system.len()) && system[0].is_ascii_lowercase() && rest_ok(&system[1..]);
            tenant_ok && system_ok
        }
    }
}

/// A value: 1 to 256 printable ASCII characters but `,` and `=`, the last not a space.
fn valid_value(value: &[u8]) -> bool {
    (1..=256).contains(&value.len())
        && value
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        && value.last() != Some(&b' ')
}

/// `v` without leading and trailing spaces and tabs.
fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |e| e + 1);
    &v[start..end]
}

/// Two lowercase hex digits as a byte.
fn hex_byte(two: &[u8]) -> Option<u8> {
    let mut b = [0u8; 1];
    hex_from(two, &mut b)?;
    Some(b[0])
}

/// Lowercase hex `text` (twice `out`'s length) into `out`; `None` on any other character.
fn hex_from(text: &[u8], out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (pair, byte) in text.chunks_exact(2).zip(out.iter_mut()) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
}

/// `bytes` as lowercase hex into `out` (twice as long; what does not fit is left out).
pub fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(*byte)]);
    }
}

/// Each octet's two lowercase hex digits (one load per octet rather than two).
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    pairs
};

/// The fuzz target's check (replayed over its corpus by the tests): the lines of `data` as
/// `tracestate` values, its first line as a `traceparent`; whatever is read writes back to the
/// same, within the limits.
pub fn round_trip_holds(data: &[u8]) {
    let values: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if let Some(p) = parse_traceparent(values.iter().take(1).copied()) {
        assert_eq!(parse_traceparent(std::iter::once(&p.to_bytes()[..])), Some(p));
        assert!(p.trace_id != [0; 16] && p.parent_id != [0; 8]);
    }
    if let Some(s) = TraceState::parse(values.iter().copied()) {
        assert!(s.len() <= MAX_MEMBERS);
        assert_eq!(TraceState::parse(std::iter::once(s.as_bytes())), Some(s));
    }
}

#[cfg(test)]
mod tests;
