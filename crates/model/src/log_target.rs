//! Where a log's lines go (an access log's `path`, `session_log`): a file, standard output, a
//! syslog server (RFC 5424 over UDP, TCP or a unix socket), or OTLP logs. The config names each
//! by one string; the writer and the workers read it back with [`LogTarget::parse`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A log destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// A file (appended to), or standard output (`-`, `/dev/stdout`).
    File(PathBuf),
    Stdout,
    /// RFC 5424 messages, one per line: `syslog+udp://HOST:PORT` (one datagram each),
    /// `syslog+tcp://HOST:PORT` (octet-counted, RFC 6587), `syslog+unix:///dev/log` (datagrams).
    Syslog(SyslogAddr),
    /// OTLP log records, to the `[tracing]` collector.
    Otlp,
}

/// A syslog server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogAddr {
    Udp(SocketAddr),
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The string that names OTLP logs.
pub const OTLP_LOGS: &str = "otlp";

impl LogTarget {
    /// Reads a destination: `syslog+udp://IP:PORT`, `syslog+tcp://IP:PORT`,
    /// `syslog+unix:///PATH`, `otlp`, or else a file path (`-` and `/dev/stdout` being standard
    /// output). A syslog address is an IP address and a port (no name: the writer never waits
    /// on DNS).
    pub fn parse(text: &str) -> Result<LogTarget, String> {
        if text == OTLP_LOGS {
            return Ok(LogTarget::Otlp);
        }
        if let Some(rest) = text.strip_prefix("syslog+") {
            let (scheme, addr) = rest
                .split_once("://")
                .ok_or_else(|| format!("`{text}`: expected syslog+udp://, syslog+tcp:// or syslog+unix://"))?;
            let socket = || {
                addr.parse::<SocketAddr>()
                    .map_err(|_| format!("`{text}`: `{addr}` is not IP:PORT"))
            };
            return match scheme {
                "udp" => Ok(LogTarget::Syslog(SyslogAddr::Udp(socket()?))),
                "tcp" => Ok(LogTarget::Syslog(SyslogAddr::Tcp(socket()?))),
                "unix" if addr.starts_with('/') => Ok(LogTarget::Syslog(SyslogAddr::Unix(addr.into()))),
                "unix" => Err(format!("`{text}`: a unix socket's path must be absolute")),
                other => Err(format!(
                    "`{text}`: unknown syslog transport `{other}` (udp, tcp or unix)"
                )),
            };
        }
        if crate::is_stdout_path(Path::new(text)) {
            return Ok(LogTarget::Stdout);
        }
        Ok(LogTarget::File(text.into()))
    }

    /// Whether `path` (as the snapshot holds a destination) names OTLP logs.
    pub fn is_otlp(path: &Path) -> bool {
        path.as_os_str() == OTLP_LOGS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_read_as_written() {
        assert_eq!(LogTarget::parse("otlp"), Ok(LogTarget::Otlp));
        assert_eq!(LogTarget::parse("-"), Ok(LogTarget::Stdout));
        assert_eq!(
            LogTarget::parse("/var/log/a.log"),
            Ok(LogTarget::File("/var/log/a.log".into()))
        );
        assert_eq!(
            LogTarget::parse("syslog+udp://127.0.0.1:514"),
            Ok(LogTarget::Syslog(SyslogAddr::Udp("127.0.0.1:514".parse().unwrap())))
        );
        assert_eq!(
            LogTarget::parse("syslog+tcp://[::1]:601"),
            Ok(LogTarget::Syslog(SyslogAddr::Tcp("[::1]:601".parse().unwrap())))
        );
        assert_eq!(
            LogTarget::parse("syslog+unix:///dev/log"),
            Ok(LogTarget::Syslog(SyslogAddr::Unix("/dev/log".into())))
        );
        for bad in [
            "syslog+udp://localhost:514",
            "syslog+tls://1.2.3.4:6514",
            "syslog+unix://dev/log",
            "syslog+udp:1",
        ] {
            assert!(LogTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
