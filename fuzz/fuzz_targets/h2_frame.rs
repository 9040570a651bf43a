//! HTTP/2 frames read one after another from any input (see `rampart_proto::h2frame::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::h2frame::fuzzing::frames_read_cleanly(data);
});
