//! The process log: `tracing` events on stderr, one line each.
//!
//! - `text`: `TIME LEVEL message key=value …`.
//! - `json`: `{"timestamp":…,"level":…,"target":…,"message":…,"fields":{…}}`.
//!
//! The format is `--log-format` when given, else the first config's `[global] log_format`
//! (a change on reload is logged and waits for a restart). The level is `RUST_LOG` (EnvFilter
//! directives; `RAMPART_LOG` is an older name for it) when set, else `[global] log_level`, which
//! follows reloads. Until the first config is loaded the level is `RUST_LOG`'s or `info`, and the
//! format the command line's or text.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use rampart_config::{LogFormat, LogLevel, LogSettings};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The environment variables that set the level, first found wins.
const LEVEL_VARS: [&str; 2] = ["RUST_LOG", "RAMPART_LOG"];

/// The installed log's controls. Owned by the control plane's thread.
pub struct Logger {
    filter: Option<reload::Handle<EnvFilter, Registry>>,
    /// Set while `RUST_LOG` (or `RAMPART_LOG`) decides the level.
    from_env: Option<&'static str>,
    json: Arc<AtomicBool>,
    /// `--log-format`.
    cli_format: Option<LogFormat>,
    /// What the running process logs with (level only when the config decides it).
    level: Cell<LogLevel>,
    format: Cell<LogFormat>,
}

impl Logger {
    /// Installs the log on stderr, in `cli_format` (text when none).
    pub fn init(cli_format: Option<LogFormat>) -> Logger {
        let format = cli_format.unwrap_or_default();
        let json = Arc::new(AtomicBool::new(format == LogFormat::Json));
        let mut bad_env = None;
        let mut from_env = None;
        let mut filter = EnvFilter::new(LogLevel::default().name());
        for var in LEVEL_VARS {
            let Ok(directives) = std::env::var(var) else { continue };
            if directives.trim().is_empty() {
                continue;
            }
            match EnvFilter::try_new(&directives) {
                Ok(f) => {
                    (filter, from_env) = (f, Some(var));
                    break;
                }
                Err(e) => bad_env = Some((var, directives, e)),
            }
        }
        let (filter, handle) = reload::Layer::new(filter);
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .event_format(LineFormat { json: json.clone() });
        let installed = tracing_subscriber::registry()
            .with(filter)
            .with(layer)
            .try_init()
            .is_ok();
        sync_log_crate();
        if let Some((var, directives, e)) = bad_env {
            tracing::warn!(variable = var, value = directives.as_str(), error = %e, "{var} ignored: not a valid filter");
        }
        Logger {
            filter: installed.then_some(handle),
            from_env,
            json,
            cli_format,
            level: Cell::new(LogLevel::default()),
            format: Cell::new(format),
        }
    }

    /// Whether lines are JSON.
    pub fn is_json(&self) -> bool {
        self.json.load(Ordering::Relaxed)
    }

    /// Takes the first config's settings: its format unless `--log-format` was given, its level
    /// unless `RUST_LOG` is set.
    pub fn start(&self, settings: LogSettings) {
        if self.cli_format.is_none() {
            self.format.set(settings.format);
            self.json.store(settings.format == LogFormat::Json, Ordering::Relaxed);
        }
        self.set_level(settings.level);
    }

    /// Takes a reloaded config's level (a reload that changes the format is refused before).
    pub fn reload(&self, settings: LogSettings) {
        let before = self.level.get();
        if self.from_env.is_some() || settings.level == before {
            return;
        }
        // Said while the more verbose of the two levels is in force.
        let say = || tracing::info!(from = before.name(), to = settings.level.name(), "log level changed");
        if settings.level < before {
            say();
            self.set_level(settings.level);
        } else {
            self.set_level(settings.level);
            say();
        }
    }

    fn set_level(&self, level: LogLevel) {
        if self.from_env.is_some() || level == self.level.get() {
            return;
        }
        self.level.set(level);
        if let Some(handle) = &self.filter {
            let _ = handle.reload(EnvFilter::new(level.name()));
            sync_log_crate();
        }
    }
}

/// Records from the `log` crate (rustls logs through it) reach `tracing` only up to `log`'s own
/// maximum level, which has to follow the filter's.
fn sync_log_crate() {
    let max = match tracing::level_filters::LevelFilter::current().into_level() {
        None => log::LevelFilter::Off,
        Some(Level::ERROR) => log::LevelFilter::Error,
        Some(Level::WARN) => log::LevelFilter::Warn,
        Some(Level::INFO) => log::LevelFilter::Info,
        Some(Level::DEBUG) => log::LevelFilter::Debug,
        Some(Level::TRACE) => log::LevelFilter::Trace,
    };
    log::set_max_level(max);
}

/// Writes one event as a text or JSON line.
struct LineFormat {
    json: Arc<AtomicBool>,
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut time = Vec::with_capacity(32);
        rampart_proxy::session_log::write_timestamp(&mut time, SystemTime::now());
        let time = String::from_utf8_lossy(&time);
        let level = level_name(event.metadata().level());
        let mut fields = Fields::default();
        event.record(&mut fields);
        if !self.json.load(Ordering::Relaxed) {
            write!(writer, "{time} {level} {}", fields.message)?;
            for (name, value) in &fields.fields {
                write!(writer, " {name}=")?;
                match value {
                    Value::String(s) if needs_quotes(s) => write!(writer, "{s:?}")?,
                    Value::String(s) => writer.write_str(s)?,
                    other => write!(writer, "{other}")?,
                }
            }
            return writeln!(writer);
        }
        let target = fields.log_target.as_deref().unwrap_or(event.metadata().target());
        let json = |v: &str| Value::from(v).to_string();
        write!(
            writer,
            "{{\"timestamp\":{},\"level\":\"{level}\",\"target\":{},\"message\":{},\"fields\":{{",
            json(&time),
            json(target),
            json(&fields.message)
        )?;
        for (i, (name, value)) in fields.fields.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            write!(writer, "{comma}{}:{value}", json(name))?;
        }
        writeln!(writer, "}}}}")
    }
}

/// Whether a text-format value would be ambiguous without quotes.
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '=' | '\\'))
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// An event's message and fields, in the order written; numbers and booleans stay what they are.
#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(&'static str, Value)>,
    /// The target of a record from the `log` crate.
    log_target: Option<String>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                self.message = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                }
            }
            "log.target" => self.log_target = value.as_str().map(str::to_string),
            name if name.starts_with("log.") => {}
            name => self.fields.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(
            field,
            serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number),
        );
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}
