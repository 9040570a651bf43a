//! Guards the request-head parser against panics and against reporting ranges or lengths outside
//! the input (a proxy forwards exactly those bytes): the owned head it fills reads every part
//! from its own bytes, within the head.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::h1::{parse_request, Limits};
use rampart_proto::message::RequestHead;

fuzz_target!(|data: &[u8]| {
    let mut head = RequestHead::default();
    if let Ok(Some(parsed)) = parse_request(data, &Limits::default(), &mut head) {
        assert!(parsed.len <= data.len());
        head.attach(data.to_vec(), 0, parsed.len);
        let within = |r: (u32, u32)| r.0 <= r.1 && r.1 as usize <= parsed.len;
        assert!(within(head.method) && within(head.target) && head.host.is_none_or(within));
        assert!(head.fields.iter().all(|f| within(f.name) && within(f.value)));
        assert!(!head.method().is_empty() && !head.target().is_empty());
    }
});
