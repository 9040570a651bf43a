//! One stored response as a file: what the disk store writes and reads back, without I/O.
//!
//! ```text
//! magic "RMPCACHE" | u32 version | u32 head length | head | u64 body length | body | u32 CRC-32
//! head: u32 key length, key | u16 status | request, response and Date times (u64 seconds and
//!       u32 nanoseconds each) | u64 Age | u64 lifetime, u8 explicit | u32 variant names, each
//!       (u32 length, name, u8 present, u32 length, value) | u32 fields, each (u32 length, name,
//!       u32 length, value)
//! ```
//!
//! Integers are little-endian. The checksum covers every byte before it, so a file cut short,
//! torn by a crash mid-write or changed on disk is refused whole ([`FormatError`]), never served.
//! [`FileInfo`] reads just enough to index a file (its key, and whether its length adds up).

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;

use crate::entry::Entry;
use crate::policy::control::Targets;
use crate::policy::freshness::{Lifetime, Timing};
use crate::policy::reuse::Variant;

const MAGIC: &[u8; 8] = b"RMPCACHE";
const VERSION: u32 = 1;
/// Magic, version and head length.
const PREAMBLE: usize = 16;
/// The most a head may claim (a stored head is at most a few KiB; this refuses nonsense early).
const HEAD_MAX: usize = 1 << 20;

/// Why a file is not a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not a Rampart cache file (bad magic)")]
    Magic,
    #[error("cache file version {0}, not {VERSION}")]
    Version(u32),
    #[error("cache file cut short or longer than it says")]
    Length,
    #[error("cache file checksum does not match (torn or changed)")]
    Checksum,
    #[error("cache file head is malformed")]
    Head,
}

/// The file for `entry` stored under `key`: its head, then (not copied here) its body, then the
/// checksum of both. Returns the bytes before the body and the trailer after it.
pub fn encode(key: &[u8], entry: &Entry) -> (Vec<u8>, [u8; 4]) {
    let mut head = Vec::with_capacity(256 + key.len());
    put_bytes(&mut head, key);
    head.extend_from_slice(&entry.head.status.to_le_bytes());
    for time in [entry.timing.request_time, entry.timing.response_time, entry.timing.date] {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        head.extend_from_slice(&since.as_secs().to_le_bytes());
        head.extend_from_slice(&since.subsec_nanos().to_le_bytes());
    }
    head.extend_from_slice(&entry.timing.age.to_le_bytes());
    head.extend_from_slice(&entry.lifetime.seconds.to_le_bytes());
    head.push(u8::from(entry.lifetime.explicit));
    let variant = &entry.variant;
    head.extend_from_slice(&(variant.names.len() as u32).to_le_bytes());
    for (name, value) in variant.names.iter().zip(&variant.values) {
        put_bytes(&mut head, name);
        head.push(u8::from(value.is_some()));
        put_bytes(&mut head, value.as_deref().unwrap_or_default());
    }
    let fields = entry.head.fields_ref();
    head.extend_from_slice(&(fields.iter().count() as u32).to_le_bytes());
    for (name, value) in fields.iter() {
        put_bytes(&mut head, name);
        put_bytes(&mut head, value);
    }
    let mut out = Vec::with_capacity(PREAMBLE + head.len() + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(&(entry.body.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out);
    crc.update(&entry.body);
    (out, crc.finalize().to_le_bytes())
}

/// What indexing a file needs: its key, its length as the file says it, and the tags its
/// response names (`Cache-Tag`, `Surrogate-Key`: see [`crate::policy::tags`]), one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    pub key: Vec<u8>,
    /// Every byte of the file, checksum included.
    pub length: u64,
    pub tags: Vec<u8>,
    /// Whether the response varies (its `Vary` names request fields).
    pub varies: bool,
}

/// Reads the start of a file (`start`: at least its preamble, head and body length; more is
/// fine). The checksum is not verified: that needs the whole file, which [`decode`] reads.
pub fn info(start: &[u8]) -> Result<FileInfo, FormatError> {
    let (head, body_at) = head_of(start)?;
    let body_length = read_u64(start.get(body_at..body_at + 8).ok_or(FormatError::Length)?);
    let parsed = parse_head(head)?;
    let length = (body_at as u64 + 8)
        .checked_add(body_length)
        .and_then(|n| n.checked_add(4))
        .ok_or(FormatError::Length)?;
    let tags = tag_lines(parsed.fields.as_slice());
    Ok(FileInfo {
        key: parsed.key.to_vec(),
        length,
        tags,
        varies: !parsed.variant.names.is_empty(),
    })
}

/// The tags a response names (see [`crate::policy::tags`]), one per line, as a record keeps them.
pub fn tag_lines(response: &(impl crate::policy::FieldSource + ?Sized)) -> Vec<u8> {
    let mut lines = Vec::new();
    for tag in crate::policy::tags(response) {
        lines.extend_from_slice(tag);
        lines.push(b'\n');
    }
    lines
}

/// The key and entry a whole file holds, checksum verified, its directives read as `targets`
/// say (RFC 9213). The body is a slice of `file`.
pub fn decode(file: Bytes, targets: &Targets) -> Result<(Vec<u8>, Entry), FormatError> {
    let (head, body_at) = head_of(&file)?;
    let length_bytes = file.get(body_at..body_at + 8).ok_or(FormatError::Length)?;
    let body_length = usize::try_from(read_u64(length_bytes)).map_err(|_| FormatError::Length)?;
    let body_start = body_at + 8;
    let end = body_start.checked_add(body_length).ok_or(FormatError::Length)?;
    if file.len() != end.checked_add(4).ok_or(FormatError::Length)? {
        return Err(FormatError::Length);
    }
    if crc32fast::hash(&file[..end]).to_le_bytes() != file[end..] {
        return Err(FormatError::Checksum);
    }
    let Head {
        key,
        status,
        timing,
        lifetime,
        variant,
        fields,
    } = parse_head(head)?;
    let body = file.slice(body_start..end);
    let entry = Entry::restored(status, &fields, (variant, timing, lifetime), body, targets);
    Ok((key.to_vec(), entry))
}

/// A head, read.
struct Head<'a> {
    key: &'a [u8],
    status: u16,
    timing: Timing,
    lifetime: Lifetime,
    variant: Variant,
    fields: Vec<(&'a [u8], &'a [u8])>,
}

