//! A small stderr logger: `TIME LEVEL message`. `RAMPART_LOG=error|warn|info|debug` sets the level.

use std::io::Write;
use std::time::SystemTime;

use log::{Level, LevelFilter, Metadata, Record};

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut line = Vec::with_capacity(128);
        rampart_proxy::session_log::write_timestamp(&mut line, SystemTime::now());
        let level = match record.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        };
        let _ = writeln!(line, " {level} {}", record.args());
        let _ = std::io::stderr().lock().write_all(&line);
    }

    fn flush(&self) {}
}

/// Installs the logger.
pub fn init() {
    let level = match std::env::var("RAMPART_LOG").as_deref() {
        Ok("error") => LevelFilter::Error,
        Ok("warn") => LevelFilter::Warn,
        Ok("debug") => LevelFilter::Debug,
        Ok("trace") => LevelFilter::Trace,
        _ => LevelFilter::Info,
    };
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(level);
    }
}
