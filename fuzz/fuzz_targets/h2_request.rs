//! Guards the HTTP/2 to HTTP/1.1 request translation: no panic, and a request it accepts is one
//! head the HTTP/1 codec reads whole, with the same method, target and host and a framing that
//! matches the stream (no smuggled second request, no body the stream does not carry).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::h2map::fuzzing::request_translation_holds(data);
});
