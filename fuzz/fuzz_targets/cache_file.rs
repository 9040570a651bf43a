//! Guards the HTTP cache's disk file reader (`rampart_cache::disk::format`): any bytes found on
//! disk (torn, changed, from another version) are read without a panic, and a file that reads
//! back is one the indexer agrees with and that writes again to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rampart_cache::disk::format::fuzzing::any_file(data);
});
