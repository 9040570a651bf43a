//! An HTTP/2 connection, server or client side, driven by any bytes as the peer's (see
//! `rampart_proto::h2conn::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::h2conn::fuzzing::connection_survives(data);
});
