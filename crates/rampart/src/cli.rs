//! The command line.

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use rampart_config::compile::parse_bind;
use rampart_config::LogFormat;
use rampart_model::balance::BalancePolicy;

/// Rampart: a reverse proxy and load balancer.
///
/// Zero-config start: `rampart 7777` listens on port 7777 and balances TCP connections round
/// robin over the `host:port` lines of ./hosts.
#[derive(Debug, Parser)]
#[command(
    name = "rampart",
    version,
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Listen on [ADDR:]PORT (address 0.0.0.0 when only a port is given) and balance over the
    /// targets in the hosts file.
    #[arg(value_name = "[ADDR:]PORT", value_parser = ListenAddress)]
    pub listen: Option<String>,

    /// The hosts file: one host:port per line; blank lines and # comments allowed.
    #[arg(long, value_name = "FILE", default_value = "hosts")]
    pub hosts: PathBuf,

    /// Balancing policy.
    #[arg(long, value_name = "POLICY", default_value = "round_robin", value_parser = policy_parser())]
    pub balance: String,

    #[command(flatten)]
    pub engine: EngineArgs,
}

impl Cli {
    /// Parses the command line. A mistyped subcommand followed by its options or a file
    /// (`rampart chek -c x`, `rampart chek x.toml`) stops clap at what follows, before the word
    /// itself is checked; the error then names the word and the subcommand it is near, which is
    /// what went wrong.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        Cli::try_parse_from(&args).map_err(|e| {
            let word = args.get(1).filter(|w| !w.to_string_lossy().starts_with('-'));
            let cmd = <Cli as clap::CommandFactory>::command();
            // A subcommand typed right, with a wrong argument after it: clap's own error is
            // about that argument (never "did you mean" the word that was typed).
            // A first word that is neither a subcommand nor [ADDR:]PORT is what went wrong,
            // whatever clap tripped on after it (`rampart chek rampart.toml` is a conflict of
            // two positionals to clap).
            let word = word.filter(|w| cmd.find_subcommand(w).is_none());
            match word {
                Some(word) => ListenAddress.parse_ref(&cmd, None, word).err().unwrap_or(e),
                None => e,
            }
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A TCP load balancer from the command line alone.
    Tcp(TcpArgs),
    /// An HTTP reverse proxy from the command line alone.
    Http(HttpArgs),
    /// A UDP load balancer (DNS, syslog, game and VoIP traffic) from the command line alone.
    Udp(UdpArgs),
    /// Run from a TOML config file (SIGHUP reloads it), or from the config stored in etcd.
    Run {
        #[command(flatten)]
        file: RunSource,
        /// Also reload when the config file, a file it includes or a certificate, key or other
        /// file it reads changes.
        #[arg(long)]
        watch: bool,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Validate a config file: exit 0 with a summary, or 1 with FILE:LINE:COL: errors.
    Check {
        #[command(flatten)]
        file: ConfigFile,
    },
    /// Store a config file in etcd for the instances that run from it: validated here first,
    /// written only if nobody changed it in between; prints the new revision.
    Push {
        #[command(flatten)]
        file: ConfigFile,
        #[command(flatten)]
        etcd: EtcdArgs,
        /// Write only if the config in etcd is still at this revision (as `rampart pull` printed
        /// it): an edit based on an older one is refused.
        #[arg(long, value_name = "REVISION")]
        expect_revision: Option<i64>,
        /// Write over whatever etcd holds.
        #[arg(long, conflicts_with = "expect_revision")]
        force: bool,
    },
    /// Print the config stored in etcd on standard output (its revision on standard error).
    Pull {
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Purge or ban responses in a running Rampart's HTTP cache, through its admin API.
    #[command(subcommand)]
    Cache(crate::cache_cli::CacheAction),
    /// Replace a running Rampart with the binary now at its path, without closing a port (as
    /// SIGUSR2 does); exit 0 once the new process serves, 1 if it did not take over.
    Upgrade {
        /// The running process.
        #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
        /// How long to wait for the outcome.
        #[arg(long, value_name = "DURATION", default_value = "60s")]
        timeout: String,
    },
}

/// Where `run` reads its config: a file (as `check` takes it), or etcd.
#[derive(Debug, Clone, Args)]
pub struct RunSource {
    /// The config file.
    #[arg(value_name = "FILE", required_unless_present_any = ["config", "etcd"], conflicts_with_all = ["config", "etcd"])]
    file: Option<PathBuf>,
    /// The config file (the same as giving it without -c).
    #[arg(short = 'c', long = "config", value_name = "FILE", conflicts_with = "etcd")]
    config: Option<PathBuf>,
    /// Run from the config stored in etcd at http://HOST:PORT or https://HOST:PORT (see `rampart
    /// push`), and apply each change made to it there. Several endpoints, separated by commas,
    /// are tried in turn.
    #[arg(long, value_name = "URL[,URL...]")]
    pub etcd: Option<String>,
    /// The prefix of Rampart's keys in etcd (the config is PREFIX + `config`).
    #[arg(
        long = "etcd-prefix",
        value_name = "PREFIX",
        default_value = "/rampart/",
        requires = "etcd"
    )]
    pub etcd_prefix: String,
    /// Keep the last config applied from etcd in DIR, and start from it while etcd cannot be
    /// reached.
    #[arg(long = "state-dir", value_name = "DIR", requires = "etcd")]
    pub state_dir: Option<PathBuf>,
    /// Answer /readyz with 503 while etcd cannot be reached (by default an instance serving its
    /// last good config stays ready).
    #[arg(long = "ready-requires-etcd", requires = "etcd")]
    pub ready_requires_etcd: bool,
    #[command(flatten)]
    pub etcd_access: EtcdAccess,
}

