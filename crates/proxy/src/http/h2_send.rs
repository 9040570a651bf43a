//! DATA out on an HTTP/2 stream, in either role (to a client, to an upstream): frames go as the
//! peer's window opens, and a window that stays shut fails the stream.

use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;

use super::error::HttpError;

/// Sends `bytes` as DATA as the peer's window opens, each wait at most `limit` (a window that
/// stays shut fails the stream). `end` closes the stream with the last frame.
pub(crate) async fn write_data(
    send: &mut SendStream<Bytes>,
    bytes: &[u8],
    end: bool,
    limit: Duration,
    sent: &mut u64,
) -> Result<(), HttpError> {
    write_bytes(send, Bytes::copy_from_slice(bytes), end, limit, sent).await
}

/// [`write_data`] for bytes that are shared already (DATA from another HTTP/2 stream): each frame
/// is a slice of them, nothing is copied.
pub(crate) async fn write_bytes(
    send: &mut SendStream<Bytes>,
    mut rest: Bytes,
    end: bool,
    limit: Duration,
    sent: &mut u64,
) -> Result<(), HttpError> {
    if rest.is_empty() {
        if end {
            send.send_data(Bytes::new(), true).map_err(|_| HttpError::ClientGone)?;
        }
        return Ok(());
    }
    while !rest.is_empty() {
        send.reserve_capacity(rest.len());
        let capacity = std::future::poll_fn(|cx| send.poll_capacity(cx));
        let n = match tokio::time::timeout(limit, capacity).await {
            Ok(Some(Ok(n))) => n.min(rest.len()),
            Ok(_) => return Err(HttpError::ClientGone),
            Err(_) => {
                tracing::debug!("HTTP/2 stream stalled: the client's window stayed shut");
                return Err(HttpError::ClientGone);
            }
        };
        if n == 0 {
            continue;
        }
        let last = end && n == rest.len();
        send.send_data(rest.split_to(n), last)
            .map_err(|_| HttpError::ClientGone)?;
        *sent += n as u64;
    }
    Ok(())
}
