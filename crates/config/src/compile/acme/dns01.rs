//! `[acme.dns01]`: the DNS server that takes the dynamic updates (RFC 2136) publishing DNS-01
//! answers, and the TSIG key (RFC 8945) that signs them.

use std::net::{IpAddr, SocketAddr};

use base64::Engine;
use rampart_model::acme::{Dns01Settings, TsigAlgorithm, TsigKey};
use rampart_model::discovery::Query;
use toml::Spanned;

use crate::compile::Checker;
use crate::raw::RawDns01;

/// A zone or key name as compared and sent: lowercase, without the final dot.
pub(super) fn zone_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

impl Checker<'_> {
    /// The `[acme.dns01]` table; `None` after an error (reported).
    pub(super) fn dns01(&mut self, raw: &Spanned<RawDns01>) -> Option<Dns01Settings> {
        let d = raw.get_ref();
        let errors = self.errors.len();
        let server = parse_server(d.server.get_ref());
        if server.is_none() {
            self.error(
                d.server.span(),
                format!(
                    "server `{}` is not an address: write IP:PORT (or IP for port 53)",
                    d.server.get_ref()
                ),
            );
        }
        let zone = d.zone.as_ref().map(|z| {
            let name = zone_name(z.get_ref());
            if let Err(e) = Query::host(&name, 1) {
                self.error(z.span(), format!("zone: {e}"));
            }
            name
        });
        let key_name = zone_name(d.key_name.get_ref());
        if let Err(e) = Query::host(&key_name, 1) {
            self.error(d.key_name.span(), format!("key_name: {e}"));
        }
        let algorithm = match &d.key_algorithm {
            None => TsigAlgorithm::HmacSha256,
            Some(a) => TsigAlgorithm::parse(a.get_ref()).unwrap_or_else(|| {
                self.error(
                    a.span(),
                    format!(
                        "key_algorithm `{}` is not one of {}",
                        a.get_ref(),
                        TsigAlgorithm::NAMES.join(", ")
                    ),
                );
                TsigAlgorithm::HmacSha256
            }),
        };
        let secret = match (&d.key_secret, &d.key_secret_file) {
            (Some(_), Some(file)) => {
                self.error(file.span(), "use either `key_secret` or `key_secret_file`, not both");
                None
            }
            (Some(s), None) => self.tsig_secret(s, s.get_ref()),
            (None, Some(file)) => match std::fs::read_to_string(self.path(file)) {
                Ok(text) => self.tsig_secret(file, secret_of(&text)),
                Err(e) => {
                    self.error(
                        file.span(),
                        format!("key_secret_file {}: cannot read: {e}", file.get_ref()),
                    );
                    None
                }
            },
            (None, None) => {
                self.error(
                    raw.span(),
                    "[acme.dns01] needs the TSIG key's secret: `key_secret_file` (or `key_secret`)",
                );
                None
            }
        };
        if self.errors.len() > errors {
            return None;
        }
        Some(Dns01Settings {
            server: server?,
            zone,
            key: TsigKey {
                name: key_name,
                algorithm,
                secret: secret?,
            },
        })
    }

    /// A base64 secret, decoded: errors name where it was written, never its value.
    fn tsig_secret(&mut self, at: &Spanned<String>, text: &str) -> Option<Vec<u8>> {
        let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        match base64::engine::general_purpose::STANDARD.decode(&text) {
            Ok(secret) if !secret.is_empty() => Some(secret),
            Ok(_) => {
                self.error(at.span(), "the TSIG secret is empty");
                None
            }
            Err(_) => {
                self.error(at.span(), "the TSIG secret is not base64 (as `tsig-keygen` writes it)");
                None
            }
        }
    }
}

/// `IP:PORT`, or `IP` for port 53.
fn parse_server(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    text.parse::<SocketAddr>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)))
}