impl RunSource {
    /// The config file named, either way (empty with --etcd).
    pub fn path(&self) -> PathBuf {
        self.file.clone().or_else(|| self.config.clone()).unwrap_or_default()
    }
}

/// The config file of `run` and `check`: `rampart check FILE` and `rampart check -c FILE` alike
/// (`nginx -t -c FILE` and `haproxy -c -f FILE` users type it both ways).
#[derive(Debug, Clone, Args)]
pub struct ConfigFile {
    /// The config file.
    #[arg(value_name = "FILE", required_unless_present = "config", conflicts_with = "config")]
    file: Option<PathBuf>,
    /// The config file (the same as giving it without -c).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ConfigFile {
    /// The file named, either way.
    pub fn path(&self) -> PathBuf {
        self.file.clone().or_else(|| self.config.clone()).unwrap_or_default()
    }
}

/// Where the config lives in etcd.
#[derive(Debug, Clone, Args)]
pub struct EtcdArgs {
    /// The etcd endpoint, http://HOST:PORT or https://HOST:PORT (several, separated by commas,
    /// are tried in turn).
    #[arg(long, value_name = "URL[,URL...]")]
    pub etcd: String,
    /// The prefix of Rampart's keys (the config is PREFIX + `config`).
    #[arg(long = "etcd-prefix", value_name = "PREFIX", default_value = "/rampart/")]
    pub etcd_prefix: String,
    #[command(flatten)]
    pub access: EtcdAccess,
}

/// How Rampart reaches etcd: TLS for `https://` endpoints, and who it is when etcd has
/// authentication enabled. Flags, not config: the config itself lives in etcd, so what it takes
/// to read it must come from outside it.
#[derive(Debug, Clone, Args)]
pub struct EtcdAccess {
    /// For https:// endpoints: the CA certificates (PEM) that sign etcd's certificate (default:
    /// the system's).
    #[arg(long = "etcd-ca", value_name = "FILE", requires = "etcd")]
    pub ca: Option<PathBuf>,
    /// For https:// endpoints: a client certificate chain (PEM), for an etcd that asks for one
    /// (`--client-cert-auth`).
    #[arg(long = "etcd-cert", value_name = "FILE", requires_all = ["etcd", "key"])]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --etcd-cert.
    #[arg(long = "etcd-key", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Authenticate to etcd as USER (an etcd user: `etcdctl user add`); the password comes from
    /// the environment variable RAMPART_ETCD_PASSWORD, or --etcd-password-file.
    #[arg(long = "etcd-user", value_name = "USER", requires = "etcd")]
    pub user: Option<String>,
    /// Read the etcd user's password from FILE (its first line).
    #[arg(long = "etcd-password-file", value_name = "FILE", requires = "user")]
    pub password_file: Option<PathBuf>,
}

/// The environment variable holding the etcd user's password.
pub const ETCD_PASSWORD_ENV: &str = "RAMPART_ETCD_PASSWORD";

