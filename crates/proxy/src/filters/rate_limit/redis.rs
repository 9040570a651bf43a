//! A worker's connection to the Redis of GLOBAL rate limits: takes of tokens queued by requests,
//! written together (pipelined) and answered in order.
//!
//! One task per [`RedisClient`] (spawned on the worker's `LocalSet`) owns the connection. A
//! request queues its take and waits; the task wakes, takes everything queued, writes it as one
//! batch of `EVALSHA` commands, reads the replies and hands each to its waiter. Takes queued while
//! a batch is on the wire go out in the next one, so a request waits on Redis at most one batch
//! (plus the one ahead of it).
//!
//! The connection is made on the first take: `AUTH` and `SELECT` when the address asks, then
//! `SCRIPT LOAD` of [`GCRA_TAKE_SCRIPT`]. A failure (connect, I/O, a reply that makes no sense)
//! drops the connection and fails the batch; the client is then *down* for a backoff (100 ms,
//! doubling to 5 s) during which takes fail at once, without waiting, and the next take after it
//! tries again. An outage is logged once when it starts and once when it ends (per worker). The
//! task ends when the client is dropped (a reload that removes the filter).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rampart_model::filter::rate_limit::{RedisArgs, RedisEndpoint, GCRA_TAKE_SCRIPT};
use rampart_proto::resp::{
    encode_array_header, encode_bulk, encode_bulk_int, encode_command, parse_reply, Reply, RespLimits,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::time::{timeout, Instant};

/// The time a connection (with its `AUTH`, `SELECT` and `SCRIPT LOAD`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The time a batch's replies may take before the connection is given up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Replies of rate-limit takes are a few dozen bytes.
const LIMITS: RespLimits = RespLimits {
    max_line_len: 4096,
    max_bulk_len: 4096,
    max_array_len: 16,
};

/// What a take got: the fields of the script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeReply {
    pub granted: u64,
    pub retry_after_us: u64,
    pub reset_after_us: u64,
    pub remaining: u64,
}

/// Why a take got no answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RedisError {
    #[error("Redis is down (since the last failure, retrying after a pause)")]
    Down,
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("{0}")]
    Io(String),
    #[error("Redis answered an error: {0}")]
    Server(String),
    #[error("Redis answered something that is no take reply")]
    BadReply,
    #[error("the connection task stopped")]
    Gone,
}

/// One queued take.
struct Call {
    key: Vec<u8>,
    args: RedisArgs,
    wanted: u64,
    reply: oneshot::Sender<Result<TakeReply, RedisError>>,
}

#[derive(Default)]
struct Queue {
    calls: Vec<Call>,
    /// Takes fail at once until then (after a failure).
    down_until: Option<Instant>,
    /// The client was dropped: the task ends.
    closed: bool,
}

/// The client side: queue takes, await replies.
pub struct RedisClient {
    queue: Rc<RefCell<Queue>>,
    wake: Rc<Notify>,
}

impl RedisClient {
    /// A client of `endpoint`; its task starts now (inside the worker's `LocalSet`), and connects
    /// on the first take.
    pub fn start(endpoint: RedisEndpoint) -> RedisClient {
        let queue = Rc::new(RefCell::new(Queue::default()));
        let wake = Rc::new(Notify::new());
        tokio::task::spawn_local(run(endpoint, queue.clone(), wake.clone()));
        RedisClient { queue, wake }
    }

    /// Takes up to `wanted` tokens from the bucket at `key`. Fails at once while the client is
    /// down; the caller bounds the wait.
    pub async fn take(&self, key: Vec<u8>, args: RedisArgs, wanted: u64) -> Result<TakeReply, RedisError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut q = self.queue.borrow_mut();
            if q.down_until.is_some_and(|until| Instant::now() < until) {
                return Err(RedisError::Down);
            }
            q.calls.push(Call {
                key,
                args,
                wanted,
                reply,
            });
        }
        self.wake.notify_one();
        answer.await.unwrap_or(Err(RedisError::Gone))
    }
}

impl Drop for RedisClient {
    fn drop(&mut self) {
        self.queue.borrow_mut().closed = true;
        self.wake.notify_one();
    }
}

/// An open connection, and the script's digest there.
struct Connection {
    stream: TcpStream,
    sha: Vec<u8>,
    buf: Vec<u8>,
}

