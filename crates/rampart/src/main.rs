//! The `rampart` binary: command line, wiring and signals.

mod admin;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod alloc;
mod cache_cli;
mod cli;
mod control;
mod logger;
mod notify;
mod pid_file;
mod upgrade;

use std::path::PathBuf;
use std::process::ExitCode;

use rampart_config::compile::{parse_bind, resolve};
use rampart_config::{LiveState, SimpleAcme, SimpleL4};
use rampart_model::balance::BalancePolicy;

use cli::{Cli, Command, EtcdArgs, HttpArgs, TcpArgs};
use rampart_control::etcd;
use rampart_control::{load_config_file, summary, Source};

fn main() -> ExitCode {
    let cli = Cli::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let logger = logger::Logger::init(cli.log_format());
    let result = match cli.command {
        Some(Command::Check { file }) => return check(&file.path()),
        Some(Command::Upgrade { pid, timeout }) => return upgrade_process(pid, &timeout),
        Some(Command::Push {
            file,
            etcd,
            expect_revision,
            force,
        }) => return push(&file.path(), &etcd, expect_revision, force),
        Some(Command::Pull { etcd }) => return pull(&etcd),
        Some(Command::Cache(action)) => return cache_cli::run(&action),
        Some(Command::Run { file, engine, watch }) => {
            run_source(&file, &engine, watch).and_then(|source| control::serve(source, &engine, &logger))
        }
        Some(Command::Tcp(args)) => fixed_source(&OneLine::from(&args))
            .map_err(anyhow::Error::msg)
            .and_then(|source| control::serve(source, &args.engine, &logger)),
        Some(Command::Http(args)) => fixed_source(&OneLine::from(&args))
            .map_err(anyhow::Error::msg)
            .and_then(|source| control::serve(source, &args.engine, &logger)),
        Some(Command::Udp(args)) => fixed_source(&OneLine::from(&args))
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

/// What `rampart tcp` and `rampart http` say, in one shape.
struct OneLine<'a> {
    http: bool,
    udp: bool,
    listen: &'a str,
    to: &'a [String],
    balance: &'a str,
    tls_cert: &'a [PathBuf],
    tls_key: &'a [PathBuf],
    access_log: Option<&'a PathBuf>,
    access_log_format: &'a str,
    upstream_protocol: Option<&'a String>,
    http3: bool,
    sni: &'a [String],
    session_log: Option<&'a PathBuf>,
    acme: Option<&'a crate::cli::AcmeArgs>,
    tracing: Option<&'a crate::cli::TracingArgs>,
}

impl<'a> From<&'a TcpArgs> for OneLine<'a> {
    fn from(args: &'a TcpArgs) -> Self {
        OneLine {
            http: false,
            udp: false,
            listen: &args.listen,
            to: &args.to,
            balance: &args.balance,
            tls_cert: &args.tls.tls_cert,
            tls_key: &args.tls.tls_key,
            access_log: args.access_log.as_ref(),
            access_log_format: "json",
            upstream_protocol: None,
            http3: false,
            sni: &args.sni,
            session_log: args.engine.session_log.as_ref(),
            acme: None,
            tracing: Some(&args.tracing),
        }
    }
}

impl<'a> From<&'a HttpArgs> for OneLine<'a> {
    fn from(args: &'a HttpArgs) -> Self {
        OneLine {
            http: true,
            udp: false,
            listen: &args.listen,
            to: &args.to,
            balance: &args.balance,
            tls_cert: &args.tls.tls_cert,
            tls_key: &args.tls.tls_key,
            access_log: args.access_log.as_ref(),
            access_log_format: &args.access_log_format,
            upstream_protocol: args.upstream_protocol.as_ref(),
            http3: args.http3,
            sni: &[],
            session_log: args.engine.session_log.as_ref(),
            acme: Some(&args.acme),
            tracing: Some(&args.tracing),
        }
    }
}

impl<'a> From<&'a crate::cli::UdpArgs> for OneLine<'a> {
    fn from(args: &'a crate::cli::UdpArgs) -> Self {
        OneLine {
            http: false,
            udp: true,
            listen: &args.listen,
            to: &args.to,
            balance: &args.balance,
            tls_cert: &[],
            tls_key: &[],
            access_log: None,
            access_log_format: "json",
            upstream_protocol: None,
            http3: false,
            sni: &[],
            session_log: args.engine.session_log.as_ref(),
            acme: None,
            tracing: None,
        }
    }
}

