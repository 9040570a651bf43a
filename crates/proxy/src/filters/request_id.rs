//! `request_id`: every request carries an id, the client's own when it sent a sane one (and the
//! filter keeps those), else a new UUIDv7 (time-ordered, RFC 9562). It goes upstream in the
//! configured header, into the access log, and back to the client when `echo` is on.

use std::time::{SystemTime, UNIX_EPOCH};

use rampart_model::filter::RequestId;

use crate::http::filter::{FilterCx, HttpFilter, RequestParts, ResponseParts, Verdict};

impl HttpFilter for RequestId {
    type State = ();
    type WorkerState = ();

    async fn request_head(&self, cx: &mut FilterCx<'_>, _: &mut (), req: &mut RequestParts<'_>) -> Verdict {
        let incoming = req.header(&self.header).filter(|id| self.keep_incoming && sane(id));
        let kept = incoming.is_some() && req.header_values(&self.header).nth(1).is_none();
        let id = match incoming {
            Some(id) => String::from_utf8_lossy(id).into_owned(),
            None => uuid_v7(cx.worker.random(), cx.worker.random()),
        };
        if !kept {
            req.set_header(&self.header, &id);
        }
        cx.facts.request_id = Some(id);
        Verdict::Continue
    }

    fn response_head(&self, cx: &mut FilterCx<'_>, _: &mut (), resp: &mut ResponseParts<'_>) {
        if let (true, Some(id)) = (self.echo, &cx.facts.request_id) {
            resp.set_header(&self.header, id);
        }
    }
}

/// An id worth keeping: 1 to 200 visible ASCII characters.
fn sane(id: &[u8]) -> bool {
    (1..=200).contains(&id.len()) && id.iter().all(|b| b.is_ascii_graphic())
}

/// A UUIDv7 in its hyphenated lower-case form: 48 bits of Unix time in milliseconds, the version,
/// 74 random bits, the variant.
pub fn uuid_v7(random_a: u64, random_b: u64) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6..8].copy_from_slice(&random_a.to_be_bytes()[..2]);
    bytes[8..16].copy_from_slice(&random_b.to_be_bytes());
    bytes[6] = 0x70 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v7_has_its_version_variant_and_time() {
        let id = uuid_v7(u64::MAX, u64::MAX);
        assert_eq!(id.len(), 36);
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12]);
        assert!(parts[2].starts_with('7'), "{id}");
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'), "{id}");
        let millis = u64::from_str_radix(&format!("{}{}", parts[0], parts[1]), 16).unwrap();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        assert!(now.abs_diff(millis) < 60_000);
        assert_ne!(uuid_v7(1, 2), uuid_v7(3, 4));
        // Later ids sort after earlier ones (by their time prefix).
        let a = uuid_v7(9, 9);
        assert!(a[..13] <= uuid_v7(0, 0)[..13]);
    }

    #[test]
    fn only_sane_ids_are_kept() {
        assert!(sane(b"abc-123"));
        assert!(!sane(b""));
        assert!(!sane(b"has space"));
        assert!(!sane(&[b'a'; 201]));
    }
}
