//! Logs go through `tracing` to stderr as `TIME LEVEL message key=value`.
//! `RUST_LOG` (or the older `RAMPART_LOG`) sets the level.

use std::fmt;
use std::time::SystemTime;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// `TIME LEVEL message key=value`.
struct TextFormat;

impl<S, N> FormatEvent<S, N> for TextFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut time = Vec::with_capacity(32);
        rampart_proxy::session_log::write_timestamp(&mut time, SystemTime::now());
        let level = level_name(event.metadata().level());
        write!(writer, "{} {level} ", String::from_utf8_lossy(&time))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
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

/// Installs the logger.
pub fn init() {
    let directives = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("RAMPART_LOG"))
        .unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(TextFormat)
        .try_init();
}
