//! An HTTP/2 connection, sans-IO, on either side: the server side ([`Connection::server`]) that
//! clients' requests arrive on, and the client side ([`Connection::client`]) that requests go to
//! upstreams on. The bytes the peer sends go in ([`Connection::receive`]), what they mean comes
//! out as [`Event`]s, and every frame this side writes (its preface, answers to SETTINGS and
//! PING, WINDOW_UPDATE, HEADERS, DATA headers, RST_STREAM, GOAWAY) is appended to one output
//! buffer ([`Connection::output`]) that the caller writes out. No I/O, no clock, no tasks: the
//! proxy's muxes drive it.
//!
//! It joins [`crate::h2frame`] (frames), [`crate::hpack`] (field blocks, decoded into a buffer
//! the connection reuses) and [`crate::h2state`] (streams and windows), and adds what only the
//! connection sees: the preface and the first SETTINGS, HEADERS and CONTINUATION in order, the
//! settings both ways, GOAWAY, and the floods (CONTINUATION, empty frames, control frames whose
//! answers the client does not read: see [`Connection::wants_input`]).

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod receive;
mod send;

pub use send::HeadWriter;
#[cfg(test)]
mod tests;

use crate::h1::Field;
use crate::h2frame::{write_settings, write_window_update, ErrorCode, FrameError, Setting, Settings};
use crate::h2state::{RecvWindow, SendWindow, Streams};
use crate::hpack::{Decoder, Encoder};

/// What the server side offers its clients.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a request head past it is answered 431.
    pub max_header_list_size: u32,
    /// The window each stream starts with, and the connection's.
    pub stream_window: u32,
    pub connection_window: u32,
    /// Extended CONNECT (RFC 8441), for WebSockets over HTTP/2.
    pub connect_protocol: bool,
}

/// What the client side offers its server (it allows no push).
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a response head past it resets its stream.
    pub max_header_list_size: u32,
    pub stream_window: u32,
    pub connection_window: u32,
}

/// Which side of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

/// Why no stream could be opened ([`Connection::open_stream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the server is going away (GOAWAY)")]
    GoingAway,
    #[error("stream identifiers are used up")]
    Exhausted,
    #[error("the server's SETTINGS_MAX_CONCURRENT_STREAMS is reached")]
    Full,
    #[error("the connection failed")]
    Failed,
}

/// What the peer's bytes meant. Field sections are in [`Connection::fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new stream's request head (`end_stream`: it has no body).
    Request { stream: u32, end_stream: bool },
    /// A response head on a stream this side opened (client side): its `:status` is the first
    /// field. An interim (1xx) head may come before the final one.
    Response { stream: u32, end_stream: bool },
    /// A stream's trailers (they end its message).
    Trailers { stream: u32 },
    /// Request body data: octets `at..at + len` of the bytes given to the call that returned it.
    /// Their flow-control credit goes back when the caller says they were passed on
    /// ([`Connection::release`]).
    Data {
        stream: u32,
        at: usize,
        len: usize,
        end_stream: bool,
    },
    /// The stream ended abnormally: the client reset it (`by_peer`), or this side did for a
    /// stream error (its RST_STREAM is in the output already).
    Reset { stream: u32, code: u32, by_peer: bool },
    /// Send windows grew (WINDOW_UPDATE or SETTINGS): writers waiting for room may go on.
    WindowOpened,
    /// The peer is going away: streams past `last_stream` were never seen (on the client side,
    /// they may be sent again elsewhere), and no new stream opens.
    GoAway { last_stream: u32, code: u32 },
}

/// What [`Connection::receive`] did with the bytes it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The octets read (whole frames); the rest waits for more.
    pub used: usize,
    /// What the last frame read meant, if anything the caller must act on.
    pub event: Option<Event>,
}

/// A connection error: GOAWAY with its code is in the output already; once that is written, the
/// connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HTTP/2 connection error {code:?}: {what}")]
pub struct ConnectionError {
    pub code: ErrorCode,
    pub what: &'static str,
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's connection preface.
    Preface,
    /// The preface came; the client's first frame must be SETTINGS.
    FirstSettings,
    Open,
    /// A connection error was found: nothing more is read.
    Failed,
}

