//! The request body kept for a retry and for a mirror's copy (`retry_max_body_size`): as the
//! first attempt sends the client's body on, its bytes are copied aside, up to the limit; a
//! later attempt sends the copy first and then reads on from the client (keeping what it reads),
//! so a body whose sending failed half way is sent whole to the next target. A body past the
//! limit, one with trailers, or one that went to an HTTP/2 stream on its own (full duplex) is
//! not kept: its request is not retried, and its mirror's copy fails.

use rampart_proto::message::{BodyLength, FieldsRef};

use super::ProxyRequest;
use crate::http::downstream::{BodyFrame, Downstream};
use crate::http::error::HttpError;

/// A request body's bytes as far as the client sent them, kept for a retry or a mirror.
pub(super) struct KeptBody {
    data: Vec<u8>,
    max: usize,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing to keep: no body, or its request is not retried.
    Off,
    /// Kept so far; more may come from the client.
    Keeping,
    /// Kept whole, to its end.
    Ended,
    /// Past the limit (or with trailers, or pumped away): the request is not retried.
    Lost,
}

impl KeptBody {
    /// Keeps the body of a request that a retry could send again (one with a body and retries
    /// left, idempotent or `retry_on` names `non-idempotent`) or that a mirror copies, when its
    /// length (if known) is within the upstream's `retry_max_body_size`.
    pub(super) fn new(req: &ProxyRequest<'_>) -> KeptBody {
        let max = req.upstream().http.retry_body_max;
        let fits = match req.body {
            // Most requests: nothing to look at.
            BodyLength::None => return KeptBody::off(),
            BodyLength::Exact(n) => n <= max as u64,
            BodyLength::Unknown => true,
        };
        let retried = req.retries > 0 && (req.idempotent || req.retry_on.non_idempotent);
        let keep = fits && max > 0 && (retried || req.mirror.is_some()) && !req.upgrade;
        KeptBody {
            data: Vec::new(),
            max,
            state: if keep { State::Keeping } else { State::Off },
        }
    }

    fn off() -> KeptBody {
        KeptBody {
            data: Vec::new(),
            max: 0,
            state: State::Off,
        }
    }

    /// Whether the body (if any) can be sent again, as far as it has been read (once it is sent
    /// whole, for good).
    pub(super) fn replayable(&self, req: &ProxyRequest<'_>) -> bool {
        req.body == BodyLength::None || matches!(self.state, State::Keeping | State::Ended)
    }

    /// The whole body, when it was kept to its end.
    pub(super) fn whole(&self) -> Option<&[u8]> {
        (self.state == State::Ended).then_some(&self.data[..])
    }

    /// The body goes to an HTTP/2 stream on its own: it is not kept.
    pub(super) fn lose(&mut self) {
        if self.state != State::Off {
            self.state = State::Lost;
            self.data = Vec::new();
        }
    }

    /// The next piece of the body for an attempt that has sent `at` bytes of it: what is kept
    /// past `at`, then the client's next frame (kept as it passes).
    pub(super) async fn frame<'a, D: Downstream>(
        &'a mut self,
        down: &'a mut D,
        at: &mut usize,
    ) -> Result<BodyFrame<'a>, HttpError> {
        if matches!(self.state, State::Keeping | State::Ended) && *at < self.data.len() {
            let rest = &self.data[*at..];
            *at = self.data.len();
            return Ok(BodyFrame::Data(rest));
        }
        if self.state == State::Ended {
            return Ok(BodyFrame::End(FieldsRef::Pairs(&[])));
        }
        let frame = down.body_frame().await?;
        if self.state == State::Keeping {
            match frame {
                BodyFrame::End(trailers) if trailers.is_empty() => self.state = State::Ended,
                BodyFrame::End(_) => self.lose(),
                _ => {
                    let data = frame.data().unwrap_or_default();
                    if self.data.len() + data.len() > self.max {
                        self.lose();
                    } else {
                        self.data.extend_from_slice(data);
                        *at = self.data.len();
                    }
                }
            }
        }
        Ok(frame)
    }
}
