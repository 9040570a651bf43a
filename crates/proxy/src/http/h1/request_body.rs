//! A request body read from an HTTP/1 client, as the neutral message's body frames: data (its
//! chunks decoded) and an end with trailers. Data that lies whole in the read buffer is handed
//! out where it lies; a chunked body's data, which lies between chunk lines, is gathered first.

use std::time::Duration;

use rampart_proto::h1::{Field, Framing};
use rampart_proto::h2map::trailer_field_ranges;
use rampart_proto::message::FieldsRef;

use crate::http::body_framing::BodyFraming;
use crate::http::error::HttpError;
use crate::http::iobuf::IoBuf;
use crate::http::message::{BodyFrame, BodyWatcher};
use crate::http::state::{HttpWorkerState, HTTP_BUFFER_SIZE};
use crate::stream::Stream;

/// Where one request's body stands.
pub struct H1RequestBody {
    body: BodyFraming,
    /// Bytes at the front of the read buffer that the last frame handed out where they lie:
    /// consumed by the next call.
    given: usize,
    /// A chunked body's data, gathered from between its chunk lines.
    gathered: Vec<u8>,
    /// The trailer fields, as ranges into the body's trailer section.
    trailers: Vec<Field>,
}

impl H1RequestBody {
    pub fn new(framing: Framing) -> Self {
        H1RequestBody {
            body: BodyFraming::new(framing),
            given: 0,
            gathered: Vec::new(),
            trailers: Vec::new(),
        }
    }

    /// The next frame of the body in `inbuf` (the bytes behind the request head), reading more
    /// from `stream` as needed, each read within `timeout`.
    pub async fn frame<'a>(
        &'a mut self,
        inbuf: &'a mut IoBuf,
        stream: &mut Stream,
        state: &HttpWorkerState,
        timeout: Duration,
    ) -> Result<BodyFrame<'a>, HttpError> {
        inbuf.consume(std::mem::take(&mut self.given));
        loop {
            if self.body.is_done() {
                if self.trailers.is_empty() && !self.body.trailers().is_empty() {
                    trailer_field_ranges(self.body.trailers(), &mut self.trailers);
                }
                let buf = self.body.trailers();
                return Ok(BodyFrame::End(FieldsRef::Ranges {
                    buf,
                    list: &self.trailers,
                }));
            }
            if inbuf.is_empty() {
                let read = inbuf.read_from(state, stream, HTTP_BUFFER_SIZE);
                match tokio::time::timeout(timeout, read).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return Err(HttpError::ClientGone),
                    Ok(Ok(_)) => {}
                    Err(_) => return Err(HttpError::ClientBodyTimeout),
                }
            }
            if self.body.framing() == Framing::Chunked {
                self.gathered.clear();
                let gathered = &mut self.gathered;
                let used = self
                    .body
                    .advance(inbuf.filled(), |data| gathered.extend_from_slice(data))
                    .map_err(|_| HttpError::BadRequestBody)?;
                inbuf.consume(used);
                if !self.gathered.is_empty() {
                    return Ok(BodyFrame::Data(&self.gathered));
                }
            } else {
                let take = self
                    .body
                    .advance(inbuf.filled(), |_| {})
                    .map_err(|_| HttpError::BadRequestBody)?;
                self.given = take;
                return Ok(BodyFrame::Data(&inbuf.filled()[..take]));
            }
        }
    }

    /// Shows `each` the body data in `inbuf` that no frame gave yet, without taking it; `end`
    /// once the body ends within those bytes.
    pub fn received(&self, inbuf: &IoBuf, each: &mut BodyWatcher<'_>) -> Result<(), HttpError> {
        if self.body.is_done() {
            return Ok(());
        }
        let mut ahead = self.body.clone();
        let mut shown = Ok(());
        ahead
            .advance(&inbuf.filled()[self.given..], |data| {
                if shown.is_ok() && !data.is_empty() {
                    shown = each(data, false);
                }
            })
            .map_err(|_| HttpError::BadRequestBody)?;
        shown?;
        if ahead.is_done() {
            each(&[], true)?;
        }
        Ok(())
    }

    /// Whether body bytes wait in `inbuf` that no frame gave yet.
    pub fn waiting(&self, inbuf: &IoBuf) -> bool {
        !self.body.is_done() && inbuf.len() > self.given
    }
}
