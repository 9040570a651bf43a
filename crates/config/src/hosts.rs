//! The zero-config `hosts` file: one `host:port` (or `dns+NAME:PORT`, `srv+NAME`) per line;
//! blank lines and `#` comments allowed.

use std::net::SocketAddr;

use rampart_model::discovery::Query;

use crate::compile::resolve;
use crate::error::{ConfigError, ConfigErrors};

/// Parses a hosts file's text: the targets as written, addresses resolved once (checked here),
/// names to follow (`dns+`, `srv+`) checked. Every bad line is reported with its line and
/// column; a file with no targets at all is an error too.
pub fn parse_hosts(file: &str, src: &str) -> Result<Vec<String>, ConfigErrors> {
    let mut targets: Vec<String> = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let mut queries: Vec<Query> = Vec::new();
    let mut errors = Vec::new();
    let error = |line: usize, col: usize, message: String| ConfigError {
        file: file.to_string(),
        line,
        col,
        message,
    };
    for (i, raw_line) in src.lines().enumerate() {
        let content = raw_line.split('#').next().unwrap_or("");
        let entry = content.trim();
        if entry.is_empty() {
            continue;
        }
        let col = content.len() - content.trim_start().len() + 1;
        if entry.split_whitespace().count() > 1 {
            errors.push(error(
                i + 1,
                col,
                format!("expected one host:port per line, found `{entry}`"),
            ));
            continue;
        }
        if let Some(query) = Query::parse(entry) {
            match query {
                Ok(q) if queries.contains(&q) => errors.push(error(i + 1, col, format!("`{entry}` is listed twice"))),
                Ok(q) => {
                    queries.push(q);
                    targets.push(entry.to_string());
                }
                Err(e) => errors.push(error(i + 1, col, e)),
            }
            continue;
        }
        match resolve(entry) {
            Ok(addr) if addrs.contains(&addr) => {
                errors.push(error(i + 1, col, format!("`{entry}` is listed twice")));
            }
            Ok(addr) => {
                addrs.push(addr);
                targets.push(entry.to_string());
            }
            Err(e) => errors.push(error(i + 1, col, e)),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    if targets.is_empty() {
        return Err(ConfigErrors(vec![error(
            1,
            1,
            "no targets: add one host:port per line".to_string(),
        )]));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blanks_and_names() {
        let t = parse_hosts(
            "hosts",
            "# backends\n\n127.0.0.1:9001\n  localhost:9002  # second\ndns+api.internal:80\nsrv+_http._tcp.x\n",
        )
        .unwrap();
        assert_eq!(
            t,
            [
                "127.0.0.1:9001",
                "localhost:9002",
                "dns+api.internal:80",
                "srv+_http._tcp.x"
            ]
        );
    }

    #[test]
    fn bad_lines_are_reported_with_place() {
        let e = parse_hosts(
            "hosts",
            "127.0.0.1:1\n  127.0.0.1\n127.0.0.1:99999\na b\n127.0.0.1:1\ndns+api:80\ndns+API.:80\ndns+api\n",
        )
        .unwrap_err();
        let lines: Vec<String> = e.0.iter().map(|e| e.to_string()).collect();
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert_eq!(lines[4], "hosts:7:1: `dns+API.:80` is listed twice");
        assert_eq!(lines[5], "hosts:8:1: `dns+api` has no port: write dns+NAME:PORT");
        assert!(
            lines[0].starts_with("hosts:2:3: `127.0.0.1` is not host:port"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("hosts:3:1: `127.0.0.1:99999` has no valid port"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("hosts:4:1: expected one host:port per line"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("hosts:5:1: `127.0.0.1:1` is listed twice"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn empty_file_is_an_error() {
        let e = parse_hosts("hosts", "# nothing\n\n").unwrap_err();
        assert_eq!(e.to_string(), "hosts:1:1: no targets: add one host:port per line");
    }
}
