//! The decoding side: a field block decoded straight into the caller's buffer.

use super::table::DynamicTable;
use super::{entry_size, huffman, read_int, HpackError, STATIC};
use crate::h1::Field;

/// One connection's HPACK decoder (its dynamic table and limits).
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// The most the peer may make the table: the SETTINGS_HEADER_TABLE_SIZE this side sent.
    limit: usize,
    /// The most a decoded field list may hold (SETTINGS_MAX_HEADER_LIST_SIZE: each field's name
    /// and value and 32 octets).
    max_list: usize,
}

impl Decoder {
    /// A decoder whose peer may make its table `table_limit` octets (4,096 unless this side's
    /// settings say otherwise) and whose field lists may hold `max_list` octets.
    pub fn new(table_limit: usize, max_list: usize) -> Self {
        Decoder {
            table: DynamicTable::new(table_limit),
            limit: table_limit,
            max_list,
        }
    }

    /// This side's SETTINGS_HEADER_TABLE_SIZE changed (and was acknowledged): the peer must now
    /// keep its table within `limit`.
    pub fn set_table_limit(&mut self, limit: usize) {
        self.limit = limit;
        if self.table.max() > limit {
            self.table.set_max(limit);
        }
    }

    /// Decodes field block `block` (the HEADERS and CONTINUATION payloads joined), appending each
    /// field's name and then its value to `out` and calling `each` with their ranges there, in
    /// order. A list past the limit is decoded to its end all the same (the table must stay in
    /// step with the peer's) without keeping its fields, and refused with
    /// [`HpackError::ListTooLarge`].
    pub fn decode(&mut self, block: &[u8], out: &mut Vec<u8>, mut each: impl FnMut(Field)) -> Result<(), HpackError> {
        let mut at = 0;
        let mut list = 0usize;
        let mut fields_seen = false;
        while at < block.len() {
            let rest = &block[at..];
            let first = rest[0];
            if first & 0x80 != 0 {
                // Indexed field.
                let (index, used) = read_int(rest, 7)?;
                at += used;
                let (name, value) = self.entry(index)?;
                list += entry_size(name, value);
                if list <= self.max_list {
                    let name = append(out, name);
                    let value = append(out, value);
                    each(Field { name, value });
                }
                fields_seen = true;
                continue;
            }
            if first & 0xe0 == 0x20 {
                // Dynamic table size update: only before the block's first field.
                let (size, used) = read_int(rest, 5)?;
                if fields_seen || size > self.limit {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.table.set_max(size);
                at += used;
                continue;
            }
            // A literal: with incremental indexing (01), without (0000) or never indexed (0001).
            let indexing = first & 0xc0 == 0x40;
            let prefix = if indexing { 6 } else { 4 };
            let (index, used) = read_int(rest, prefix)?;
            at += used;
            let mark = out.len();
            let name = match index {
                0 => {
                    let (name, used) = read_string(&block[at..], out)?;
                    at += used;
                    name
                }
                index => {
                    let (name, _) = self.entry(index)?;
                    append(out, name)
                }
            };
            let (value, used) = read_string(&block[at..], out)?;
            at += used;
            let field = Field { name, value };
            let (n, v) = (field.name(out), field.value(out));
            list += entry_size(n, v);
            if indexing {
                self.table.insert(n, v);
            }
            if list <= self.max_list {
                each(field);
            } else {
                out.truncate(mark);
            }
            fields_seen = true;
        }
        if list > self.max_list {
            return Err(HpackError::ListTooLarge);
        }
        Ok(())
    }

    /// Entry `index` of the static table (1 to 61) or the dynamic one (62 on).
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex(0)),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self.table.get(index - 62).ok_or(HpackError::BadIndex(index)),
        }
    }
}

fn append(out: &mut Vec<u8>, bytes: &[u8]) -> (u32, u32) {
    let start = out.len() as u32;
    out.extend_from_slice(bytes);
    (start, out.len() as u32)
}

/// Reads a string literal (RFC 7541 5.2) from the start of `src` into `out`; returns its range
/// there and the octets it took.
fn read_string(src: &[u8], out: &mut Vec<u8>) -> Result<((u32, u32), usize), HpackError> {
    let huffman_coded = src.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, used) = read_int(src, 7)?;
    let bytes = src.get(used..used + len).ok_or(HpackError::Truncated)?;
    let start = out.len() as u32;
    match huffman_coded {
        true => huffman::decode(bytes, out)?,
        false => out.extend_from_slice(bytes),
    }
    Ok(((start, out.len() as u32), used + len))
}
