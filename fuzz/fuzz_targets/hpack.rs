//! HPACK (RFC 7541): any input decodes without a panic, and decode(encode(x)) = x for field
//! lists made from the input (see `rampart_proto::hpack::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::hpack::fuzzing::round_trip_holds(data);
});