/// A HEADERS frame whose block goes on in CONTINUATION frames.
#[derive(Debug, Clone, Copy)]
struct Continued {
    stream: u32,
    end_stream: bool,
    /// CONTINUATION frames read for it so far.
    frames: u32,
}

/// Empty DATA, HEADERS or CONTINUATION frames in a row (none ends anything) before the client
/// is told to calm down: a flood that costs a frame's work and says nothing.
const EMPTY_FRAMES: u32 = 100;
/// Streams this side reset, remembered so that frames the client sent before it saw the reset
/// are dropped quietly (RFC 9113 section 5.4.2).
const RESETS_REMEMBERED: usize = 64;
/// Output past this many octets stops reading: answers to PING and SETTINGS the client does not
/// read must not pile up.
const OUTPUT_LIMIT: usize = 256 * 1024;

/// One HTTP/2 connection, either side.
#[derive(Debug)]
pub struct Connection {
    role: Role,
    /// The largest field list this side takes (its SETTINGS_MAX_HEADER_LIST_SIZE).
    max_list: u32,
    phase: Phase,
    /// The client's settings, as they stand.
    peer: Settings,
    /// This side's first SETTINGS has been acknowledged (the client counts windows by it).
    acknowledged: bool,
    decoder: Decoder,
    encoder: Encoder,
    streams: Streams,
    send_window: SendWindow,
    recv_window: RecvWindow,
    continued: Option<Continued>,
    /// The field block being put together from HEADERS and CONTINUATION frames.
    block: Vec<u8>,
    /// A field block being encoded.
    encoded: Vec<u8>,
    /// The last field section decoded: its octets, and the fields as ranges into them.
    decoded: Vec<u8>,
    fields: Vec<Field>,
    /// The window this side offers each stream.
    stream_window: u32,
    /// Frames in a row that carried nothing (see [`EMPTY_FRAMES`]).
    empty_frames: u32,
    reset_here: Vec<u32>,
    /// GOAWAY has gone, naming this last stream: later ones are not served.
    goaway: Option<u32>,
    /// GOAWAY came from the peer, naming this last stream.
    peer_goaway: Option<u32>,
    out: Vec<u8>,
}

impl Connection {
    fn new(role: Role, max_list: u32, max_concurrent: u32, connection_window: u32) -> Self {
        Connection {
            role,
            max_list,
            phase: Phase::Preface,
            peer: Settings::default(),
            acknowledged: false,
            decoder: Decoder::new(4096, max_list as usize),
            encoder: Encoder::new(4096),
            streams: Streams::new(max_concurrent),
            send_window: SendWindow::new(65_535),
            // The peer may send 65,535 octets before it reads this side's WINDOW_UPDATE.
            recv_window: RecvWindow::new(connection_window.max(65_535)),
            continued: None,
            block: Vec::new(),
            encoded: Vec::new(),
            decoded: Vec::new(),
            fields: Vec::new(),
            stream_window: 65_535,
            empty_frames: 0,
            reset_here: Vec::new(),
            goaway: None,
            peer_goaway: None,
            out: Vec::with_capacity(4096),
        }
    }

    /// Writes this side's SETTINGS (and the WINDOW_UPDATE that opens the connection's window
    /// past the RFC's 65,535); until the peer acknowledges them, a stream's window is the
    /// larger of the RFC's initial one and this side's.
    fn greet(&mut self, params: &[(Setting, u32)], stream_window: u32, connection_window: u32) {
        self.streams
            .set_initial_windows(65_535, stream_window, stream_window.max(65_535));
        write_settings(&mut self.out, false, params);
        if connection_window > 65_535 {
            write_window_update(&mut self.out, 0, connection_window - 65_535);
        }
    }

