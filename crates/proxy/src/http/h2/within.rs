//! A timeout that costs nothing when it is not needed: most waits on an HTTP/2 stream (DATA that
//! came with the head, a window that is open) are over at once, and `tokio::time::timeout` reads
//! the clock and makes a timer entry for each of them.

use std::future::{poll_fn, Future};
use std::task::Poll;
use std::time::Duration;

/// `fut`'s output if it is ready at once or within `limit`; `None` when `limit` passed first.
/// The first poll happens before any timer exists.
pub(crate) async fn within<F: Future>(limit: Duration, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    if let Poll::Ready(out) = poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        return Some(out);
    }
    tokio::time::timeout(limit, fut).await.ok()
}
