//! Guards protocol detection (delayed binding) against panics and against answers that change as
//! more bytes arrive: for both `Wants`, once a prefix is decided, every longer prefix (and the whole
//! input) must give exactly the same `Done`, and a `Done` must stay within the bytes it saw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::detect::{detect, Detection, Protocol, Wants};

fuzz_target!(|data: &[u8]| {
    for http_head in [false, true] {
        let wants = Wants { http_head };
        let mut decided: Option<(usize, Detection)> = None;
        for cut in 0..=data.len() {
            let verdict = detect(&data[..cut], wants);
            match (&decided, &verdict) {
                (Some((at, first)), _) => assert_eq!(first, &verdict, "decided at {at}, changed at {cut}"),
                (None, Detection::Done(d)) => {
                    assert!(d.message_len <= cut, "message_len {} beyond {cut}", d.message_len);
                    if d.protocol == Protocol::Unknown {
                        assert_eq!(d, &Default::default());
                    }
                    decided = Some((cut, verdict));
                }
                (None, Detection::NeedMore) => {}
            }
        }
    }
});
