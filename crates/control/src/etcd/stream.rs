//! The body of a watch: a chunked HTTP/1.1 body that carries one JSON object after another
//! (`{"result":{...}}` each, newline-separated), for as long as the watch lives.

use std::io::Read;
use std::time::Duration;

use rampart_proto::h1::{ChunkedDecoder, ChunkedPart, ChunkedProgress};
use serde_json::Value;

use super::client::MAX_ANSWER;
use super::tls::Conn;

/// Why [`WatchStream::next`] gave no message.
#[derive(Debug)]
pub enum StreamEnd {
    /// Nothing arrived for the time asked: the stream may still be alive.
    Idle,
    /// The stream is over: closed, broken or malformed (the reason).
    Lost(String),
}

/// Reads a watch's messages off its connection.
pub struct WatchStream {
    conn: Conn,
    endpoint: String,
    /// Body bytes read and not yet walked by the chunked decoder.
    raw: Vec<u8>,
    decoder: ChunkedDecoder,
    /// The body's data not yet parsed into messages (a message cut by a chunk or a read).
    data: Vec<u8>,
    /// The chunked body ended: what is left in `data` is all there will be.
    ended: bool,
}

impl WatchStream {
    /// The stream on `conn`, whose body starts with `raw` (read with the head).
    pub fn new(conn: Conn, raw: Vec<u8>, endpoint: String) -> WatchStream {
        WatchStream {
            conn,
            endpoint,
            raw,
            decoder: ChunkedDecoder::new(),
            data: Vec::new(),
            ended: false,
        }
    }

    /// Where it reads from, `HOST:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next message, waiting up to `wait` for a byte of it.
    pub fn next(&mut self, wait: Duration) -> Result<Value, StreamEnd> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(message) = self.parse()? {
                return Ok(message);
            }
            // A zero timeout would mean none; ask for a millisecond at least.
            let _ = self.conn.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
            match self.conn.read(&mut buf) {
                Ok(0) => return Err(StreamEnd::Lost("etcd closed the watch".into())),
                Ok(n) => self.raw.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(StreamEnd::Idle)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StreamEnd::Lost(format!("the watch broke: {e}"))),
            }
        }
    }

    /// Walks the bytes read, then takes one whole message off the data, if there is one.
    fn parse(&mut self) -> Result<Option<Value>, StreamEnd> {
        if !self.raw.is_empty() {
            let data = &mut self.data;
            let (used, progress) = self
                .decoder
                .decode(&self.raw, |part| {
                    if let ChunkedPart::Data(bytes) = part {
                        data.extend_from_slice(bytes);
                    }
                })
                .map_err(|e| StreamEnd::Lost(format!("a malformed watch stream ({e})")))?;
            self.raw.drain(..used);
            self.ended |= progress == ChunkedProgress::Done;
        }
        let over = || Err(StreamEnd::Lost("etcd ended the watch".into()));
        let mut messages = serde_json::Deserializer::from_slice(&self.data).into_iter::<Value>();
        match messages.next() {
            Some(Ok(message)) => {
                let used = messages.byte_offset();
                self.data.drain(..used);
                Ok(Some(message))
            }
            Some(Err(e)) if e.is_eof() => {
                if self.ended {
                    return over();
                }
                if self.data.len() > MAX_ANSWER {
                    return Err(StreamEnd::Lost("a watch message over 16 MiB".into()));
                }
                Ok(None)
            }
            None if self.ended => over(),
            None => {
                self.data.clear(); // only whitespace
                Ok(None)
            }
            Some(Err(e)) => Err(StreamEnd::Lost(format!("a watch message that is not JSON ({e})"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream over a local connection fed `bytes`.
    fn fed(bytes: &[u8]) -> WatchStream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        std::io::Write::write_all(&mut server, bytes).unwrap();
        drop(server);
        WatchStream::new(Conn::Plain(conn), Vec::new(), "test".into())
    }

    #[test]
    fn messages_cut_anywhere_come_out_whole() {
        let body = b"{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[{\"kv\":{\"mod_revision\":\"7\"}}]}}\n";
        // One chunk holding the first message and half the second; the rest in another.
        let cut = 40;
        let mut wire = format!("{:x}\r\n", cut).into_bytes();
        wire.extend_from_slice(&body[..cut]);
        wire.extend_from_slice(format!("\r\n{:x}\r\n", body.len() - cut).as_bytes());
        wire.extend_from_slice(&body[cut..]);
        wire.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut stream = fed(&wire);
        let wait = Duration::from_secs(5);
        assert_eq!(stream.next(wait).unwrap()["result"]["created"], true);
        assert_eq!(
            stream.next(wait).unwrap()["result"]["events"][0]["kv"]["mod_revision"],
            "7"
        );
        assert!(matches!(stream.next(wait), Err(StreamEnd::Lost(_))));
    }

    #[test]
    fn garbage_ends_the_stream_without_a_panic() {
        for wire in [&b"zz\r\n"[..], b"5\r\n{]]]]\r\n", b"3\r\n{\"a\r\n"] {
            let mut stream = fed(wire);
            assert!(matches!(stream.next(Duration::from_secs(5)), Err(StreamEnd::Lost(_))));
        }
    }
}
