//! Guards the PROXY protocol decoder against panics, out-of-bounds reads, and lengths that
//! claim more bytes than were given, on arbitrary first bytes of a connection.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proto::proxy_protocol::decode;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, used))) = decode(data) {
        assert!(used <= data.len());
    }
});
