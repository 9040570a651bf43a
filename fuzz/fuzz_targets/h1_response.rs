//! Guards the response-head parser against panics and out-of-range lengths and fields: the owned
//! head it fills reads every field, and the reason phrase, from its own bytes, within the head.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::h1::{parse_response, Limits};
use rampart_proto::message::ResponseHead;

fuzz_target!(|data: &[u8]| {
    let mut head = ResponseHead::default();
    for head_request in [false, true] {
        if let Ok(Some(parsed)) = parse_response(data, &Limits::default(), head_request, &mut head) {
            assert!(parsed.len <= data.len());
            head.attach(data[..parsed.len].to_vec(), 0, parsed.len);
            let within = |r: (u32, u32)| r.0 <= r.1 && r.1 as usize <= parsed.len;
            assert!(within(parsed.reason) && head.fields.iter().all(|f| within(f.name) && within(f.value)));
            assert!((100..=599).contains(&head.status));
            let _ = head.fields_ref().iter().count();
        }
    }
});
