//! The command line's one-listener modes (`rampart PORT`, `rampart tcp`, `rampart http`): what
//! they say is written as the config file it stands for and goes through the same compiler.
//! Errors found in that text are said in the command line's own terms: the flag and its value
//! (`--tls-key site.key: ...`), never a place in a file nobody wrote.

use std::net::SocketAddr;
use std::ops::Range;

use rampart_model::balance::BalancePolicy;

use super::{compile_toml, tcp, Compiled, LiveState};
use crate::error::{ConfigError, ConfigErrors};

/// The command line's single-listener setup (`rampart PORT`, `rampart tcp`, `rampart http`).
#[derive(Debug, Clone)]
pub struct SimpleL4 {
    /// Speak HTTP (`rampart http`) rather than relay TCP.
    pub http: bool,
    /// `rampart udp`: a UDP listener.
    pub udp: bool,
    pub bind: SocketAddr,
    /// Targets as written: `host:port`, `dns+NAME:PORT` or `srv+NAME` (checked when compiled).
    pub targets: Vec<String>,
    pub policy: BalancePolicy,
    pub session_log: Option<std::path::PathBuf>,
    /// Certificate chains and keys to terminate TLS with (`--tls-cert`/`--tls-key` pairs).
    pub tls: Vec<(std::path::PathBuf, std::path::PathBuf)>,
    /// HTTP only: the access log file and its format (`json` or `combined`).
    pub access_log: Option<(std::path::PathBuf, String)>,
    /// HTTP only: the upstream's `protocol` (`http1`, `h2c`, `h2`, `auto`), when not the default.
    pub upstream_protocol: Option<String>,
    /// `--http3`: HTTP/3 on the listener's port over UDP.
    pub http3: bool,
    /// TCP only: TLS passed through by SNI, `(name or *.wildcard, HOST:PORT)` in order; the
    /// targets above are then the default for other connections (none: they are closed).
    pub sni: Vec<(String, String)>,
    /// HTTP only: certificates from an ACME CA (`--acme-domain` and its companions).
    pub acme: Option<SimpleAcme>,
    /// `--otlp-endpoint` and its companions: `[tracing]`.
    pub tracing: Option<SimpleTracing>,
}

/// `rampart http --otlp-endpoint URL ...`.
#[derive(Debug, Clone)]
pub struct SimpleTracing {
    pub endpoint: String,
    /// `http` or `grpc`.
    pub protocol: String,
    pub sampling: f64,
}

/// `rampart http --acme-domain NAME ...`.
#[derive(Debug, Clone, Default)]
pub struct SimpleAcme {
    pub domains: Vec<String>,
    pub email: Option<String>,
    pub directory: Option<String>,
    pub ca: Option<std::path::PathBuf>,
    pub storage: Option<std::path::PathBuf>,
    /// The plain HTTP listener that answers HTTP-01 and redirects to HTTPS (`None`: none, and
    /// TLS-ALPN-01 validates).
    pub http: Option<SocketAddr>,
}

/// Compiles a [`SimpleL4`] with every other setting at its default. In HTTP mode every request
/// is proxied to the targets. It goes through the same compiler as a config file (as the config
/// file its settings would make; relative certificate paths are relative to the working
/// directory). An error names the flag and value it is about.
pub fn simple_l4(spec: &SimpleL4, live: &mut LiveState) -> Result<Compiled, ConfigErrors> {
    let (text, flags) = spec.to_toml_with_flags();
    compile_toml("command line", &text, live)
        .map_err(|errors| ConfigErrors(errors.0.into_iter().map(|e| in_flag_terms(e, &text, &flags)).collect()))
}

/// A value of the generated text and the flag that gave it.
struct FlagSpan {
    span: Range<usize>,
    /// The flag and its value as typed (`--tls-key site.key`).
    flag: String,
    /// The value alone.
    value: String,
}

/// `error`, at a place in `text`, said as the flag that place came from.
fn in_flag_terms(error: ConfigError, text: &str, flags: &[FlagSpan]) -> ConfigError {
    let offset = offset_of(text, error.line, error.col);
    let Some(flag) = flags.iter().find(|f| f.span.contains(&offset)) else {
        return ConfigError::without_place("the command line", error.message);
    };
    // `site.key: cannot read` under `--tls-key site.key` says the value once.
    let message = match error.message.strip_prefix(flag.value.as_str()) {
        Some(rest) if rest.starts_with(": ") => rest[2..].to_string(),
        _ => error.message,
    };
    ConfigError::without_place(flag.flag.clone(), message)
}

