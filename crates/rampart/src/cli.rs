//! The command line.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
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
    #[arg(value_name = "[ADDR:]PORT")]
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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A TCP load balancer from the command line alone.
    Tcp(FixedArgs),
    /// An HTTP/1.1 reverse proxy from the command line alone.
    Http(FixedArgs),
    /// Run from a TOML config file (SIGHUP reloads it).
    Run {
        /// The config file.
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Validate a config file: exit 0 with a summary, or 1 with FILE:LINE:COL: errors.
    Check {
        /// The config file.
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
    },
}

/// A listener and its targets on the command line (`tcp` and `http`).
#[derive(Debug, Args)]
pub struct FixedArgs {
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
    pub engine: EngineArgs,
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
}

fn policy_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(BalancePolicy::NAMES)
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
            matches!(cli.command, Some(Command::Tcp(FixedArgs { ref to, engine: EngineArgs { pin: true, .. }, .. })) if to.len() == 2)
        );
        assert!(Cli::try_parse_from(["rampart", "tcp", "--listen", "127.0.0.1:1"]).is_err());
        assert!(Cli::try_parse_from(["rampart", "7777", "--balance", "nope"]).is_err());
    }
}
