//! Guards the neutral-fields to HTTP/2 mapping (response heads and trailers): no panic, only
//! fields HTTP/2 may carry come out, and every one that may be carried does, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::h2map::fuzzing::fields_mapping_holds(data);
});