/// The byte offset of a 1-based line and character column.
fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let rest = &text[start.min(text.len())..];
    start
        + rest
            .char_indices()
            .nth(col.saturating_sub(1))
            .map_or(rest.len(), |(i, _)| i)
}

/// The generated text, and where each flag's value sits in it.
#[derive(Default)]
struct Writer {
    text: String,
    flags: Vec<FlagSpan>,
}

impl Writer {
    fn push(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// `value` as a TOML string, recorded as the value of `flag`.
    fn value(&mut self, flag: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(&toml_string(value));
        self.flags.push(FlagSpan {
            span: start..self.text.len(),
            flag: format!("{flag} {value}"),
            value: value.to_string(),
        });
    }
}

impl SimpleL4 {
    /// The config file these settings stand for.
    pub fn to_toml(&self) -> String {
        self.to_toml_with_flags().0
    }

    fn to_toml_with_flags(&self) -> (String, Vec<FlagSpan>) {
        let mut w = Writer::default();
        if let Some(acme) = &self.acme {
            acme.write_table(&mut w);
        }
        if let Some(t) = &self.tracing {
            w.push("[tracing]\nendpoint = ");
            w.value("--otlp-endpoint", &t.endpoint);
            w.push("\nprotocol = ");
            w.value("--otlp-protocol", &t.protocol);
            w.push("\nsampling = ");
            let at = w.text.len();
            w.push(&format!("{:?}", t.sampling));
            w.flags.push(FlagSpan {
                span: at..w.text.len(),
                flag: "--trace-sampling".to_string(),
                value: t.sampling.to_string(),
            });
            w.push("\n\n");
        }
        if let Some(path) = &self.session_log {
            w.push("[global]\nsession_log = ");
            // `rampart tcp` takes its session log from either flag.
            let flag = if self.http {
                "--session-log"
            } else {
                "--access-log/--session-log"
            };
            w.value(flag, &path.display().to_string());
            w.push("\n\n");
        }
        w.push("[listeners.default]\nbind = ");
        w.value("--listen", &self.bind.to_string());
        let protocol = match (self.http, self.udp) {
            (true, _) => "http",
            (false, true) => "udp",
            (false, false) => "tcp",
        };
        w.push(&format!("\nprotocol = \"{protocol}\"\n"));
        if self.http3 {
            w.push("http3 = true\n");
        }
        if !self.targets.is_empty() {
            w.push("upstream = \"default\"\n");
        }
        if let Some((path, format)) = &self.access_log {
            w.push("access_log = { path = ");
            w.value("--access-log", &path.display().to_string());
            w.push(", format = ");
            w.value("--access-log-format", format);
            w.push(" }\n");
        }
        let acme_domains = self.acme.as_ref().map_or(&[][..], |a| a.domains.as_slice());
        if !self.tls.is_empty() || !acme_domains.is_empty() {
            w.push("\n[listeners.default.tls]\n");
        }
        if !self.tls.is_empty() {
            w.push("certificates = [");
            for (i, (cert, key)) in self.tls.iter().enumerate() {
                if i > 0 {
                    w.push(", ");
                }
                w.push("{ cert = ");
                w.value("--tls-cert", &cert.display().to_string());
                w.push(", key = ");
                w.value("--tls-key", &key.display().to_string());
                w.push(" }");
            }
            w.push("]\n");
        }
        if !acme_domains.is_empty() {
            w.push("acme = [");
            for (i, name) in acme_domains.iter().enumerate() {
                if i > 0 {
                    w.push(", ");
                }
                w.value("--acme-domain", name);
            }
            w.push("]\n");
        }
        if let Some(http) = self.acme.as_ref().and_then(|a| a.http) {
            w.push("\n[listeners.acme-http]\nbind = ");
            w.value("--acme-http", &http.to_string());
            // To the HTTPS listener's own port: a browser sent to `https://NAME/` would miss one
            // on 8443.
            let port = match self.bind.port() {
                443 => String::new(),
                port => format!(", port = {port}"),
            };
            w.push(&format!(
                "\nprotocol = \"http\"\n\n[[listeners.acme-http.routes]]\nredirect = {{ scheme = \"https\"{port} }}\n"
            ));
        }
        let sni_start = w.text.len();
        let (routes, sni_upstreams) = tcp::sni_routes_toml(&self.sni);
        w.push(&routes);
        w.push("\n");
        if !self.targets.is_empty() {
            w.push("[upstreams.default]\ntargets = [");
            for (i, name) in self.targets.iter().enumerate() {
                if i > 0 {
                    w.push(", ");
                }
                w.value("--to", name);
            }
            w.push(&format!("]\nbalance = \"{}\"\n", self.policy.name()));
            if let Some(p) = &self.upstream_protocol {
                w.push("protocol = ");
                w.value("--upstream-protocol", p);
                w.push("\n");
            }
        }
        let upstreams_start = w.text.len();
        w.push(&sni_upstreams);
        if !self.sni.is_empty() {
            let end = w.text.len();
            for span in [sni_start..sni_start + routes.len(), upstreams_start..end] {
                w.flags.push(FlagSpan {
                    span,
                    flag: "--sni".to_string(),
                    value: String::new(),
                });
            }
        }
        (w.text, w.flags)
    }
}

impl SimpleAcme {
    fn write_table(&self, w: &mut Writer) {
        w.push("[acme]\n");
        let key = |w: &mut Writer, name: &str, flag: &str, value: Option<String>| {
            if let Some(v) = value {
                w.push(&format!("{name} = "));
                w.value(flag, &v);
                w.push("\n");
            }
        };
        key(w, "directory", "--acme-directory", self.directory.clone());
        key(w, "email", "--acme-email", self.email.clone());
        key(w, "ca", "--acme-ca", self.ca.as_ref().map(|p| p.display().to_string()));
        key(
            w,
            "storage",
            "--acme-storage",
            self.storage.as_ref().map(|p| p.display().to_string()),
        );
        if self.http.is_none() {
            w.push("challenge = \"tls-alpn-01\"\n");
        }
        w.push("\n");
    }
}

/// `s` as a TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SimpleL4 {
        SimpleL4 {
            http: true,
            udp: false,
            bind: "127.0.0.1:0".parse().unwrap(),
            targets: vec!["127.0.0.1:9".into()],
            policy: BalancePolicy::RoundRobin,
            session_log: None,
            tls: vec![("missing.pem".into(), "missing.key".into())],
            acme: None,
            tracing: None,
            access_log: None,
            upstream_protocol: None,
            http3: false,
            sni: Vec::new(),
        }
    }

    #[test]
    fn errors_name_the_flag_and_its_value() {
        let errors = simple_l4(&spec(), &mut LiveState::default()).unwrap_err();
        let text: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        assert!(!text.is_empty());
        for e in &text {
            assert!(
                e.starts_with("--tls-cert missing.pem: ") || e.starts_with("--tls-key missing.key: "),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_acme_http_listener_redirects_to_the_https_port_unless_it_is_443() {
        let to_https = |listen: &str| {
            let spec = SimpleL4 {
                bind: listen.parse().unwrap(),
                tls: Vec::new(),
                acme: Some(SimpleAcme {
                    domains: vec!["a.example".into()],
                    http: Some("127.0.0.1:80".parse().unwrap()),
                    ..SimpleAcme::default()
                }),
                ..spec()
            };
            let compiled = simple_l4(&spec, &mut LiveState::default()).unwrap();
            let plain = compiled
                .snapshot
                .listeners
                .iter()
                .find(|l| l.name == "acme-http")
                .unwrap();
            let rampart_model::ListenerProtocol::Http(http) = &plain.protocol else {
                panic!("HTTP")
            };
            http.routes.iter().find_map(|r| match &r.action {
                rampart_model::route::RouteAction::Redirect {
                    to: rampart_model::route::RedirectTo::Scheme { port, .. },
                    ..
                } => Some(*port),
                _ => None,
            })
        };
        assert_eq!(to_https("127.0.0.1:8443"), Some(Some(8443)));
        assert_eq!(to_https("127.0.0.1:443"), Some(None));
    }

    #[test]
    fn offsets_follow_lines_and_characters() {
        let text = "ab\ncé = 1\n";
        assert_eq!(offset_of(text, 1, 1), 0);
        assert_eq!(offset_of(text, 2, 1), 3);
        assert_eq!(offset_of(text, 2, 3), 6);
    }
}
