//! A response on its way into the store, shared with the requests that wait for it (coalesced
//! misses): its head as it will be stored, and its body as far as it has come. The leader appends
//! what arrives ([`Growing::push`]) and says how it ended ([`Growing::finish`]); each waiter reads
//! from where it is ([`Growing::read`]), waiting for more, so it is answered as the response
//! arrives rather than once it is whole. Only a response whose length is known and fits the store
//! is shared so.

use std::future::poll_fn;
// One lock per shared response, taken to append a piece and to copy one out: the waiters are
// coalesced misses, and the lock is held for a copy.
#[allow(clippy::disallowed_types)]
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use crate::entry::Entry;
use crate::lock;

struct State {
    body: Vec<u8>,
    /// `Some(true)`: whole; `Some(false)`: it will never be (the upstream failed, the leader's
    /// client left).
    end: Option<bool>,
    wakers: Vec<Waker>,
}

/// See the module's documentation.
pub struct Growing {
    head: Arc<Entry>,
    length: usize,
    #[allow(clippy::disallowed_types)]
    state: Mutex<State>,
}

/// What a read found.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// More body (appended to the caller's buffer).
    Data,
    /// The body is whole, and all of it was read.
    End,
    /// The body will not be whole: what was read is all there is.
    Failed,
}

impl Growing {
    /// The response `head` (stored fields and freshness; its body empty) of `length` body bytes,
    /// of which `so_far` have come.
    pub fn new(head: Arc<Entry>, length: usize, so_far: &[u8]) -> Self {
        // Grown as the body comes past 1 MiB: a length only claimed reserves no more.
        let mut body = Vec::with_capacity(length.min(1 << 20));
        body.extend_from_slice(&so_far[..so_far.len().min(length)]);
        Growing {
            head,
            length,
            #[allow(clippy::disallowed_types)]
            state: Mutex::new(State {
                body,
                end: None,
                wakers: Vec::new(),
            }),
        }
    }

    pub fn head(&self) -> &Arc<Entry> {
        &self.head
    }

    pub fn length(&self) -> usize {
        self.length
    }

    /// More of the body came.
    pub fn push(&self, data: &[u8]) {
        let mut state = lock(&self.state);
        let room = self.length - state.body.len();
        state.body.extend_from_slice(&data[..data.len().min(room)]);
        wake(&mut state);
    }

    /// The body is whole (`true`) or never will be.
    pub fn finish(&self, whole: bool) {
        let mut state = lock(&self.state);
        if state.end.is_none() {
            state.end = Some(whole && state.body.len() == self.length);
            wake(&mut state);
        }
    }

    /// Appends to `out` the body from octet `from` on, as much as has come, waiting until some
    /// has or the body ended.
    pub async fn read(&self, from: usize, out: &mut Vec<u8>) -> Read {
        poll_fn(|cx| {
            let mut state = lock(&self.state);
            if state.body.len() > from {
                out.extend_from_slice(&state.body[from..]);
                return Poll::Ready(Read::Data);
            }
            match state.end {
                Some(true) => Poll::Ready(Read::End),
                Some(false) => Poll::Ready(Read::Failed),
                None => {
                    state.wakers.push(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

fn wake(state: &mut State) {
    for waker in std::mem::take(&mut state.wakers) {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::Context;
    use std::time::{Duration, UNIX_EPOCH};

    use bytes::Bytes;

    use crate::policy::control::Directives;

    fn head() -> Arc<Entry> {
        let fields: &[(&[u8], &[u8])] = &[(b"cache-control", b"max-age=60")];
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let entry = Entry::new(
            &[][..],
            200,
            fields.iter().copied(),
            Directives::of(fields),
            Bytes::new(),
            (at, at),
            Duration::ZERO,
        );
        Arc::new(entry.unwrap())
    }

    #[test]
    fn a_reader_gets_each_piece_as_it_comes_then_the_end() {
        let growing = Growing::new(head(), 6, b"ab");
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        assert_eq!(
            pin!(growing.read(0, &mut out)).as_mut().poll(&mut cx),
            Poll::Ready(Read::Data)
        );
        assert_eq!(out, b"ab");
        {
            let mut waiting = pin!(growing.read(2, &mut out));
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            growing.push(b"cdef");
            assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(Read::Data));
        }
        assert_eq!(out, b"abcdef");
        let mut waiting = pin!(growing.read(6, &mut out));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        growing.finish(true);
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(Read::End));
    }

    #[test]
    fn a_body_that_stops_short_fails_its_readers() {
        let growing = Growing::new(head(), 6, b"abc");
        growing.finish(true); // claimed whole, but 3 of 6 octets came
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        assert_eq!(
            pin!(growing.read(3, &mut out)).as_mut().poll(&mut cx),
            Poll::Ready(Read::Failed)
        );
        // More than the length never goes out.
        let long = Growing::new(head(), 2, b"abcdef");
        long.push(b"gh");
        assert_eq!(
            pin!(long.read(0, &mut out)).as_mut().poll(&mut cx),
            Poll::Ready(Read::Data)
        );
        assert_eq!(out, b"ab");
    }
}
