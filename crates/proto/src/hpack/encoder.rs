//! The encoding side: fields from wherever they are, into a field block.

use super::table::DynamicTable;
use super::{huffman, static_lookup, write_int};

/// Fields worth no dynamic table entry: their values change from message to message, or are
/// secrets a table should not keep (encoded never indexed, RFC 7541 7.1.3).
const NEVER_INDEXED: [&[u8]; 3] = [b"authorization", b"cookie", b"proxy-authorization"];
const NOT_INDEXED: [&[u8]; 6] = [
    b":path",
    b"content-length",
    b"date",
    b"etag",
    b"last-modified",
    b"set-cookie",
];
/// Fields whose value is new on every message and random (a W3C `traceparent`): they make no
/// entry, not even of their name (an entry would add a step to every other field's search of the
/// table), and go as literals, name and value as they are (Huffman coding saves a quarter of
/// random hex, at a cost per octet on every request).
const LITERAL: [&[u8]; 1] = [b"traceparent"];

/// One connection's HPACK encoder (its dynamic table, as the peer's decoder keeps it).
#[derive(Debug)]
pub struct Encoder {
    table: DynamicTable,
    /// A size the peer's settings allow that the next block must announce first.
    pending_size: Option<usize>,
    /// A name lowercased.
    lower: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new(4096)
    }
}

impl Encoder {
    /// An encoder whose table may be `max` octets (the peer's SETTINGS_HEADER_TABLE_SIZE).
    pub fn new(max: usize) -> Self {
        Encoder {
            table: DynamicTable::new(max),
            pending_size: None,
            lower: Vec::new(),
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed: the table is kept within it, and the next
    /// block says so (RFC 7541 4.2).
    pub fn set_max_size(&mut self, max: usize) {
        if max != self.table.max() {
            self.table.set_max(max);
            self.pending_size = Some(max);
        }
    }

    /// Appends the field block of `fields` (pseudo-header fields first, as HTTP/2 requires of
    /// the caller; names with capitals are lowercased) to `out`.
    pub fn encode<'f>(&mut self, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>, out: &mut Vec<u8>) {
        self.begin(out);
        for (name, value) in fields {
            self.field(name, value, out);
        }
    }

    /// Begins a field block in `out` (a table size update, when one is due): then
    /// [`Encoder::field`] for each field, as [`Encoder::encode`] does.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(size) = self.pending_size.take() {
            write_int(out, 0x20, 5, size);
        }
    }

    /// Appends one field to the block [`Encoder::begin`] began (a name with capitals is
    /// lowercased).
    pub fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        if name.iter().any(u8::is_ascii_uppercase) {
            let mut lower = std::mem::take(&mut self.lower);
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            self.encode_field(&lower, value, out);
            self.lower = lower;
        } else {
            self.encode_field(name, value, out);
        }
    }

    /// Appends a field whose value is new on most messages (a `traceparent` made for each
    /// request), the way [`LITERAL`] fields go: a literal not indexed, name and value as they
    /// are. Nothing is checked: the caller knows the name to be lowercase and valid and the value
    /// clean, being their author.
    pub fn fresh_value_field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        out.push(0x00);
        write_int(out, 0x00, 7, name.len());
        out.extend_from_slice(name);
        write_int(out, 0x00, 7, value.len());
        out.extend_from_slice(value);
    }

    fn encode_field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        if LITERAL.contains(&name) {
            return self.fresh_value_field(name, value, out);
        }
        let in_static = static_lookup(name, value);
        if let Some((i, true)) = in_static {
            return write_int(out, 0x80, 7, i);
        }
        let dynamic = self.table.find(name, value);
        if let Some((i, true)) = dynamic {
            return write_int(out, 0x80, 7, i + 62);
        }
        let name_index = in_static.map(|(i, _)| i).or(dynamic.map(|(i, _)| i + 62));
        let never = NEVER_INDEXED.contains(&name);
        let kept_out = never || NOT_INDEXED.contains(&name);
        let indexing = !kept_out && value.len() <= self.table.max() / 4;
        let (flags, prefix) = match (indexing, never) {
            (true, _) => (0x40, 6),
            (false, true) => (0x10, 4),
            (false, false) => (0x00, 4),
        };
        match name_index {
            Some(index) => write_int(out, flags, prefix, index),
            None => {
                write_int(out, flags, prefix, 0);
                write_string(out, name);
            }
        }
        write_string(out, value);
        if indexing {
            self.table.insert(name, value);
        }
    }
}

/// Appends a string literal, Huffman-coded when that is shorter.
fn write_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let coded = huffman::encoded_len(bytes);
    if coded < bytes.len() {
        write_int(out, 0x80, 7, coded);
        huffman::encode(bytes, out);
    } else {
        write_int(out, 0x00, 7, bytes.len());
        out.extend_from_slice(bytes);
    }
}