impl EtcdAccess {
    /// An etcd client for `urls` (as `--etcd` takes them) and `prefix`, with these TLS files and
    /// credentials.
    pub fn store(&self, urls: &str, prefix: &str) -> anyhow::Result<rampart_control::etcd::Etcd> {
        let tls = rampart_control::etcd::TlsFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        };
        Ok(rampart_control::etcd::Etcd::new(urls, prefix, &tls)?.with_credentials(self.credentials()?))
    }

    /// The user and password to authenticate with, if a user was named.
    pub fn credentials(&self) -> anyhow::Result<Option<rampart_control::etcd::Credentials>> {
        let Some(user) = &self.user else { return Ok(None) };
        let password = match &self.password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--etcd-password-file {}: cannot read: {e}", path.display()))?;
                text.lines().next().unwrap_or_default().to_string()
            }
            None => std::env::var(ETCD_PASSWORD_ENV).map_err(|_| {
                anyhow::anyhow!("--etcd-user {user}: give the password in {ETCD_PASSWORD_ENV} or --etcd-password-file")
            })?,
        };
        Ok(Some(rampart_control::etcd::Credentials {
            user: user.clone(),
            password,
        }))
    }
}

/// `rampart tcp`: a TCP listener and its targets.
#[derive(Debug, Args)]
pub struct TcpArgs {
    /// Address to listen on, ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// A target, HOST:PORT; repeat for more. With --sni: where connections no --sni name takes go.
    #[arg(long = "to", value_name = "HOST:PORT", required_unless_present = "sni")]
    pub to: Vec<String>,
    /// Pass TLS through, without terminating it, to HOST:PORT when the ClientHello names NAME
    /// (exact, or `*.example.com` for any subdomain); repeat for more, tried in order.
    #[arg(long = "sni", value_name = "NAME=HOST:PORT", conflicts_with = "tls_cert")]
    pub sni: Vec<String>,
    /// Balancing policy.
    #[arg(long, value_name = "POLICY", default_value = "round_robin", value_parser = policy_parser())]
    pub balance: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Append one JSON line per connection (the same records as --session-log) to FILE; `-` is
    /// standard output.
    #[arg(long = "access-log", value_name = "FILE", conflicts_with = "session_log")]
    pub access_log: Option<PathBuf>,
    #[command(flatten)]
    pub tracing: TracingArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `rampart udp`: datagrams from one client address form a session bound to one target; the
/// replies come back from the listening address.
#[derive(Debug, Args)]
pub struct UdpArgs {
    /// Address to listen on, ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// A target, HOST:PORT; repeat for more.
    #[arg(long = "to", value_name = "HOST:PORT", required = true)]
    pub to: Vec<String>,
    /// Balancing policy (`consistent_hash` keeps each client on one target).
    #[arg(long, value_name = "POLICY", default_value = "round_robin", value_parser = policy_parser())]
    pub balance: String,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `rampart http`: an HTTP listener (HTTP/1.1 and HTTP/2) proxying every request to its targets.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Address to listen on, ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// A target, HOST:PORT; repeat for more.
    #[arg(long = "to", value_name = "HOST:PORT", required = true)]
    pub to: Vec<String>,
    /// Balancing policy.
    #[arg(long, value_name = "POLICY", default_value = "round_robin", value_parser = policy_parser())]
    pub balance: String,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Append one line per request to FILE; `-` is standard output.
    #[arg(long = "access-log", value_name = "FILE")]
    pub access_log: Option<PathBuf>,
    /// The access log's format.
    #[arg(long = "access-log-format", value_name = "FORMAT", default_value = "json",
          value_parser = PossibleValuesParser::new(["json", "combined"]), requires = "access_log")]
    pub access_log_format: String,
    /// The protocol spoken to the targets: http1, or h2c (HTTP/2 in clear, prior knowledge).
    #[arg(long = "upstream-protocol", value_name = "PROTOCOL",
          value_parser = PossibleValuesParser::new(["http1", "h2c"]))]
    pub upstream_protocol: Option<String>,
    /// Also serve HTTP/3 (QUIC) on the same port over UDP, and advertise it with Alt-Svc (needs
    /// --tls-cert/--tls-key or --acme-domain).
    #[arg(long)]
    pub http3: bool,
    #[command(flatten)]
    pub acme: AcmeArgs,
    #[command(flatten)]
    pub tracing: TracingArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Tracing on the command line (`rampart http`, `rampart tcp`): the `[tracing]` table's main keys.
#[derive(Debug, Args)]
pub struct TracingArgs {
    /// Trace requests (and TCP sessions) and export their spans to this OTLP collector,
    /// `http://HOST:PORT` (4318 for OTLP/HTTP, 4317 for gRPC) or `https://`.
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub endpoint: Option<String>,
    /// OTLP over `http` (protobuf) or `grpc`.
    #[arg(long = "otlp-protocol", value_name = "PROTOCOL", default_value = "http",
          value_parser = PossibleValuesParser::new(["http", "grpc"]), requires = "endpoint")]
    pub protocol: String,
    /// The share of new traces sampled, 0 to 1 (a request with a `traceparent` keeps its
    /// caller's decision).
    #[arg(
        long = "trace-sampling",
        value_name = "RATIO",
        default_value = "1",
        requires = "endpoint"
    )]
    pub sampling: f64,
}

