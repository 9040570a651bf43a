//! A real DNS server for the tests of targets written by name: BIND 9's `named` (Debian
//! `bind9`, installed by scripts/servers) serving one zone, `fleet.test`, on 127.0.0.1, its
//! records changed while it runs with `nsupdate` (`bind9-dnsutils`). Started with a TSIG key
//! ([`DnsServer::start_with_key`]), it takes dynamic updates signed with that key only.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::{free_port, wait_bounded, Bounded, WAIT};

/// The zone every test server serves.
pub const ZONE: &str = "fleet.test";

/// `named` on a free port of 127.0.0.1, its files in a directory of its own; killed when dropped.
pub struct DnsServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// The hmac-sha256 key updates must be signed with (name, base64 secret), if any.
    key: Option<(String, String)>,
}

impl DnsServer {
    /// Serves `fleet.test` with `records` (zone-file lines such as `api 1 IN A 127.0.0.2`, names
    /// relative to the zone) and waits until it says it is running.
    pub fn start(records: &str) -> DnsServer {
        DnsServer::start_with(records, None)
    }

    /// [`DnsServer::start`], taking updates only when signed with the hmac-sha256 TSIG key
    /// `name` whose base64 secret is `secret` (unsigned ones from 127.0.0.1 are refused).
    pub fn start_with_key(records: &str, name: &str, secret: &str) -> DnsServer {
        DnsServer::start_with(records, Some((name.to_string(), secret.to_string())))
    }

    fn start_with(records: &str, key: Option<(String, String)>) -> DnsServer {
        super::servers::installed();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let zone = format!(
            "$TTL 1\n@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 60 60 600 1\n@ IN NS ns.{ZONE}.\nns IN A 127.0.0.1\n{records}\n"
        );
        std::fs::write(dir.path().join("zone"), zone).unwrap();
        let port = free_port();
        let (key_clause, allow_update) = match &key {
            Some((name, secret)) => (
                format!("key \"{name}\" {{ algorithm hmac-sha256; secret \"{secret}\"; }};\n"),
                format!("key \"{name}\";"),
            ),
            None => (String::new(), "127.0.0.1;".to_string()),
        };
        let conf = format!(
            "{key_clause}options {{\n  directory \"{d}\";\n  listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  \
             pid-file \"{d}/named.pid\";\n  session-keyfile \"{d}/session.key\";\n  recursion no;\n  \
             dnssec-validation no;\n  allow-query {{ any; }};\n}};\ncontrols {{ }};\n\
             zone \"{ZONE}\" {{ type primary; file \"{d}/zone\"; allow-update {{ {allow_update} }}; }};\n"
        );
        std::fs::write(dir.path().join("named.conf"), conf).unwrap();
        let mut server = DnsServer {
            child: None,
            port,
            dir,
            key,
        };
        server.run();
        server
    }

    /// Starts `named` (again, on the same port, with the records it had) and waits for its
    /// "running" line.
    pub fn run(&mut self) {
        let log_path = self.dir.path().join("named.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(named())
            .args(["-g", "-n", "1", "-c"])
            .arg(self.dir.path().join("named.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("named starts (scripts/servers installs bind9)");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if text.lines().any(|l| l.ends_with(" running")) {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("named exited ({status}):\n{text}");
            }
            assert!(Instant::now() < deadline, "named not running:\n{text}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Applies `updates` in one dynamic update: lines such as
    /// `add api.fleet.test. 1 A 127.0.0.3` or `delete api.fleet.test. A 127.0.0.2`.
    pub fn update(&self, updates: &[&str]) {
        let mut script = format!("server 127.0.0.1 {}\nzone {ZONE}.\n", self.port);
        for u in updates {
            script.push_str(&format!("update {u}\n"));
        }
        script.push_str("send\n");
        let mut nsupdate = Command::new("nsupdate");
        if let Some((name, secret)) = &self.key {
            nsupdate.arg("-y").arg(format!("hmac-sha256:{name}:{secret}"));
        }
        let mut child = nsupdate
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nsupdate runs (scripts/servers installs bind9-dnsutils)");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        wait_bounded(&mut child, WAIT, "nsupdate");
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "nsupdate failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The TXT strings the server has for `name` (a full name, such as
    /// `_acme-challenge.w.fleet.test`), asked with `dig`.
    pub fn txt(&self, name: &str) -> Vec<String> {
        let out = Command::new("dig")
            .args(["+short", "+norecurse", "+tries=3", "+time=2", "-p"])
            .arg(self.port.to_string())
            .args(["@127.0.0.1", name, "TXT"])
            .output_within(WAIT)
            .expect("dig runs (scripts/servers installs bind9-dnsutils)");
        assert!(
            out.status.success(),
            "dig failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().trim_matches('"').to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// `named`'s log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("named.log")).unwrap_or_default()
    }

    /// Stops the server (its port then answers nothing).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts the server refusing every query (`allow-query { none; }`): it answers REFUSED.
    pub fn refuse_queries(&mut self) {
        self.restart_with(|conf, zone| (conf.replace("allow-query { any; }", "allow-query { none; }"), zone));
    }

    /// Restarts the server with a zone file that does not load: it answers SERVFAIL for names
    /// of the zone.
    pub fn break_zone(&mut self) {
        self.restart_with(|conf, _| (conf, "this is not a zone file\n".to_string()));
    }

    /// Restarts the server with the configuration and records it was started with (updates
    /// made since are lost).
    pub fn restore(&mut self) {
        self.restart_with(|conf, zone| (conf, zone));
    }

    /// Stops the server, writes the configuration and zone `change` makes of the ones it was
    /// started with, and starts it again on the same port.
    fn restart_with(&mut self, change: impl FnOnce(String, String) -> (String, String)) {
        self.stop();
        let dir = self.dir.path();
        for name in ["named.conf", "zone"] {
            let first = dir.join(format!("{name}.first"));
            if !first.exists() {
                std::fs::copy(dir.join(name), first).unwrap();
            }
        }
        let read = |name: &str| std::fs::read_to_string(dir.join(format!("{name}.first"))).unwrap();
        let (conf, zone) = change(read("named.conf"), read("zone"));
        std::fs::write(dir.join("named.conf"), conf).unwrap();
        std::fs::write(dir.join("zone"), zone).unwrap();
        let _ = std::fs::remove_file(dir.join("zone.jnl"));
        self.run();
    }

    /// `resolvers = [...]` for a `[global]` table.
    pub fn resolvers(&self) -> String {
        format!("resolvers = [\"127.0.0.1:{}\"]", self.port)
    }
}

fn named() -> &'static Path {
    if Path::new("/usr/sbin/named").exists() {
        Path::new("/usr/sbin/named")
    } else {
        Path::new("named")
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