/// The secret in a key file: the quoted `secret "..."` of a BIND `key` clause (`tsig-keygen`'s
/// output), else the whole text.
fn secret_of(text: &str) -> &str {
    let Some(at) = text.find("secret") else { return text };
    let rest = &text[at + "secret".len()..];
    rest.split('"').nth(1).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use rampart_model::acme::{AcmeChallenge, AcmeSettings, TsigAlgorithm};

    use crate::compile::{compile_toml, LiveState};

    /// `[acme]` with `extra` after `storage`, and a TLS listener obtaining `names`.
    fn acme(extra: &str, names: &str) -> Result<AcmeSettings, String> {
        let src = format!(
            "[acme]\nemail = \"ops@b.example\"\nstorage = \"/tmp/acme\"\n{extra}\n\
             [listeners.web]\nbind = \"127.0.0.1:8443\"\nprotocol = \"http\"\n\n\
             [listeners.web.tls]\nacme = [{names}]\n\n[[listeners.web.routes]]\nrespond = {{ status = 200 }}\n"
        );
        compile_toml("r.toml", &src, &mut LiveState::default())
            .map(|c| c.snapshot.acme.clone().unwrap())
            .map_err(|e| e.to_string())
    }

    const DNS01: &str =
        "[acme.dns01]\nserver = \"127.0.0.1:5353\"\nkey_name = \"acme-key\"\nkey_secret = \"c2VjcmV0\"\n";

    #[test]
    fn dns01_allows_wildcards_and_compiles_the_key() {
        let a = acme(DNS01, "\"*.b.example\", \"b.example\"").unwrap();
        // No plain HTTP listener: the plain name is validated on the TLS listener.
        assert_eq!(a.challenge, AcmeChallenge::TlsAlpn01);
        let d = a.dns01.unwrap();
        assert_eq!(d.server, "127.0.0.1:5353".parse().unwrap());
        assert_eq!(d.zone, None);
        assert_eq!(d.key.name, "acme-key");
        assert_eq!(d.key.algorithm, TsigAlgorithm::HmacSha256);
        assert_eq!(d.key.secret, b"secret");
        let shown = format!("{:?}", d.key);
        assert!(
            shown.contains("(6 bytes)") && !shown.contains("115"),
            "Debug hides the secret: {shown}"
        );
        assert_eq!(AcmeChallenge::Http01.for_name("*.b.example"), AcmeChallenge::Dns01);
        assert_eq!(AcmeChallenge::Http01.for_name("b.example"), AcmeChallenge::Http01);

        let chosen = acme(
            "challenge = \"dns-01\"\n[acme.dns01]\nserver = \"10.0.0.1\"\nzone = \"B.Example.\"\n\
             key_name = \"k.\"\nkey_algorithm = \"hmac-sha512\"\nkey_secret = \"c2VjcmV0\"\n",
            "\"a.b.example\"",
        )
        .unwrap();
        assert_eq!(chosen.challenge, AcmeChallenge::Dns01);
        let d = chosen.dns01.unwrap();
        assert_eq!(d.server, "10.0.0.1:53".parse().unwrap());
        assert_eq!(d.zone.as_deref(), Some("b.example"));
        assert_eq!(d.key.name, "k");
        assert_eq!(d.key.algorithm, TsigAlgorithm::HmacSha512);
    }

    #[test]
    fn the_secret_comes_from_a_file_bare_or_as_tsig_keygen_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("bare.key");
        std::fs::write(&bare, "c2Vj\ncmV0\n").unwrap();
        let bind = dir.path().join("bind.key");
        std::fs::write(
            &bind,
            "key \"acme-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\n",
        )
        .unwrap();
        for file in [&bare, &bind] {
            let table = format!(
                "[acme.dns01]\nserver = \"127.0.0.1:53\"\nkey_name = \"acme-key\"\nkey_secret_file = \"{}\"\n",
                file.display()
            );
            assert_eq!(
                acme(&table, "\"*.b.example\"").unwrap().dns01.unwrap().key.secret,
                b"secret"
            );
        }
    }

    #[test]
    fn bad_dns01_settings_name_their_place() {
        let key = "key_name = \"k\"\nkey_secret = \"c2VjcmV0\"\n";
        for (extra, names, want) in [
            (
                "",
                "\"*.b.example\"",
                "r.toml:10:9: `*.b.example`: a wildcard needs the DNS-01 challenge",
            ),
            (
                "challenge = \"dns-01\"\n",
                "\"b.example\"",
                "r.toml:4:13: challenge `dns-01` needs an [acme.dns01]",
            ),
            (
                "challenge = \"tls\"\n",
                "\"b.example\"",
                "r.toml:4:13: unknown challenge `tls` (expected",
            ),
            (
                &format!("[acme.dns01]\nserver = \"dns.b.example\"\n{key}"),
                "\"b.example\"",
                "r.toml:5:10: server `dns.b.example` is not an address",
            ),
            (
                &format!("[acme.dns01]\nserver = \"127.0.0.1\"\nkey_algorithm = \"hmac-md5\"\n{key}"),
                "\"b.example\"",
                "r.toml:6:17: key_algorithm `hmac-md5` is not one of hmac-sha256",
            ),
            (
                "[acme.dns01]\nserver = \"127.0.0.1\"\nkey_name = \"k\"\nkey_secret = \"not base64!\"\n",
                "\"b.example\"",
                "r.toml:7:14: the TSIG secret is not base64",
            ),
            (
                "[acme.dns01]\nserver = \"127.0.0.1\"\nkey_name = \"k\"\nkey_secret_file = \"/nonexistent/k\"\n",
                "\"b.example\"",
                "r.toml:7:19: key_secret_file /nonexistent/k: cannot read",
            ),
            (
                "[acme.dns01]\nserver = \"127.0.0.1\"\nkey_name = \"k\"\n",
                "\"b.example\"",
                "r.toml:4:1: [acme.dns01] needs the TSIG key's secret",
            ),
            (
                &format!("[acme.dns01]\nserver = \"127.0.0.1\"\nzone = \"c.example\"\n{key}"),
                "\"*.b.example\"",
                "r.toml:15:9: `*.b.example` is not in the [acme.dns01] zone `c.example`",
            ),
        ] {
            let err = acme(extra, names).unwrap_err();
            assert!(err.contains(want), "{extra}: {err}");
        }
        // With HTTP-01 the default, a plain name outside the zone is fine.
        acme(
            &format!("[acme.dns01]\nserver = \"127.0.0.1\"\nzone = \"c.example\"\n{key}"),
            "\"b.example\", \"*.c.example\"",
        )
        .unwrap();
    }
}
