//! The property the `hpack` fuzz target checks (and the corpus replay tests re-check): any input
//! decodes as a field block without a panic, every field it gives lying within the output; and
//! field lists made from the input (`name\0value` lines; the first byte picks the table size)
//! come back from decode(encode(x)) as they went in (names lowercased), over two blocks (the second one using the
//! table the first filled).

use super::{Decoder, Encoder};

pub fn round_trip_holds(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    // Any bytes as a field block.
    let mut out = Vec::new();
    let mut fields = Vec::new();
    let mut decoder = Decoder::new(4096, 16 * 1024);
    let _ = decoder.decode(data, &mut out, |f| fields.push(f));
    for f in &fields {
        let within = |r: (u32, u32)| r.0 <= r.1 && r.1 as usize <= out.len();
        assert!(within(f.name) && within(f.value));
    }
    let table = [0usize, 64, 256, 4096][usize::from(first & 3)];
    let list: Vec<(&[u8], &[u8])> = rest
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let at = l.iter().position(|&b| b == 0)?;
            Some((&l[..at], &l[at + 1..]))
        })
        .collect();
    let mut encoder = Encoder::new(table);
    let mut decoder = Decoder::new(table, usize::MAX);
    for _ in 0..2 {
        let mut block = Vec::new();
        encoder.encode(list.iter().copied(), &mut block);
        let mut out = Vec::new();
        let mut fields = Vec::new();
        decoder
            .decode(&block, &mut out, |f| fields.push(f))
            .expect("a block the encoder wrote");
        let back: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (f.name(&out), f.value(&out))).collect();
        // The encoder lowercases names (HTTP/2 wants them so); values go as they are.
        let lowered: Vec<(Vec<u8>, &[u8])> = list.iter().map(|(n, v)| (n.to_ascii_lowercase(), *v)).collect();
        let expected: Vec<(&[u8], &[u8])> = lowered.iter().map(|(n, v)| (&n[..], *v)).collect();
        assert_eq!(back, expected);
    }
}
