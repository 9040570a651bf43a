//! Where an HTTP/1 message body ends, and its data as it passes: the `{framing, bytes left,
//! chunk decoder, ended}` state written once, for the two places Rampart reads an HTTP/1 body
//! (a response from an HTTP/1 upstream, a request from an HTTP/1 client). Chunked encoding is
//! decoded here: past this point a body is data and trailers.

use rampart_proto::h1::{ChunkedDecoder, ChunkedPart, ChunkedProgress, Framing, H1Error};

/// Where a body ends, and its data as it passes.
#[derive(Clone)]
pub struct BodyFraming {
    framing: Framing,
    decoder: ChunkedDecoder,
    /// Bytes still due of a `Length` body.
    left: u64,
    done: bool,
    /// A chunked body's trailer section, as it passes.
    trailers: Vec<u8>,
}

impl BodyFraming {
    pub fn new(framing: Framing) -> Self {
        BodyFraming {
            framing,
            decoder: ChunkedDecoder::new(),
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            done: matches!(framing, Framing::None | Framing::Length(0)),
            trailers: Vec::new(),
        }
    }

    /// How many of `available` bytes belong to the body, handing their data to `data` (a
    /// chunked body's in pieces, without its framing); notes when the body is complete.
    #[inline]
    pub fn advance(&mut self, available: &[u8], mut data: impl FnMut(&[u8])) -> Result<usize, H1Error> {
        let take = match self.framing {
            Framing::None => 0,
            Framing::Length(_) => {
                let take = (available.len() as u64).min(self.left);
                self.left -= take;
                self.done = self.left == 0;
                take as usize
            }
            Framing::Chunked => {
                let trailers = &mut self.trailers;
                let (used, progress) = self.decoder.decode(available, |part| match part {
                    ChunkedPart::Data(d) => data(d),
                    ChunkedPart::Trailer(t) => trailers.extend_from_slice(t),
                })?;
                self.done = progress == ChunkedProgress::Done;
                return Ok(used);
            }
            Framing::UntilClose => available.len(),
        };
        if take > 0 {
            data(&available[..take]);
        }
        Ok(take)
    }

    /// How the body is delimited.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The whole body has passed.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// A chunked body's trailer section as it passed (`name: value` lines with their line ends;
    /// empty when none came).
    pub fn trailers(&self) -> &[u8] {
        &self.trailers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_framing_finds_the_end() {
        let mut seen = Vec::new();
        let mut length = BodyFraming::new(Framing::Length(5));
        assert_eq!(length.advance(b"abc", |d| seen.extend_from_slice(d)), Ok(3));
        assert!(!length.done);
        assert_eq!(length.advance(b"defgh", |d| seen.extend_from_slice(d)), Ok(2));
        assert!(length.done);
        assert_eq!(seen, b"abcde");

        seen.clear();
        let mut chunked = BodyFraming::new(Framing::Chunked);
        assert_eq!(chunked.advance(b"3\r\nabc\r\n", |d| seen.extend_from_slice(d)), Ok(8));
        assert!(!chunked.done);
        assert_eq!(
            chunked.advance(b"0\r\nX-T: 1\r\n\r\nNEXT", |d| seen.extend_from_slice(d)),
            Ok(13)
        );
        assert!(chunked.done);
        assert_eq!(seen, b"abc");
        assert_eq!(chunked.trailers, b"X-T: 1\r\n");
        assert!(BodyFraming::new(Framing::Chunked).advance(b"zz\r\n", |_| {}).is_err());

        assert!(BodyFraming::new(Framing::None).done);
        assert!(BodyFraming::new(Framing::Length(0)).done);
        let mut until_close = BodyFraming::new(Framing::UntilClose);
        assert_eq!(until_close.advance(b"anything", |_| {}), Ok(8));
        assert!(!until_close.done);
    }
}