async fn run(endpoint: RedisEndpoint, queue: Rc<RefCell<Queue>>, wake: Rc<Notify>) {
    let mut conn: Option<Connection> = None;
    let mut backoff = FIRST_BACKOFF;
    let mut failures: u64 = 0;
    let mut out = Vec::new();
    loop {
        let batch = {
            let mut q = queue.borrow_mut();
            if q.closed {
                return;
            }
            std::mem::take(&mut q.calls)
        };
        if batch.is_empty() {
            wake.notified().await;
            continue;
        }
        let result = match conn.as_mut() {
            Some(c) => exchange(c, &batch, &mut out).await,
            None => match timeout(CONNECT_TIMEOUT, connect(&endpoint)).await {
                Ok(Ok(mut c)) => {
                    let r = exchange(&mut c, &batch, &mut out).await;
                    conn = Some(c);
                    r
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(RedisError::Connect(format!("no answer within {CONNECT_TIMEOUT:?}"))),
            },
        };
        match result {
            Ok(replies) => {
                if failures > 0 {
                    tracing::info!(redis = %endpoint, failures, "rate_limit: Redis at {endpoint} answers again after {failures} failed attempt(s)");
                    failures = 0;
                    backoff = FIRST_BACKOFF;
                }
                for (call, reply) in batch.into_iter().zip(replies) {
                    let _ = call.reply.send(reply);
                }
            }
            Err(e) => {
                conn = None;
                failures += 1;
                if failures == 1 {
                    tracing::warn!(redis = %endpoint, "rate_limit: Redis at {endpoint} failed: {e}; global limits use their on_redis_error mode until it answers");
                }
                queue.borrow_mut().down_until = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                for call in batch {
                    let _ = call.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Connects, authenticates, selects the database and loads the script.
async fn connect(endpoint: &RedisEndpoint) -> Result<Connection, RedisError> {
    let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| RedisError::Connect(e.to_string()))?;
    let _ = stream.set_nodelay(true);
    let mut conn = Connection {
        stream,
        sha: Vec::new(),
        buf: Vec::with_capacity(4096),
    };
    for (name, command) in endpoint.setup_commands() {
        expect_ok(&mut conn, &command, name).await?;
    }
    let mut out = Vec::new();
    encode_command(&mut out, &[b"SCRIPT", b"LOAD", GCRA_TAKE_SCRIPT.as_bytes()]);
    conn.stream.write_all(&out).await.map_err(io)?;
    conn.sha = read_reply(&mut conn, |r| match r {
        Reply::Bulk(Some(sha)) if sha.len() == 40 => Ok(sha.to_vec()),
        Reply::Error(e) => Err(RedisError::Server(format!(
            "SCRIPT LOAD: {}",
            String::from_utf8_lossy(e)
        ))),
        _ => Err(RedisError::BadReply),
    })
    .await?;
    Ok(conn)
}

/// Sends `command` and expects `+OK`.
async fn expect_ok(conn: &mut Connection, command: &[u8], what: &str) -> Result<(), RedisError> {
    conn.stream.write_all(command).await.map_err(io)?;
    read_reply(conn, |r| match r {
        Reply::Simple(b"OK") => Ok(()),
        // Never the command's arguments: AUTH carries the password.
        Reply::Error(e) => Err(RedisError::Server(format!("{what}: {}", String::from_utf8_lossy(e)))),
        _ => Err(RedisError::BadReply),
    })
    .await
}

/// Writes the batch's takes at once and reads one reply per take. `Err` only when the
/// connection is beyond use; a take the server refused gets its own error.
async fn exchange(
    conn: &mut Connection,
    batch: &[Call],
    out: &mut Vec<u8>,
) -> Result<Vec<Result<TakeReply, RedisError>>, RedisError> {
    out.clear();
    for call in batch {
        encode_array_header(out, 7);
        encode_bulk(out, b"EVALSHA");
        encode_bulk(out, &conn.sha);
        encode_bulk_int(out, 1);
        encode_bulk(out, &call.key);
        encode_bulk_int(out, call.args.interval_us as i64);
        encode_bulk_int(out, call.args.tolerance_us as i64);
        encode_bulk_int(out, call.wanted.min(i64::MAX as u64) as i64);
    }
    conn.stream.write_all(out).await.map_err(io)?;
    let mut replies = Vec::with_capacity(batch.len());
    for _ in batch {
        replies.push(read_reply(conn, take_reply).await?);
    }
    Ok(replies)
}

/// The script's `{granted, retry_after_us, reset_after_us, remaining}`, or the server's error.
/// The outer `Result` is the connection's: a well-formed error reply leaves it usable.
fn take_reply(reply: &Reply<'_>) -> Result<Result<TakeReply, RedisError>, RedisError> {
    if let Reply::Error(e) = reply {
        let message = String::from_utf8_lossy(e).into_owned();
        // The script is gone (the server restarted or flushed it): start over with a new
        // connection, which loads it again.
        if message.starts_with("NOSCRIPT") {
            return Err(RedisError::Server(message));
        }
        return Ok(Err(RedisError::Server(message)));
    }
    let fields = reply.as_array().ok_or(RedisError::BadReply)?;
    let number = |i: usize| {
        fields
            .get(i)
            .and_then(Reply::as_integer)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or(RedisError::BadReply)
    };
    Ok(Ok(TakeReply {
        granted: number(0)?,
        retry_after_us: number(1)?,
        reset_after_us: number(2)?,
        remaining: number(3)?,
    }))
}

/// Reads one reply and hands it to `read`.
async fn read_reply<T>(
    conn: &mut Connection,
    read: impl Fn(&Reply<'_>) -> Result<T, RedisError>,
) -> Result<T, RedisError> {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        if let Some((reply, used)) = parse_reply(&conn.buf, &LIMITS).map_err(|_| RedisError::BadReply)? {
            let value = read(&reply);
            conn.buf.drain(..used);
            return value;
        }
        if conn.buf.len() >= 64 * 1024 {
            return Err(RedisError::BadReply);
        }
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout_at(deadline, conn.stream.read(&mut chunk)).await {
            Ok(r) => r.map_err(io)?,
            Err(_) => return Err(RedisError::Io(format!("no reply within {REPLY_TIMEOUT:?}"))),
        };
        if n == 0 {
            return Err(RedisError::Io("connection closed by Redis".into()));
        }
        conn.buf.extend_from_slice(&chunk[..n]);
    }
}

fn io(e: std::io::Error) -> RedisError {
    RedisError::Io(e.to_string())
}
