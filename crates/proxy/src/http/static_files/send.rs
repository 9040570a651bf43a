//! A static file's body on its way to the client. On HTTP/1 over plain TCP the kernel sends it
//! from the page cache with sendfile(2), never through user space; over TLS, HTTP/2, or when a
//! filter transforms the body, it is read in pieces (the size of a worker read buffer) and sent
//! as body bytes through the downstream seam. Either way at most one piece is in memory, whatever
//! the file's size.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::http::error::HttpError;

/// How long a client may take no bytes of a static file before the connection is given up
/// (nginx's `send_timeout` default). Each stall gets the whole time again.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// The most one sendfile call is asked to move (the socket takes what fits anyway).
const SENDFILE_CHUNK: u64 = 1 << 30;

/// Sends `len` bytes of `file` from `offset` to `tcp` with sendfile(2), counting what left in
/// `sent`. A client that takes nothing for [`SEND_TIMEOUT`] fails it. `Ok(false)`: the file's
/// file system cannot do sendfile, and nothing was sent (copy it instead).
pub async fn sendfile_all(
    tcp: &TcpStream,
    file: &File,
    mut offset: u64,
    len: u64,
    sent: &mut u64,
) -> Result<bool, HttpError> {
    let (start, end) = (offset, offset + len);
    while offset < end {
        let count = (end - offset).min(SENDFILE_CHUNK) as usize;
        match tcp.try_io(Interest::WRITABLE, || sendfile(tcp, file, &mut offset, count)) {
            // The file is shorter than when its length was announced.
            Ok(0) => return Err(HttpError::FileRead),
            Ok(n) => *sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(SEND_TIMEOUT, tcp.writable()).await {
                    Ok(Ok(())) => {}
                    _ => return Err(HttpError::ClientGone),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) => {
                if offset == start {
                    return Ok(false);
                }
                return Err(HttpError::FileRead);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EIO | libc::ENOMEM)) => return Err(HttpError::FileRead),
            Err(_) => return Err(HttpError::ClientGone),
        }
    }
    Ok(true)
}

/// One sendfile(2) call: moves up to `count` bytes of `file` from `*offset` into the socket and
/// advances `*offset` by what it moved.
fn sendfile(tcp: &TcpStream, file: &File, offset: &mut u64, count: usize) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: both descriptors are open for the call's duration, and `off` is a valid off_t the
    // kernel reads and updates.
    let n = unsafe { libc::sendfile(tcp.as_raw_fd(), file.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// `content` in a file that is open and already unlinked.
    fn open_file(name: &str, content: &[u8]) -> File {
        let path = std::env::temp_dir().join(format!("rampart-{name}-{}", std::process::id()));
        std::fs::write(&path, content).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }

    /// Runs `test` with a connected pair of loopback sockets (server side, client side) on a
    /// current-thread runtime, as a worker has.
    fn with_connected_pair<F: std::future::Future<Output = ()>>(test: impl FnOnce(TcpStream, TcpStream) -> F) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            test(server, client).await;
        });
    }

    #[test]
    fn sendfile_moves_a_file_range_byte_exact_through_a_socket() {
        let content: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let file = open_file("sendfile", &content);
        with_connected_pair(|server, client| async move {
            // More than the socket buffers hold: the sender must wait for the reader.
            let (offset, len) = (1000, (3 << 20) - 2000);
            let reader = async move {
                let mut client = client;
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            };
            let writer = async {
                let mut sent = 0;
                let done = sendfile_all(&server, &file, offset, len, &mut sent).await;
                drop(server);
                (done, sent)
            };
            let ((done, sent), got) = tokio::join!(writer, reader);
            assert_eq!(done, Ok(true));
            assert_eq!(sent, len);
            assert!(got == content[offset as usize..(offset + len) as usize], "bytes differ");
        });
    }

    #[test]
    fn a_file_shorter_than_announced_fails_the_send() {
        let file = open_file("sendfile-short", b"0123456789");
        with_connected_pair(|server, _client| async move {
            let mut sent = 0;
            assert_eq!(
                sendfile_all(&server, &file, 5, 100, &mut sent).await,
                Err(HttpError::FileRead)
            );
            assert_eq!(sent, 5);
        });
    }
}
