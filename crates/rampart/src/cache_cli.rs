//! `rampart cache purge URL` and `rampart cache ban --prefix URL | --tag TAG`: a running Rampart's
//! HTTP cache emptied through its admin API (`POST /api/caches/{name}/purge` and `/ban`, see
//! docs/operations.md), over TCP or the admin's unix socket.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

/// What `rampart cache` does.
#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// Remove what requests for URL stored (`scheme://host/path?query`, every variant).
    Purge {
        #[arg(value_name = "URL")]
        url: String,
        #[command(flatten)]
        admin: AdminTarget,
    },
    /// Remove every stored response under URLs beginning with --prefix, or tagged --tag
    /// (`Cache-Tag` or `Surrogate-Key`).
    Ban {
        #[arg(long, value_name = "URL", required_unless_present = "tag", conflicts_with = "tag")]
        prefix: Option<String>,
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        #[command(flatten)]
        admin: AdminTarget,
    },
}

/// Which Rampart and which of its caches.
#[derive(Debug, Clone, Args)]
pub struct AdminTarget {
    /// The admin API of the running Rampart: ADDR:PORT, or unix:/PATH.
    #[arg(long, value_name = "ADDR:PORT")]
    admin: String,
    /// The cache, by its name in `[caches]`.
    #[arg(long = "cache", value_name = "NAME", default_value = "main")]
    cache: String,
    /// The admin API's bearer token, if it has one.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

/// Runs `rampart cache ...`: prints the admin API's answer (`{"cache","removed"}`); exit 1 with its
/// error when it refused.
pub fn run(action: &CacheAction) -> ExitCode {
    let (admin, path) = match action {
        CacheAction::Purge { url, admin } => (admin, format!("purge?url={}", encode(url))),
        CacheAction::Ban {
            prefix: Some(p), admin, ..
        } => (admin, format!("ban?prefix={}", encode(p))),
        CacheAction::Ban { tag, admin, .. } => (admin, format!("ban?tag={}", encode(tag.as_deref().unwrap_or("")))),
    };
    let target = format!("/api/caches/{}/{path}", encode(&admin.cache));
    match post(admin, &target) {
        Ok((200, body)) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!("rampart cache: the admin API answered {status}: {}", body.trim());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("rampart cache: {}: {e}", admin.admin);
            ExitCode::from(1)
        }
    }
}

/// `POST target` to the admin API: its status and body.
fn post(admin: &AdminTarget, target: &str) -> std::io::Result<(u16, String)> {
    let mut request = format!("POST {target} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n");
    if let Some(token) = &admin.token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    let mut answer = Vec::new();
    match admin.admin.strip_prefix("unix:") {
        Some(path) => {
            let mut s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.write_all(request.as_bytes())?;
            s.read_to_end(&mut answer)?;
        }
        None => {
            let mut s = std::net::TcpStream::connect(&admin.admin)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.write_all(request.as_bytes())?;
            s.read_to_end(&mut answer)?;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no HTTP answer"))?;
    Ok((status, body.to_string()))
}

/// `s` percent-encoded for a query value or a path segment (everything but unreserved octets).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls_are_percent_encoded_whole() {
        assert_eq!(
            super::encode("http://a.test/p?x=1&y"),
            "http%3A%2F%2Fa.test%2Fp%3Fx%3D1%26y"
        );
    }
}
