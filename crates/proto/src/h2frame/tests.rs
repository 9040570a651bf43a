use super::*;

fn one(buf: &[u8]) -> Result<Frame<'_>, FrameError> {
    let (frame, used) = decode(buf, 16_384)?.expect("a whole frame");
    assert_eq!(used, buf.len());
    Ok(frame)
}

fn raw(len: usize, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_header(&mut out, len, kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

#[test]
fn frames_written_read_back_as_written() {
    let mut out = Vec::new();
    write_ping(&mut out, true, *b"12345678");
    assert_eq!(
        one(&out),
        Ok(Frame::Ping {
            ack: true,
            data: *b"12345678"
        })
    );
    out.clear();
    write_goaway(&mut out, 7, ErrorCode::EnhanceYourCalm, b"calm");
    assert_eq!(
        one(&out),
        Ok(Frame::GoAway {
            last_stream: 7,
            code: 0xb,
            debug: b"calm"
        })
    );
    out.clear();
    write_rst_stream(&mut out, 3, ErrorCode::Cancel);
    assert_eq!(one(&out), Ok(Frame::RstStream { stream: 3, code: 8 }));
    out.clear();
    write_window_update(&mut out, 0, 1 << 20);
    assert_eq!(
        one(&out),
        Ok(Frame::WindowUpdate {
            stream: 0,
            increment: 1 << 20
        })
    );
    out.clear();
    write_settings(
        &mut out,
        false,
        &[(Setting::MaxFrameSize, 32_768), (Setting::EnablePush, 0)],
    );
    let Ok(Frame::Settings { ack: false, params }) = one(&out) else {
        panic!("settings")
    };
    let mut settings = Settings::default();
    settings.apply(params).unwrap();
    assert_eq!((settings.max_frame_size, settings.enable_push), (32_768, false));
    out.clear();
    write_data_header(&mut out, 5, 3, true);
    out.extend_from_slice(b"abc");
    assert_eq!(
        one(&out),
        Ok(Frame::Data {
            stream: 5,
            end_stream: true,
            data: b"abc",
            flow_len: 3
        })
    );
}

#[test]
fn a_large_block_goes_as_headers_and_continuations() {
    let block: Vec<u8> = (0..40u8).collect();
    let mut out = Vec::new();
    write_headers(&mut out, 1, &block, true, 16);
    let mut at = 0;
    let mut joined = Vec::new();
    let mut frames = Vec::new();
    while at < out.len() {
        let (frame, used) = decode(&out[at..], 16_384).unwrap().unwrap();
        at += used;
        match frame {
            Frame::Headers {
                block,
                end_headers,
                end_stream,
                ..
            } => {
                joined.extend_from_slice(block);
                frames.push(("headers", end_headers, end_stream));
            }
            Frame::Continuation { block, end_headers, .. } => {
                joined.extend_from_slice(block);
                frames.push(("continuation", end_headers, false));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(joined, block);
    assert_eq!(
        frames,
        [
            ("headers", false, true),
            ("continuation", false, false),
            ("continuation", true, false)
        ]
    );
}

#[test]
fn padding_and_priority_come_off() {
    // HEADERS, PADDED and PRIORITY: pad length 2, priority (exclusive, on 1, weight 16), block, padding.
    let payload = [2, 0x80, 0, 0, 1, 16, b'h', b'b', 0, 0];
    let headers = raw(
        10,
        kind::HEADERS,
        flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
        3,
        &payload,
    );
    let frame = one(&headers);
    assert_eq!(
        frame,
        Ok(Frame::Headers {
            stream: 3,
            end_stream: false,
            end_headers: true,
            priority: Some(Priority {
                exclusive: true,
                depends_on: 1,
                weight: 16
            }),
            block: b"hb",
        })
    );
    let padded = raw(4, kind::DATA, flag::PADDED, 1, &[1, b'x', b'y', 0]);
    let data = one(&padded).unwrap();
    assert_eq!(
        data,
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"xy",
            flow_len: 4
        }
    );
}

/// The error a frame gets: its code, and its stream for a stream error.
fn error(buf: &[u8]) -> (ErrorCode, Option<u32>) {
    let e = decode(buf, 16_384).expect_err("refused");
    (e.code, e.stream)
}

#[test]
fn bad_frames_get_the_errors_the_rfc_names() {
    use ErrorCode::{FrameSize, Protocol};
    assert_eq!(error(&raw(0, kind::DATA, 0, 0, &[])), (Protocol, None));
    assert_eq!(error(&raw(2, kind::DATA, flag::PADDED, 1, &[5, 0])), (Protocol, None));
    assert_eq!(error(&raw(4, kind::PING, 0, 0, &[0; 4])), (FrameSize, None));
    assert_eq!(error(&raw(8, kind::PING, 0, 1, &[0; 8])), (Protocol, None));
    assert_eq!(error(&raw(6, kind::SETTINGS, flag::ACK, 0, &[0; 6])), (FrameSize, None));
    assert_eq!(error(&raw(5, kind::SETTINGS, 0, 0, &[0; 5])), (FrameSize, None));
    assert_eq!(error(&raw(4, kind::WINDOW_UPDATE, 0, 3, &[0; 4])), (Protocol, Some(3)));
    assert_eq!(error(&raw(4, kind::WINDOW_UPDATE, 0, 0, &[0; 4])), (Protocol, None));
    assert_eq!(
        error(&raw(5, kind::PRIORITY, 0, 3, &[0, 0, 0, 3, 1])),
        (Protocol, Some(3))
    );
    assert_eq!(error(&raw(4, kind::PRIORITY, 0, 3, &[0; 4])), (FrameSize, Some(3)));
    assert_eq!(error(&raw(2, kind::CONTINUATION, 0, 0, b"ab")), (Protocol, None));
    // Too long for this side's frame size: refused before its payload is read.
    let mut long = Vec::new();
    write_header(&mut long, 16_385, kind::DATA, 0, 1);
    assert_eq!(error(&long), (FrameSize, None));
    // Incomplete, and unknown types.
    let ping = raw(4, kind::PING, 0, 0, &[0; 4]);
    assert_eq!(decode(&ping[..8], 16_384), Ok(None));
    let unknown = raw(1, 0xfa, 0, 9, b"?");
    assert_eq!(one(&unknown), Ok(Frame::Unknown { kind: 0xfa, stream: 9 }));
}

#[test]
fn settings_values_are_checked() {
    let param = |id: u16, value: u32| {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(&value.to_be_bytes());
        p
    };
    let apply = |p: Vec<u8>| Settings::default().apply(&p).map_err(|e| e.code);
    assert_eq!(apply(param(0x2, 2)), Err(ErrorCode::Protocol));
    assert_eq!(apply(param(0x4, 1 << 31)), Err(ErrorCode::FlowControl));
    assert_eq!(apply(param(0x5, 100)), Err(ErrorCode::Protocol));
    assert_eq!(apply(param(0x5, 1 << 24)), Err(ErrorCode::Protocol));
    assert_eq!(apply(param(0x99, 7)), Ok(()));
    let mut s = Settings::default();
    s.apply(&param(0x8, 1)).unwrap();
    assert!(s.enable_connect_protocol);
    assert_eq!(s.apply(&param(0x8, 0)).map_err(|e| e.code), Err(ErrorCode::Protocol));
}
