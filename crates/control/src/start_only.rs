//! Settings a running process cannot take from a reload: the worker count and pinning, where the
//! admin listener listens, and the log format. A reload that changes one is refused, naming it,
//! so that `/api/config` never shows a setting that is not in force; a binary upgrade (SIGUSR2)
//! starts a process that reads them, without dropping a connection. The admin token is not among
//! them: a reload applies it (see [`crate::publisher::Publisher::reload`]).

use rampart_config::{AdminAddress, LogFormat};

use crate::source::Loaded;

/// Which start-only settings the command line fixes (`--workers`, `--pin`, `--admin`,
/// `--log-format`): the config's value of those is not compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandLine {
    pub workers: bool,
    pub pin: bool,
    pub admin: bool,
    pub log_format: bool,
}

/// The start-only settings of one load, `None` where the command line fixes the setting (a
/// change in the config then changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartOnly {
    workers: Option<Option<usize>>,
    pin: Option<bool>,
    admin_listen: Option<Option<AdminAddress>>,
    log_format: Option<LogFormat>,
}

impl StartOnly {
    /// The settings of `loaded`, less those `command_line` fixes.
    pub fn of(loaded: &Loaded, command_line: CommandLine) -> StartOnly {
        StartOnly {
            workers: (!command_line.workers).then_some(loaded.workers),
            pin: (!command_line.pin).then_some(loaded.pin),
            admin_listen: (!command_line.admin).then(|| loaded.admin.as_ref().map(|a| a.listen.clone())),
            log_format: (!command_line.log_format).then_some(loaded.log.format),
        }
    }

    /// One line per setting that `next` changes from `self` (the one in force): what changed and
    /// what to do.
    pub fn changes(&self, next: &StartOnly) -> Vec<String> {
        const HOW: &str = "put it back, or apply it with a binary upgrade (SIGUSR2), which drops no connection";
        let mut lines = Vec::new();
        if self.workers != next.workers {
            let shown = |w: Option<Option<usize>>| match w.flatten() {
                Some(n) => n.to_string(),
                None => "one per core".to_string(),
            };
            lines.push(format!(
                "[global] workers changed from {} to {}: the worker count is read at start only; {HOW}",
                shown(self.workers),
                shown(next.workers)
            ));
        }
        if self.pin != next.pin {
            lines.push(format!(
                "[global] pin changed to {}: pinning is read at start only; {HOW}",
                next.pin.unwrap_or(false)
            ));
        }
        if self.admin_listen != next.admin_listen {
            let shown = |a: &Option<Option<AdminAddress>>| match a.as_ref().and_then(Option::as_ref) {
                Some(addr) => addr.to_string(),
                None => "none".to_string(),
            };
            lines.push(format!(
                "[admin] listen changed from {} to {}: the admin listener is bound at start only; {HOW}",
                shown(&self.admin_listen),
                shown(&next.admin_listen)
            ));
        }
        if self.log_format != next.log_format {
            let shown = |f: Option<LogFormat>| f.map_or("text", LogFormat::name);
            lines.push(format!(
                "[global] log_format changed from {} to {}: the log format is read at start only; {HOW}",
                shown(self.log_format),
                shown(next.log_format)
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(workers: Option<usize>, admin: Option<&str>) -> StartOnly {
        StartOnly {
            workers: Some(workers),
            pin: Some(false),
            admin_listen: Some(admin.map(|a| AdminAddress::parse(a).unwrap())),
            log_format: Some(LogFormat::Text),
        }
    }

    #[test]
    fn each_changed_setting_is_named_with_what_to_do() {
        let running = settings(Some(2), Some("127.0.0.1:9901"));
        assert!(running.changes(&running.clone()).is_empty());
        let lines = running.changes(&settings(Some(4), Some("127.0.0.1:9902")));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("[global] workers changed from 2 to 4: "),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("[admin] listen changed from 127.0.0.1:9901 to 127.0.0.1:9902: "),
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| l.ends_with("drops no connection")));
    }

    #[test]
    fn a_setting_the_command_line_fixes_is_not_compared() {
        let running = StartOnly {
            workers: None,
            ..settings(Some(2), None)
        };
        let next = StartOnly {
            workers: None,
            ..settings(Some(8), None)
        };
        assert!(running.changes(&next).is_empty());
    }
}
