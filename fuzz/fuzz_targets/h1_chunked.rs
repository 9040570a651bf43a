//! Guards the chunked decoder against panics, against consuming more than it is given, and
//! against giving a different answer when the same bytes arrive split differently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::h1::{ChunkedDecoder, ChunkedProgress};

fuzz_target!(|data: &[u8]| {
    let whole = {
        let mut d = ChunkedDecoder::new();
        d.advance(data).map(|(n, p)| (n, p == ChunkedProgress::Done))
    };
    if let Ok((n, _)) = whole {
        assert!(n <= data.len());
    }
    let mut d = ChunkedDecoder::new();
    let mut used = 0;
    let mut split = Ok((0, false));
    for piece in data.chunks(3) {
        match d.advance(piece) {
            Ok((n, p)) => {
                used += n;
                split = Ok((used, p == ChunkedProgress::Done));
                if p == ChunkedProgress::Done {
                    break;
                }
            }
            Err(e) => {
                split = Err(e);
                break;
            }
        }
    }
    assert_eq!(whole.is_ok(), split.is_ok());
    if let (Ok(a), Ok(b)) = (whole, split) {
        assert_eq!(a, b);
    }
});
