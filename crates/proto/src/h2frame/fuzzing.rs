//! The property the `h2_frame` fuzz target checks (and the corpus replay tests re-check): frames
//! read one after another from any input never panic, each takes at least a header's worth and
//! no more than is there, and what it borrows lies within its own payload.

use super::{decode, Frame, HEADER_LEN};

pub fn frames_read_cleanly(data: &[u8]) {
    let max = 16_384 << (data.first().copied().unwrap_or(0) & 3);
    let mut at = 0;
    while let Ok(Some((frame, used))) = decode(&data[at..], max) {
        assert!(used >= HEADER_LEN && at + used <= data.len());
        let payload = &data[at + HEADER_LEN..at + used];
        let within = |part: &[u8]| {
            let start = part.as_ptr() as usize;
            part.is_empty()
                || (start >= payload.as_ptr() as usize
                    && start + part.len() <= payload.as_ptr() as usize + payload.len())
        };
        match frame {
            Frame::Data { data, flow_len, .. } => assert!(within(data) && flow_len as usize == payload.len()),
            Frame::Headers { block, .. } | Frame::Continuation { block, .. } | Frame::PushPromise { block, .. } => {
                assert!(within(block))
            }
            Frame::Settings { params, .. } => assert!(within(params) && params.len() % 6 == 0),
            Frame::GoAway { debug, .. } => assert!(within(debug)),
            _ => {}
        }
        at += used;
    }
}