    /// The server side of a connection that has read nothing yet. Its SETTINGS are in the
    /// output at once: a server sends its preface without waiting for the client's.
    pub fn server(config: ServerConfig) -> Self {
        let mut conn = Connection::new(
            Role::Server,
            config.max_header_list_size,
            config.max_concurrent_streams,
            config.connection_window,
        );
        let mut params = vec![
            (Setting::MaxConcurrentStreams, config.max_concurrent_streams),
            (Setting::InitialWindowSize, config.stream_window),
            (Setting::MaxHeaderListSize, config.max_header_list_size),
        ];
        if config.connect_protocol {
            params.push((Setting::EnableConnectProtocol, 1));
        }
        conn.stream_window = config.stream_window;
        conn.greet(&params, config.stream_window, config.connection_window);
        conn
    }

    /// The client side of a new connection: the preface and its SETTINGS are in the output; the
    /// server's SETTINGS must come first.
    pub fn client(config: ClientConfig) -> Self {
        let mut conn = Connection::new(Role::Client, config.max_header_list_size, 0, config.connection_window);
        conn.phase = Phase::FirstSettings;
        conn.out.extend_from_slice(crate::h2frame::PREFACE);
        let params = [
            (Setting::EnablePush, 0),
            (Setting::InitialWindowSize, config.stream_window),
            (Setting::MaxHeaderListSize, config.max_header_list_size),
        ];
        conn.stream_window = config.stream_window;
        conn.greet(&params, config.stream_window, config.connection_window);
        conn
    }

    /// What is to be written to the peer (the caller drains it as it writes).
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Whether reading more is welcome: not while the output has piled up (a peer that sends
    /// PING or SETTINGS without reading the answers is read no further until it does), nor
    /// after a connection error.
    pub fn wants_input(&self) -> bool {
        self.phase != Phase::Failed && self.out.len() < OUTPUT_LIMIT
    }

    /// The last field section decoded ([`Event::Request`], [`Event::Response`] or
    /// [`Event::Trailers`]): its octets and its fields as ranges into them, pseudo-header fields
    /// first as the peer sent them.
    pub fn fields(&self) -> (&[u8], &[Field]) {
        (&self.decoded, &self.fields)
    }

    /// Whether the peer's preface (a client's) and first SETTINGS have come.
    pub fn established(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Streams not yet closed.
    pub fn open_streams(&self) -> usize {
        self.streams.open_count()
    }

    /// Frees the scratch buffers (output, field blocks) while the connection has nothing in
    /// them: an idle connection keeps only its settings, windows and HPACK tables.
    pub fn release_buffers(&mut self) {
        if self.out.is_empty() && self.continued.is_none() {
            self.out = Vec::new();
            self.block = Vec::new();
            self.encoded = Vec::new();
            self.decoded = Vec::new();
            self.fields = Vec::new();
        }
    }

    /// The last field section decoded, moved out (the next one is decoded into new storage).
    pub fn take_fields(&mut self) -> (Vec<u8>, Vec<Field>) {
        (std::mem::take(&mut self.decoded), std::mem::take(&mut self.fields))
    }

    /// The last field section's decoded bytes, moved out for `bytes` (emptied: the next section
    /// is decoded into it); [`Self::field_list`] still gives the fields' ranges into what was
    /// taken, until the next section.
    pub fn swap_decoded(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        let mut bytes = bytes;
        bytes.clear();
        std::mem::replace(&mut self.decoded, bytes)
    }

    /// The last field section's fields, as ranges into its decoded bytes.
    pub fn field_list(&self) -> &[Field] {
        &self.fields
    }

    /// The last stream the peer opened, as GOAWAY names it (a server opens none toward a client).
    fn last_peer_stream(&self) -> u32 {
        match self.role {
            Role::Server => self.streams.last_peer(),
            Role::Client => 0,
        }
    }

    /// Ends the connection for `error`: GOAWAY with its code, and nothing more is read.
    fn fail(&mut self, error: FrameError) -> ConnectionError {
        self.phase = Phase::Failed;
        let last = self.last_peer_stream();
        crate::h2frame::write_goaway(&mut self.out, last, error.code, error.what.as_bytes());
        self.goaway = Some(last);
        ConnectionError {
            code: error.code,
            what: error.what,
        }
    }
}