/// Certificates from an ACME CA on the command line (`rampart http`).
#[derive(Debug, Args)]
pub struct AcmeArgs {
    /// Obtain (and renew) a certificate for NAME from an ACME CA and serve TLS with it; repeat
    /// for more names. Also answers HTTP-01 and redirects to HTTPS on port 80 (see --acme-http).
    #[arg(long = "acme-domain", value_name = "NAME")]
    pub domains: Vec<String>,
    /// Contact address given to the CA.
    #[arg(long = "acme-email", value_name = "ADDRESS", requires = "domains")]
    pub email: Option<String>,
    /// The CA's directory URL [default: Let's Encrypt's production directory].
    #[arg(long = "acme-directory", value_name = "URL", requires = "domains")]
    pub directory: Option<String>,
    /// A PEM root the directory's HTTPS certificate is checked against (a private or test CA).
    #[arg(long = "acme-ca", value_name = "FILE", requires = "domains")]
    pub ca: Option<PathBuf>,
    /// Where the account and certificates are kept [default: /var/lib/rampart/acme].
    #[arg(long = "acme-storage", value_name = "DIR", requires = "domains")]
    pub storage: Option<PathBuf>,
    /// The plain HTTP listener that answers HTTP-01 and redirects everything else to HTTPS
    /// [default: the --listen address on port 80].
    #[arg(
        long = "acme-http",
        value_name = "ADDR:PORT",
        requires = "domains",
        conflicts_with = "no_acme_http"
    )]
    pub http: Option<String>,
    /// No plain HTTP listener: names are validated by TLS-ALPN-01 on the --listen port.
    #[arg(long = "no-acme-http", requires = "domains")]
    pub no_acme_http: bool,
}

/// TLS termination on the command line.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Terminate TLS with this PEM certificate chain; repeat (each with --tls-key) for more,
    /// chosen by SNI.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Vec<PathBuf>,
    /// The PEM private key of the --tls-cert given in the same position.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Vec<PathBuf>,
}

/// Options every serving mode takes.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Pin worker i to core i.
    #[arg(long)]
    pub pin: bool,
    /// Append one JSON line per connection to FILE (the config file's session_log wins in `run`).
    #[arg(long, value_name = "FILE")]
    pub session_log: Option<PathBuf>,
    /// Write the serving process's PID to FILE (it follows binary upgrades; removed at exit).
    #[arg(long = "pid-file", value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Serve the admin API on ADDR:PORT (loopback) or unix:/path; wins over the config's [admin].
    #[arg(long, value_name = "ADDR:PORT")]
    pub admin: Option<String>,
    /// stderr log lines as `text` or `json` (one object per line); wins over the config's
    /// `[global] log_format`.
    #[arg(long = "log-format", value_name = "FORMAT", value_parser = PossibleValuesParser::new(LogFormat::NAMES))]
    pub log_format: Option<String>,
}

impl Cli {
    /// `--log-format` of whichever mode runs.
    pub fn log_format(&self) -> Option<LogFormat> {
        let engine = match &self.command {
            None => &self.engine,
            Some(Command::Run { engine, .. }) => engine,
            Some(Command::Tcp(args)) => &args.engine,
            Some(Command::Http(args)) => &args.engine,
            Some(Command::Udp(args)) => &args.engine,
            Some(
                Command::Check { .. }
                | Command::Upgrade { .. }
                | Command::Push { .. }
                | Command::Pull { .. }
                | Command::Cache(_),
            ) => return None,
        };
        engine.log_format.as_deref().and_then(LogFormat::from_name)
    }
}

fn policy_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(BalancePolicy::NAMES)
}

/// The `[ADDR:]PORT` positional. A word that is no listen address is refused while parsing, so
/// that a mistyped subcommand (`rampart chek -c x`) is a usage error (exit 2), with clap's
/// "a similar subcommand exists" tip when one is near, rather than a start-up error (exit 1).
#[derive(Debug, Clone, Copy)]
struct ListenAddress;

impl TypedValueParser for ListenAddress {
    type Value = String;

