//! Guards the request-head parser against panics and against reporting ranges or lengths outside
//! the input (a proxy forwards exactly those bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::h1::{parse_request, Limits};

fuzz_target!(|data: &[u8]| {
    let mut fields = Vec::new();
    if let Ok(Some(head)) = parse_request(data, &Limits::default(), &mut fields) {
        assert!(head.len <= data.len());
        for f in &fields {
            let _ = (f.name(data), f.value(data));
        }
    }
});
