//! Guards the RESP2 reply parser (Redis replies to the rate limiter) against panics, against a
//! reply claiming more bytes than it was given, and against a decision that changes as more bytes
//! arrive: once a prefix yields a reply (with its length) or an error, every longer prefix yields
//! exactly the same, under the default limits and under tight ones that fuzzed inputs can reach.
//! A command-shaped reply (an array of bulk strings) must also survive an encode/parse round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_proto::resp::fuzzing::decision_is_stable(data);
});