    fn parse_ref(&self, cmd: &clap::Command, _arg: Option<&clap::Arg>, value: &OsStr) -> Result<String, clap::Error> {
        let text = value.to_string_lossy();
        if parse_bind(&text).is_ok() {
            return Ok(text.into_owned());
        }
        let mut cmd = cmd.clone();
        let usage = cmd.render_usage();
        if let Some(similar) = similar_subcommand(&cmd, &text) {
            let mut err = clap::Error::new(ErrorKind::InvalidSubcommand).with_cmd(&cmd);
            err.insert(ContextKind::InvalidSubcommand, ContextValue::String(text.into_owned()));
            err.insert(ContextKind::SuggestedSubcommand, ContextValue::Strings(vec![similar]));
            err.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
            return Err(err);
        }
        let subcommands: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
        let message = format!(
            "'{text}' is neither [ADDR:]PORT (such as 7777 or 127.0.0.1:7777) nor a subcommand ({})\n\n{usage}\n\nFor more information, try '--help'.\n",
            subcommands.join(", ")
        );
        Err(clap::Error::raw(ErrorKind::ValueValidation, message).with_cmd(&cmd))
    }
}

/// The subcommand `word` is most likely a typo of, by clap's own measure (Jaro similarity above 0.7).
fn similar_subcommand(cmd: &clap::Command, word: &str) -> Option<String> {
    cmd.get_subcommands()
        .map(|c| (strsim::jaro(word, c.get_name()), c.get_name()))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn port_alone_and_subcommands_parse() {
        let cli = Cli::try_parse_from(["rampart", "7777", "--workers", "2"]).unwrap();
        assert_eq!(cli.listen.as_deref(), Some("7777"));
        assert_eq!(cli.engine.workers, Some(2));
        let cli = Cli::try_parse_from([
            "rampart",
            "tcp",
            "--listen",
            "127.0.0.1:1",
            "--to",
            "a:1",
            "--to",
            "b:2",
            "--pin",
        ])
        .unwrap();
        assert!(
            matches!(cli.command, Some(Command::Tcp(TcpArgs { ref to, engine: EngineArgs { pin: true, .. }, .. })) if to.len() == 2)
        );
        assert!(Cli::try_parse_from(["rampart", "tcp", "--listen", "127.0.0.1:1"]).is_err());
        assert!(Cli::try_parse_from(["rampart", "7777", "--balance", "nope"]).is_err());
    }

    #[test]
    fn log_format_is_taken_in_every_serving_mode() {
        let modes: [&[&str]; 4] = [
            &["rampart", "7777"],
            &["rampart", "run", "-c", "x.toml"],
            &["rampart", "tcp", "--listen", "127.0.0.1:1", "--to", "a:1"],
            &["rampart", "http", "--listen", "127.0.0.1:1", "--to", "a:1"],
        ];
        for args in modes {
            assert_eq!(Cli::parse_args(args).unwrap().log_format(), None);
            let json = [args, &["--log-format", "json"]].concat();
            assert_eq!(Cli::parse_args(json).unwrap().log_format(), Some(LogFormat::Json));
            let bad = [args, &["--log-format", "xml"]].concat();
            assert_eq!(Cli::parse_args(bad).unwrap_err().kind(), ErrorKind::InvalidValue);
        }
    }

    #[test]
    fn listen_forms_parse() {
        for listen in ["7777", "127.0.0.1:7777", "*:7777", ":7777", "[::1]:7777"] {
            let cli = Cli::parse_args(["rampart", listen, "--workers", "1"]).unwrap();
            assert_eq!(cli.listen.as_deref(), Some(listen));
        }
    }

    #[test]
    fn a_mistyped_subcommand_is_a_usage_error_with_a_suggestion() {
        for (args, similar) in [
            (
                &["rampart", "tcpp", "--listen", "127.0.0.1:1", "--to", "a:1"][..],
                "tcp",
            ),
            (&["rampart", "chek", "-c", "x.toml"][..], "check"),
            (&["rampart", "chek", "rampart.toml"][..], "check"),
        ] {
            let err = Cli::parse_args(args).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidSubcommand, "{err}");
            assert_eq!(err.exit_code(), 2);
            let text = err.to_string();
            assert!(
                text.contains(&format!("similar subcommand exists: '{similar}'")),
                "{text}"
            );
        }
        let err = Cli::parse_args(["rampart", "elsewhere"]).unwrap_err();
        assert_eq!((err.kind(), err.exit_code()), (ErrorKind::ValueValidation, 2));
        assert!(err.to_string().contains("'elsewhere' is neither [ADDR:]PORT"), "{err}");
    }
}