fn parse_head(head: &[u8]) -> Result<Head<'_>, FormatError> {
    let mut reader = Reader(head);
    let key = reader.bytes()?;
    let status = u16::from_le_bytes(reader.take(2)?.try_into().map_err(|_| FormatError::Head)?);
    let mut times = [UNIX_EPOCH; 3];
    for time in &mut times {
        let secs = reader.u64()?;
        let nanos = reader.u32()?;
        *time = UNIX_EPOCH
            .checked_add(Duration::new(secs, nanos.min(999_999_999)))
            .ok_or(FormatError::Head)?;
    }
    let [request_time, response_time, date] = times;
    let timing = Timing {
        request_time,
        response_time,
        date,
        age: reader.u64()?,
    };
    let lifetime = Lifetime {
        seconds: reader.u64()?,
        explicit: reader.take(1)?[0] != 0,
    };
    let mut variant = Variant::default();
    for _ in 0..reader.count()? {
        variant.names.push(reader.bytes()?.to_vec());
        let present = reader.take(1)?[0] != 0;
        let value = reader.bytes()?;
        variant.values.push(present.then(|| value.to_vec()));
    }
    let mut fields = Vec::new();
    for _ in 0..reader.count()? {
        fields.push((reader.bytes()?, reader.bytes()?));
    }
    if !reader.0.is_empty() {
        return Err(FormatError::Head);
    }
    Ok(Head {
        key,
        status,
        timing,
        lifetime,
        variant,
        fields,
    })
}

/// The head's bytes and where the body length follows them.
fn head_of(file: &[u8]) -> Result<(&[u8], usize), FormatError> {
    let preamble = file.get(..PREAMBLE).ok_or(FormatError::Length)?;
    if &preamble[..8] != MAGIC {
        return Err(FormatError::Magic);
    }
    let version = read_u32(&preamble[8..12]);
    if version != VERSION {
        return Err(FormatError::Version(version));
    }
    let head_length = read_u32(&preamble[12..16]) as usize;
    if head_length > HEAD_MAX {
        return Err(FormatError::Head);
    }
    let head = file.get(PREAMBLE..PREAMBLE + head_length).ok_or(FormatError::Length)?;
    Ok((head, PREAMBLE + head_length))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn read_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Reads a head front to back; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.0.len() < n {
            return Err(FormatError::Head);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        self.take(4).map(read_u32)
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        self.take(8).map(read_u64)
    }

    /// A count of items, each at least 4 bytes long: no more than the bytes left allow.
    fn count(&mut self) -> Result<usize, FormatError> {
        let n = self.u32()? as usize;
        if n > self.0.len() / 4 {
            return Err(FormatError::Head);
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// The fuzz target's checks on any bytes taken for a file: reading never panics; a file that
/// decodes is one whose start [`info`] indexes (the same key, its whole length), and writing its
/// entry again gives the same bytes.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use super::*;

    pub fn any_file(data: &[u8]) {
        let info = info(data);
        let Ok((key, entry)) = decode(Bytes::copy_from_slice(data), &Targets::default()) else {
            return;
        };
        let info = info.expect("a file that decodes is indexed");
        assert_eq!((info.key.as_slice(), info.length), (key.as_slice(), data.len() as u64));
        let (head, trailer) = encode(&key, &entry);
        let again: Vec<u8> = [&head[..], &entry.body[..], &trailer[..]].concat();
        assert_eq!(again, data, "a decoded file encodes to the same bytes");
    }
}
