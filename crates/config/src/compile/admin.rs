//! `[admin]`: where the control port listens and who may use it.

use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned;

use super::{parse_bind, Checker};
use crate::raw::RawAdmin;

/// The admin listener's settings (control plane only: the snapshot never holds them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    pub listen: AdminAddress,
    /// Every request must carry `Authorization: Bearer TOKEN` when set.
    pub token: Option<String>,
}

/// Where the admin listener is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for AdminAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminAddress::Tcp(a) => write!(f, "{a}"),
            AdminAddress::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl AdminAddress {
    /// `ADDR:PORT` (or a port), or `unix:/path`.
    pub fn parse(s: &str) -> Result<AdminAddress, String> {
        match s.strip_prefix("unix:") {
            Some("") => Err("`unix:` needs a socket path, such as unix:/run/rampart/admin.sock".into()),
            Some(path) => Ok(AdminAddress::Unix(PathBuf::from(path))),
            None => parse_bind(s).map(AdminAddress::Tcp),
        }
    }

    /// Whether only this machine can reach it.
    pub fn is_local(&self) -> bool {
        match self {
            AdminAddress::Tcp(a) => a.ip().is_loopback(),
            AdminAddress::Unix(_) => true,
        }
    }
}

impl Checker<'_> {
    pub(super) fn admin(&mut self, raw: &Spanned<RawAdmin>) -> Option<AdminSettings> {
        let a = raw.get_ref();
        let listen = match AdminAddress::parse(a.listen.get_ref()) {
            Ok(l) => l,
            Err(e) => {
                self.error(a.listen.span(), e);
                return None;
            }
        };
        let token = match (&a.token, &a.token_file) {
            (Some(_), Some(file)) => {
                self.error(file.span(), "use either `token` or `token_file`, not both");
                return None;
            }
            (Some(t), None) => Some(self.token(t, t.get_ref().trim())?),
            (None, Some(file)) => {
                let text = match std::fs::read_to_string(self.path(file)) {
                    Ok(t) => t,
                    Err(e) => {
                        self.error(file.span(), format!("token_file {}: cannot read: {e}", file.get_ref()));
                        return None;
                    }
                };
                Some(self.token(file, text.trim())?)
            }
            (None, None) => None,
        };
        if token.is_none() && !listen.is_local() && !a.allow_remote.unwrap_or(false) {
            self.error(
                a.listen.span(),
                format!(
                    "admin listen {listen} is reachable from other machines: set `token` (or `token_file`), \
                     or `allow_remote = true` to serve it without one"
                ),
            );
            return None;
        }
        Some(AdminSettings { listen, token })
    }

    fn token(&mut self, at: &Spanned<String>, token: &str) -> Option<String> {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            self.error(at.span(), "the admin token must be non-empty visible ASCII (no spaces)");
            return None;
        }
        Some(token.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::{AdminAddress, AdminSettings};
    use crate::compile::{compile_toml, LiveState};

    fn admin(table: &str) -> Result<Option<AdminSettings>, String> {
        let src = format!(
            "{table}\n[listeners.web]\nbind = \"127.0.0.1:8080\"\nupstream = \"app\"\n\n[upstreams.app]\ntargets = [\"127.0.0.1:9000\"]\n"
        );
        compile_toml("r.toml", &src, &mut LiveState::default())
            .map(|c| c.admin)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_admin_table_needs_a_token_off_loopback() {
        assert_eq!(admin("").unwrap(), None);
        let local = admin("[admin]\nlisten = \"127.0.0.1:9901\"").unwrap().unwrap();
        assert_eq!(local.listen, AdminAddress::Tcp("127.0.0.1:9901".parse().unwrap()));
        let unix = admin("[admin]\nlisten = \"unix:/run/rampart.sock\"").unwrap().unwrap();
        assert_eq!(unix.listen.to_string(), "unix:/run/rampart.sock");
        let err = admin("[admin]\nlisten = \"0.0.0.0:9901\"").unwrap_err();
        assert!(
            err.starts_with("r.toml:2:10: admin listen 0.0.0.0:9901 is reachable from other machines"),
            "{err}"
        );
        let open = admin("[admin]\nlisten = \"0.0.0.0:9901\"\nallow_remote = true")
            .unwrap()
            .unwrap();
        assert_eq!(open.token, None);
        let guarded = admin("[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"abc\"")
            .unwrap()
            .unwrap();
        assert_eq!(guarded.token.as_deref(), Some("abc"));
    }

    #[test]
    fn bad_admin_settings_name_their_place() {
        for (table, want) in [
            (
                "[admin]\nlisten = \"nowhere\"",
                "r.toml:2:10: `nowhere` is not a listen address",
            ),
            (
                "[admin]\nlisten = \"unix:\"",
                "r.toml:2:10: `unix:` needs a socket path",
            ),
            (
                "[admin]\nlisten = \"127.0.0.1:1\"\ntoken = \"a b\"",
                "r.toml:3:9: the admin token must be",
            ),
            (
                "[admin]\nlisten = \"127.0.0.1:1\"\ntoken = \"a\"\ntoken_file = \"t\"",
                "r.toml:4:14: use either `token` or `token_file`",
            ),
            (
                "[admin]\nlisten = \"127.0.0.1:1\"\ntoken_file = \"/nonexistent/t\"",
                "r.toml:3:14: token_file /nonexistent/t: cannot read",
            ),
        ] {
            let err = admin(table).unwrap_err();
            assert!(err.starts_with(want), "{table}: {err}");
        }
    }
}
