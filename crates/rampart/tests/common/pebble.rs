//! A real ACME CA for the tests: Pebble (Debian `pebble`, installed by scripts/servers) on
//! loopback in its `-strict` mode, serving its API with a certificate of the test's own, and
//! validating challenges against the ports the test names, resolving names through the test's
//! DNS server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::dns::DnsServer;
use super::tls::{Ca, CertSpec};
use super::{free_port, Bounded, INSTALL_WAIT, WAIT};

pub struct Pebble {
    child: Child,
    pub port: u16,
    pub management: u16,
    /// The CA that signed Pebble's API certificate (for `[acme] ca`).
    pub api_ca: PathBuf,
    dir: tempfile::TempDir,
}

impl Pebble {
    /// Pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port` of the addresses
    /// `dns` gives; `nonce_reject` is the percentage of nonces it refuses (Pebble's default: 5).
    pub fn start(http_port: u16, tls_port: u16, dns: &DnsServer, nonce_reject: u32) -> Pebble {
        Pebble::start_with(http_port, tls_port, dns, nonce_reject, None, &[])
    }

    /// [`Pebble::start`], its certificates valid for `validity_seconds` when given (Pebble's
    /// default is five years), refusing to issue for the domains in `blocked`.
    pub fn start_with(
        http_port: u16,
        tls_port: u16,
        dns: &DnsServer,
        nonce_reject: u32,
        validity_seconds: Option<u64>,
        blocked: &[&str],
    ) -> Pebble {
        let options = Options {
            nonce_reject,
            validity_seconds,
            blocked,
            ..Options::default()
        };
        Pebble::launch(http_port, tls_port, dns, &options)
    }

    /// Pebble as `options` say.
    pub fn launch(http_port: u16, tls_port: u16, dns: &DnsServer, options: &Options<'_>) -> Pebble {
        let binary = if options.newer {
            newer_pebble()
        } else {
            super::servers::installed();
            PathBuf::from("pebble")
        };
        let Options {
            nonce_reject,
            validity_seconds,
            blocked,
            ..
        } = *options;
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("pebble API test CA");
        let api_ca = PathBuf::from(ca.write(dir.path(), "api-ca.pem"));
        let (cert, key) = ca
            .issue(&CertSpec::new(&["localhost", "127.0.0.1"]))
            .write(dir.path(), "api");
        let (port, management) = (free_port(), free_port());
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": cert,
            "privateKey": key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        let mut config = config;
        if let Some(seconds) = validity_seconds {
            config["pebble"]["certificateValidityPeriod"] = seconds.into();
        }
        if !blocked.is_empty() {
            config["pebble"]["domainBlocklist"] = blocked.into();
        }
        if !options.profiles.is_empty() {
            let profiles: serde_json::Map<String, serde_json::Value> = options
                .profiles
                .iter()
                .map(|(name, seconds)| {
                    let profile = serde_json::json!({ "description": name, "validityPeriod": seconds });
                    (name.to_string(), profile)
                })
                .collect();
            config["pebble"]["profiles"] = profiles.into();
        }
        if !options.eab.is_empty() {
            let keys: serde_json::Map<String, serde_json::Value> = options
                .eab
                .iter()
                .map(|(kid, key)| (kid.to_string(), (*key).into()))
                .collect();
            config["pebble"]["externalAccountBindingRequired"] = true.into();
            config["pebble"]["externalAccountMACKeys"] = keys.into();
        }
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log_path = dir.path().join("pebble.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(&binary)
            .arg("-config")
            .arg(&config_path)
            .arg("-strict")
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{}", dns.port))
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", nonce_reject.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("pebble starts (scripts/servers installs pebble)");
        let mut pebble = Pebble {
            child,
            port,
            management,
            api_ca,
            dir,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if text.contains("Listening on") || text.contains("listening on") {
                break;
            }
            if let Some(status) = pebble.child.try_wait().unwrap() {
                panic!("pebble exited ({status}):\n{text}");
            }
            assert!(Instant::now() < deadline, "pebble not listening:\n{text}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        pebble
    }

    pub fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The root that Pebble's issued certificates chain to (its management API's `/roots/0`).
    pub fn issuing_root(&self) -> String {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&self.api_ca)
            .arg(format!("https://127.0.0.1:{}/roots/0", self.management))
            .output_within(WAIT)
            .expect("curl runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Makes Pebble answer renewal information for the certificate `chain_pem` (its leaf first)
    /// with the window `start`..`end` (Unix seconds). Pebble 2.10 ([`Options::newer`]) only.
    pub fn set_renewal_window(&self, chain_pem: &str, start: i64, end: i64) {
        let rfc3339 = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t)
                .unwrap()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        };
        let window = serde_json::json!({ "suggestedWindow": { "start": rfc3339(start), "end": rfc3339(end) } });
        let body = serde_json::json!({ "Certificate": chain_pem, "ARIResponse": window.to_string() });
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&self.api_ca)
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(body.to_string())
            .arg(format!("https://127.0.0.1:{}/set-renewal-info/", self.management))
            .output_within(WAIT)
            .expect("curl runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Pebble's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a test's Pebble differs from the plain one.
#[derive(Default, Clone, Copy)]
pub struct Options<'a> {
    /// The percentage of nonces it refuses (Pebble's own default: 5).
    pub nonce_reject: u32,
    /// How long its certificates are valid (Pebble's default: five years).
    pub validity_seconds: Option<u64>,
    /// Domains it refuses to issue for.
    pub blocked: &'a [&'a str],
    /// Pebble 2.10, built by scripts/pebble, instead of Debian's 2.4: renewal information and
    /// profiles.
    pub newer: bool,
    /// Certificate profiles (name, validity in seconds), Pebble 2.10 only. An order that names
    /// none gets one of them at random.
    pub profiles: &'a [(&'a str, u64)],
    /// External account bindings (key ID, HMAC key in base64url) it requires of new accounts.
    pub eab: &'a [(&'a str, &'a str)],
}

/// The path of Pebble 2.10, built by scripts/pebble when missing.
fn newer_pebble() -> PathBuf {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pebble"))
        .output_within(INSTALL_WAIT)
        .expect("scripts/pebble runs");
    assert!(
        out.status.success(),
        "scripts/pebble failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `GET /` over TLS for `name` on 127.0.0.1:`port`, verified against `root` (Pebble's issuing
/// root, [`Pebble::issuing_root`]): the body.
pub fn get_verified(port: u16, root: &str, name: &str) -> String {
    use std::io::{Read, Write};
    let client = super::tls::ClientOpts::with_roots(root).build();
    let mut tls = super::tls::handshake(port, &client, name).expect("a verified handshake");
    write!(tls, "GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer);
    answer.rsplit("\r\n\r\n").next().unwrap_or_default().to_string()
}