fn fixed_source(args: &OneLine<'_>) -> Result<Source, String> {
    let OneLine {
        http,
        udp,
        listen,
        to,
        balance,
        tls_cert,
        tls_key,
        access_log,
        access_log_format,
        upstream_protocol,
        http3,
        sni,
        session_log,
        acme,
        tracing,
    } = *args;
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
    // A TCP listener logs connections: its access log is the session log (one JSON line each);
    // clap refuses both at once.
    let session_log = match http {
        false => access_log.or(session_log).cloned(),
        true => session_log.cloned(),
    };
    if tls_cert.len() != tls_key.len() {
        return Err(format!(
            "--tls-cert and --tls-key come in pairs: {} certificate(s), {} key(s)",
            tls_cert.len(),
            tls_key.len()
        ));
    }
    let bind = parse_bind(listen).map_err(|e| format!("--listen: {e}"))?;
    let acme = match acme.filter(|a| !a.domains.is_empty()) {
        None => None,
        Some(a) => Some(SimpleAcme {
            domains: a.domains.clone(),
            email: a.email.clone(),
            directory: a.directory.clone(),
            ca: a.ca.clone(),
            storage: a.storage.clone(),
            http: match (&a.http, a.no_acme_http) {
                (_, true) => None,
                (Some(http), false) => Some(parse_bind(http).map_err(|e| format!("--acme-http: {e}"))?),
                (None, false) => Some(std::net::SocketAddr::new(bind.ip(), 80)),
            },
        }),
    };
    // A target by name (dns+NAME:PORT, srv+NAME) is resolved by the running process; an address
    // is resolved once, here.
    let targets = to
        .iter()
        .map(|t| match rampart_model::discovery::Query::parse(t) {
            Some(query) => query.map(|_| t.clone()).map_err(|e| format!("--to: {e}")),
            None => resolve(t).map(|_| t.clone()).map_err(|e| format!("--to: {e}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Source::Fixed(Box::new(SimpleL4 {
        http,
        udp,
        bind,
        targets,
        policy: policy(balance),
        session_log,
        tls: tls_cert.iter().cloned().zip(tls_key.iter().cloned()).collect(),
        access_log: access_log
            .filter(|_| http)
            .map(|path| (path.clone(), access_log_format.to_string())),
        upstream_protocol: upstream_protocol.cloned(),
        http3,
        sni,
        acme,
        tracing: tracing.and_then(|t| {
            Some(rampart_config::SimpleTracing {
                endpoint: t.endpoint.clone()?,
                protocol: t.protocol.clone(),
                sampling: t.sampling,
            })
        }),
    })))
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

/// `rampart check FILE` (or `-c FILE`).
fn check(path: &std::path::Path) -> ExitCode {
    let name = path.display().to_string();
    match load_config_file(path, &mut LiveState::default()) {
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

/// Where `rampart run` takes its config from: a file, or etcd.
fn run_source(file: &cli::RunSource, engine: &cli::EngineArgs, watch: bool) -> anyhow::Result<Source> {
    let Some(url) = file.etcd.clone() else {
        return Ok(Source::File {
            path: file.path(),
            session_log: engine.session_log.clone(),
            watch,
        });
    };
    let store = file.etcd_access.store(&url, &file.etcd_prefix)?;
    Ok(Source::Etcd {
        url,
        store: std::sync::Arc::new(store),
        ready_requires_etcd: file.ready_requires_etcd,
        state_dir: file.state_dir.clone(),
        session_log: engine.session_log.clone(),
    })
}

/// `rampart push`: the config file validated, then written to etcd in one transaction conditioned
/// on the revision the edit was based on (`expect`, else the one read just before), unless
/// `force`.
fn push(path: &std::path::Path, args: &EtcdArgs, expect: Option<i64>, force: bool) -> ExitCode {
    let name = path.display().to_string();
    if let Err(errors) = load_config_file(path, &mut LiveState::default()) {
        eprintln!("{errors}");
        eprintln!("{name}: not pushed");
        return ExitCode::from(1);
    }
    let pushed = (|| -> anyhow::Result<ExitCode> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let store = args.access.store(&args.etcd, &args.etcd_prefix)?;
        let key = store.config_key();
        let expected = match expect {
            Some(revision) => revision,
            None => store.get()?.0.map_or(0, |stored| stored.mod_revision),
        };
        match store.put_if(&text, expected)? {
            etcd::Written::Done(revision) => {
                println!("{name}: pushed to {key} at revision {revision}");
                Ok(ExitCode::SUCCESS)
            }
            etcd::Written::Conflict(now) if force => {
                // Written over what someone else wrote in between (once more at most).
                match store.put_if(&text, now)? {
                    etcd::Written::Done(revision) => {
                        println!("{name}: pushed to {key} at revision {revision}");
                        Ok(ExitCode::SUCCESS)
                    }
                    etcd::Written::Conflict(_) => anyhow::bail!("{key} keeps changing; not pushed"),
                }
            }
            etcd::Written::Conflict(now) => {
                eprintln!(
                    "{key} changed since revision {expected} (it is at {now} now): not pushed; \
                     `rampart pull` it, merge, and push again (or push with --force)"
                );
                Ok(ExitCode::from(1))
            }
        }
    })();
    pushed.unwrap_or_else(|e| {
        eprintln!("{e:#}");
        ExitCode::from(1)
    })
}

/// `rampart pull`: the config in etcd on standard output.
fn pull(args: &EtcdArgs) -> ExitCode {
    let pulled = args.access.store(&args.etcd, &args.etcd_prefix).and_then(|store| {
        let key = store.config_key();
        Ok((key, store.get()?.0))
    });
    match pulled {
        Ok((key, Some(stored))) => {
            print!("{}", stored.text);
            eprintln!("{key}: revision {}", stored.mod_revision);
            ExitCode::SUCCESS
        }
        Ok((key, None)) => {
            eprintln!("{key}: no config in etcd");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::from(1)
        }
    }
}
