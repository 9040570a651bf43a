//! The checks of the `resp` fuzz target, shared with the corpus replay in `cargo test`.

use super::{encode_command, parse_reply, Reply, RespLimits};

/// Limits small enough that fuzzed inputs reach every limit error.
const TIGHT: RespLimits = RespLimits {
    max_line_len: 8,
    max_bulk_len: 16,
    max_array_len: 4,
};

/// Panics unless, under both the default and tight limits, parsing every prefix of `data`
/// never panics, a reply never claims more bytes than it was given, and the first decision (a
/// reply with its length, or an error) is exactly the decision on every longer prefix. A
/// command-shaped reply (an array of bulk strings) must also survive a round trip through
/// [`encode_command`].
pub fn decision_is_stable(data: &[u8]) {
    for limits in [RespLimits::default(), TIGHT] {
        let mut decided = None;
        for cut in 0..=data.len() {
            let verdict = parse_reply(&data[..cut], &limits);
            if let Ok(Some((_, used))) = &verdict {
                assert!(*used <= cut, "used {used} beyond {cut}");
            }
            match (&decided, &verdict) {
                (Some((at, first)), _) => assert_eq!(first, &verdict, "decided at {at}, changed at {cut}"),
                (None, Ok(None)) => {}
                (None, _) => decided = Some((cut, verdict.clone())),
            }
        }
        if let Some((_, Ok(Some((reply, _))))) = &decided {
            command_round_trips(reply);
        }
    }
}

fn command_round_trips(reply: &Reply<'_>) {
    let Some(items) = reply.as_array() else { return };
    let args: Option<Vec<&[u8]>> = items
        .iter()
        .map(|item| match item {
            Reply::Bulk(Some(b)) => Some(*b),
            _ => None,
        })
        .collect();
    let Some(args) = args else { return };
    let mut out = Vec::new();
    encode_command(&mut out, &args);
    let (again, used) = parse_reply(&out, &RespLimits::default())
        .expect("an encoded command parses")
        .expect("an encoded command is whole");
    assert_eq!(used, out.len());
    assert_eq!(&again, reply);
}
