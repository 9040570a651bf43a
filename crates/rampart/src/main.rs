//! The `rampart` binary: command line, wiring and signals.

mod admin;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod alloc;
mod cli;
mod control;
mod logger;
mod notify;
mod source;
mod upgrade;
mod watch;

use std::path::Path;
use std::process::ExitCode;

use rampart_config::compile::{parse_bind, resolve};
use rampart_config::{LiveState, SimpleL4};
use rampart_model::balance::BalancePolicy;

use cli::{Cli, Command, FixedArgs};
use source::{summary, Source};

fn main() -> ExitCode {
    let cli = Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let logger = logger::Logger::init(cli.log_format());
    let result = match cli.command {
        Some(Command::Check { config }) => return check(&config),
        Some(Command::Upgrade { pid, timeout }) => return upgrade_process(pid, &timeout),
        Some(Command::Run { config, engine, watch }) => {
            let source = Source::File {
                path: config,
                session_log: engine.session_log.clone(),
                watch,
            };
            control::serve(source, &engine, &logger)
        }
        Some(Command::Tcp(args)) => fixed_source(false, &args)
            .map_err(anyhow::Error::msg)
            .and_then(|source| control::serve(source, &args.engine, &logger)),
        Some(Command::Http(args)) => fixed_source(true, &args)
            .map_err(anyhow::Error::msg)
            .and_then(|source| control::serve(source, &args.engine, &logger)),
        None => {
            let listen = cli.listen.unwrap_or_default();
            let source = Source::Hosts {
                path: cli.hosts,
                bind: listen,
                policy: policy(&cli.balance),
                session_log: cli.engine.session_log.clone(),
            };
            control::serve(source, &cli.engine, &logger)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            control::log_fatal(&logger, &e);
            ExitCode::from(1)
        }
    }
}

fn policy(name: &str) -> BalancePolicy {
    // clap has already restricted the value to BalancePolicy::NAMES.
    BalancePolicy::from_name(name).unwrap_or(BalancePolicy::RoundRobin)
}

fn fixed_source(http: bool, args: &FixedArgs) -> Result<Source, String> {
    let FixedArgs {
        listen,
        to,
        balance,
        tls_cert,
        tls_key,
        access_log,
        access_log_format,
        upstream_protocol,
        sni,
        engine,
    } = args;
    if http && !sni.is_empty() {
        return Err("--sni is for `rampart tcp` (TLS passed through by name)".into());
    }
    if !sni.is_empty() && !tls_cert.is_empty() {
        return Err(
            "--sni passes TLS through to the targets, which hold the certificates: leave out --tls-cert".into(),
        );
    }
    let sni = sni
        .iter()
        .map(|s| match s.split_once('=') {
            Some((name, target)) if !name.is_empty() && !target.is_empty() => {
                Ok((name.to_string(), target.to_string()))
            }
            _ => Err(format!(
                "--sni {s}: expected NAME=HOST:PORT, as in --sni a.example.com=10.0.0.5:443"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !http && upstream_protocol.is_some() {
        return Err("--upstream-protocol is for `rampart http`".into());
    }
    // A TCP listener logs connections: its access log is the session log (one JSON line each).
    let mut session_log = engine.session_log.clone();
    if !http && access_log.is_some() {
        if access_log_format != "json" {
            return Err("--access-log-format: `rampart tcp` logs each connection as one JSON line (combined is for HTTP requests)".into());
        }
        if session_log.is_some() {
            return Err("--access-log and --session-log name the same log in `rampart tcp`: give one".into());
        }
        session_log = access_log.clone();
    }
    if tls_cert.len() != tls_key.len() {
        return Err(format!(
            "--tls-cert and --tls-key come in pairs: {} certificate(s), {} key(s)",
            tls_cert.len(),
            tls_key.len()
        ));
    }
    let bind = parse_bind(listen).map_err(|e| format!("--listen: {e}"))?;
    let targets = to
        .iter()
        .map(|t| {
            resolve(t)
                .map(|addr| (t.clone(), addr))
                .map_err(|e| format!("--to: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Source::Fixed(SimpleL4 {
        http,
        bind,
        targets,
        policy: policy(balance),
        session_log,
        tls: tls_cert.iter().cloned().zip(tls_key.iter().cloned()).collect(),
        access_log: access_log
            .clone()
            .filter(|_| http)
            .map(|path| (path, access_log_format.clone())),
        upstream_protocol: upstream_protocol.clone().filter(|_| http),
        sni,
    }))
}

/// `rampart upgrade --pid PID`.
fn upgrade_process(pid: i32, timeout: &str) -> ExitCode {
    let timeout = match rampart_config::units::parse_duration(timeout) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rampart upgrade: --timeout: {e}");
            return ExitCode::from(2);
        }
    };
    match upgrade::client::upgrade(pid, timeout) {
        Ok(done) => {
            println!("rampart upgrade: {done}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("rampart upgrade: {why}");
            ExitCode::from(1)
        }
    }
}

/// `rampart check -c FILE`.
fn check(path: &Path) -> ExitCode {
    let name = path.display().to_string();
    match source::load_config_file(path, &mut LiveState::default()) {
        Ok(rampart_config::LoadedConfig { compiled, .. }) => {
            for w in &compiled.warnings {
                eprintln!("{}:{}:{}: warning: {}", w.file, w.line, w.col, w.message);
            }
            println!("{name}: ok: {}", summary(&compiled.snapshot));
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(1)
        }
    }
}
