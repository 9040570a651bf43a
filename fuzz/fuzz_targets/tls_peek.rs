//! Guards the first-bytes classifier of TLS ports against panics and against verdicts that change
//! as more bytes arrive: once a prefix is classified, every longer input must agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::tls_peek::{classify, FirstBytes};

fuzz_target!(|data: &[u8]| {
    let whole = classify(data);
    for cut in 0..data.len() {
        let verdict = classify(&data[..cut]);
        assert!(verdict == FirstBytes::NeedMore || verdict == whole);
    }
});
