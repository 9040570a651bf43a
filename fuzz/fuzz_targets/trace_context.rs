//! Guards the W3C Trace Context reader against panics, and checks that what it reads writes back
//! to the same (`rampart_proto::trace_context::round_trip_holds`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::trace_context::round_trip_holds(data);
});
