//! SETTINGS parameters (RFC 9113 section 6.5.2, RFC 8441 for extended CONNECT): what a peer
//! said, with its values checked.

use super::{connection, ErrorCode, FrameError};

/// The parameters this side knows (others are ignored, as the RFC requires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    HeaderTableSize = 0x1,
    EnablePush = 0x2,
    MaxConcurrentStreams = 0x3,
    InitialWindowSize = 0x4,
    MaxFrameSize = 0x5,
    MaxHeaderListSize = 0x6,
    EnableConnectProtocol = 0x8,
}

/// A peer's settings, as they stand (the RFC's initial values until it says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub header_table_size: u32,
    pub enable_push: bool,
    /// `None`: no limit.
    pub max_concurrent_streams: Option<u32>,
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    /// `None`: no limit.
    pub max_header_list_size: Option<u32>,
    pub enable_connect_protocol: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            header_table_size: 4096,
            enable_push: true,
            max_concurrent_streams: None,
            initial_window_size: 65_535,
            max_frame_size: 16_384,
            max_header_list_size: None,
            enable_connect_protocol: false,
        }
    }
}

impl Settings {
    /// Applies the parameters of a SETTINGS frame (six octets each, in order). A value out of its
    /// range is a connection error: `enable_push` or `enable_connect_protocol` other than 0 or 1
    /// (PROTOCOL_ERROR, and 1 then 0 for the latter), an initial window past 2^31-1
    /// (FLOW_CONTROL_ERROR), a frame size outside 16,384..=16,777,215 (PROTOCOL_ERROR).
    pub fn apply(&mut self, params: &[u8]) -> Result<(), FrameError> {
        for p in params.chunks_exact(6) {
            let id = u16::from_be_bytes([p[0], p[1]]);
            let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match id {
                0x1 => self.header_table_size = value,
                0x2 => {
                    self.enable_push = match value {
                        0 => false,
                        1 => true,
                        _ => return Err(connection(ErrorCode::Protocol, "SETTINGS_ENABLE_PUSH not 0 or 1")),
                    }
                }
                0x3 => self.max_concurrent_streams = Some(value),
                0x4 if value > 0x7fff_ffff => {
                    return Err(connection(
                        ErrorCode::FlowControl,
                        "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1",
                    ))
                }
                0x4 => self.initial_window_size = value,
                0x5 if !(16_384..=16_777_215).contains(&value) => {
                    return Err(connection(ErrorCode::Protocol, "SETTINGS_MAX_FRAME_SIZE out of range"))
                }
                0x5 => self.max_frame_size = value,
                0x6 => self.max_header_list_size = Some(value),
                0x8 => {
                    self.enable_connect_protocol = match (value, self.enable_connect_protocol) {
                        (1, _) => true,
                        (0, false) => false,
                        _ => {
                            return Err(connection(
                                ErrorCode::Protocol,
                                "SETTINGS_ENABLE_CONNECT_PROTOCOL not 0 or 1, or taken back",
                            ))
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
