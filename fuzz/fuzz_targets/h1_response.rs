//! Guards the response-head parser against panics and out-of-range lengths and fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::h1::{parse_response, Limits};

fuzz_target!(|data: &[u8]| {
    let mut fields = Vec::new();
    for head_request in [false, true] {
        if let Ok(Some(head)) = parse_response(data, &Limits::default(), head_request, &mut fields) {
            assert!(head.len <= data.len());
            for f in &fields {
                let _ = (f.name(data), f.value(data));
            }
        }
    }
});
