//! Replays every fuzz corpus input through its decoder, with the fuzz target's own checks.

use std::path::Path;

use rampart_proto::proxy_protocol::decode;

#[test]
fn proxy_protocol_corpus_replays_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proxy_protocol");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        if let Ok(Some((_, used))) = decode(&data) {
            assert!(used <= data.len());
        }
        // Every prefix too: a decoder must never panic on a partial read.
        for cut in 0..data.len().min(600) {
            let _ = decode(&data[..cut]);
        }
        count += 1;
    }
    assert!(count >= 10, "corpus at {} looks empty", dir.display());
}
