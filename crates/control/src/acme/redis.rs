//! The few Redis commands a fleet's shared ACME store needs, over one connection made on
//! demand (`AUTH` and `SELECT` as the address asks) and dropped on any failure. RESP is read by
//! the sans-IO codec in `rampart_proto::resp`.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rampart_model::filter::rate_limit::RedisEndpoint;
use rampart_proto::resp::{encode_command, parse_reply, Reply, RespLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time for one command's round trip (or a connection with its `AUTH` and `SELECT`).
const TIMEOUT: Duration = Duration::from_secs(3);
/// Certificates, keys and account credentials are a few KiB.
const LIMITS: RespLimits = RespLimits {
    max_line_len: 4096,
    max_bulk_len: 1 << 20,
    max_array_len: 1 << 16,
};

/// A reply, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ok,
    Integer(i64),
    Bytes(Option<Vec<u8>>),
    List(Vec<Answer>),
}

pub struct Redis {
    endpoint: RedisEndpoint,
    conn: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Redis {
    pub fn new(endpoint: RedisEndpoint) -> Redis {
        Redis {
            endpoint,
            conn: None,
            buf: Vec::new(),
        }
    }

    /// Runs one command; a failure drops the connection (the next command makes a new one).
    pub async fn run(&mut self, args: &[&[u8]]) -> anyhow::Result<Answer> {
        let result = tokio::time::timeout(TIMEOUT, self.round_trip(args)).await;
        let answer = match result {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(anyhow!("no answer within {TIMEOUT:?}")),
        };
        if answer.is_err() {
            self.conn = None;
        }
        answer.with_context(|| format!("Redis at {}:{}", self.endpoint.host, self.endpoint.port))
    }

    async fn round_trip(&mut self, args: &[&[u8]]) -> anyhow::Result<anyhow::Result<Answer>> {
        if self.conn.is_none() {
            self.connect().await?;
        }
        let mut out = Vec::new();
        encode_command(&mut out, args);
        Ok(self.exchange(&out).await)
    }

    async fn connect(&mut self) -> anyhow::Result<()> {
        let stream = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port)).await?;
        let _ = stream.set_nodelay(true);
        self.conn = Some(stream);
        self.buf.clear();
        for (name, command) in self.endpoint.setup_commands() {
            self.exchange(&command).await.context(name)?;
        }
        Ok(())
    }

    /// Writes `command` and reads its reply.
    async fn exchange(&mut self, command: &[u8]) -> anyhow::Result<Answer> {
        let conn = self.conn.as_mut().ok_or_else(|| anyhow!("not connected"))?;
        conn.write_all(command).await?;
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf, &LIMITS)? {
                let answer = owned(&reply);
                self.buf.drain(..used);
                return answer;
            }
            let mut chunk = [0u8; 8192];
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                bail!("the connection closed");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn owned(reply: &Reply<'_>) -> anyhow::Result<Answer> {
    Ok(match reply {
        Reply::Simple(_) => Answer::Ok,
        Reply::Error(e) => bail!("{}", String::from_utf8_lossy(e)),
        Reply::Integer(n) => Answer::Integer(*n),
        Reply::Bulk(b) => Answer::Bytes(b.map(<[u8]>::to_vec)),
        Reply::Array(None) => Answer::List(Vec::new()),
        Reply::Array(Some(items)) => Answer::List(items.iter().map(owned).collect::<anyhow::Result<_>>()?),
    })
}
