//! Guards the neutral fields going out on HTTP/2 (heads and trailers): no panic, only fields
//! HTTP/2 may carry cross, and they round-trip through Rampart's HPACK as lowercase tokens.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::h2map::fuzzing::fields_mapping_holds(data);
});
