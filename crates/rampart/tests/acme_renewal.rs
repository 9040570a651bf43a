//! What a CA says beyond issuing, against Pebble 2.10 (built from its Go module by
//! scripts/pebble; Debian's 2.4 has none of it): renewal information (ARI, RFC 9773) sets when a
//! certificate is renewed, and a window the CA moves earlier is followed with an order that says
//! which certificate it replaces; a configured certificate profile is asked for; an external
//! account binding makes the account a CA insists on.

use crate::common;

use common::dns::DnsServer;
use common::pebble::{get_verified, Options, Pebble};
use common::{free_port, write_file, Rampart};

const DAY: u64 = 86_400;

/// A config with an HTTP listener on `http` (answering HTTP-01) and an HTTPS one on `https`
/// whose certificate for `a.fleet.test` comes from `pebble`, and an admin port; `acme_extra`
/// goes into `[acme]`.
fn config(pebble: &Pebble, http: u16, https: u16, admin: u16, acme_extra: &str) -> String {
    format!(
        "[acme]\ndirectory = \"{}\"\nemail = \"ops@fleet.test\"\nca = \"{}\"\nstorage = \"acme\"\n{acme_extra}\n\n\
         [listeners.plain]\nbind = \"127.0.0.1:{http}\"\nprotocol = \"http\"\n\n\
         [[listeners.plain.routes]]\nrespond = {{ status = 200, body = \"plain\" }}\n\n\
         [listeners.secure]\nbind = \"127.0.0.1:{https}\"\nprotocol = \"http\"\n\n\
         [listeners.secure.tls]\nacme = [\"a.fleet.test\"]\n\n\
         [[listeners.secure.routes]]\nrespond = {{ status = 200, body = \"secure\" }}\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        pebble.directory(),
        pebble.api_ca.display()
    )
}

/// The one name's entry in `/api/status` `acme`, once `ready` says it is what the test waits for.
fn acme_state(admin: u16, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    common::tls::eventually("the ACME state is as expected", || {
        let (_, status) = common::admin(admin, "GET", "/api/status", None);
        last = status["acme"]["names"][0].clone();
        ready(&last)
    });
    last
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn renewal_information_sets_the_renewal_time_and_a_window_moved_earlier_is_followed() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https, admin) = (free_port(), free_port(), free_port());
    let options = Options {
        newer: true,
        profiles: &[("default", 90 * DAY)],
        ..Options::default()
    };
    let pebble = Pebble::launch(http, https, &dns, &options);
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "acme.toml", &config(&pebble, http, https, admin, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    let root = pebble.issuing_root();
    assert_eq!(get_verified(https, &root, "a.fleet.test"), "secure");

    // Pebble's window: two days around two thirds of the 90 days; the moment chosen lies in it.
    let state = acme_state(admin, |s| s["renewal_window"].is_object());
    let (start, end) = (
        state["renewal_window"]["start"].as_u64().unwrap(),
        state["renewal_window"]["end"].as_u64().unwrap(),
    );
    let renew_at = state["renew_at"].as_u64().unwrap();
    assert!(end - start >= 2 * DAY - 2 && end - start <= 2 * DAY, "{state}");
    assert!((start..=end).contains(&renew_at), "{state}");
    assert!(start > now() + 58 * DAY && end < now() + 62 * DAY, "{state}");
    proxy.stop();

    // The CA moves the window to a few seconds from now (as it would before revoking): the
    // restarted instance serves the kept certificate, renews it inside the window, naming the
    // certificate it replaces, and serves the new one.
    let kept = std::fs::read_to_string(dir.path().join("acme/certs/a.fleet.test.pem")).unwrap();
    let (soon, later) = (now() as i64 + 3, now() as i64 + 5);
    pebble.set_renewal_window(&kept, soon, later);
    let mut again = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    again.wait_for("serving the certificate kept");
    let state = acme_state(admin, |s| s["renewal_window"]["start"].as_i64() == Some(soon));
    assert!((soon..=later).contains(&state["renew_at"].as_i64().unwrap()), "{state}");
    let opened = again.wait_for("renewal window opened");
    assert!(now() as i64 >= soon, "renewed before the window: {opened}");
    again.wait_for("certificate issued");
    assert!(pebble.log().contains("is a replacement of"), "{}", pebble.log());
    let renewed = std::fs::read_to_string(dir.path().join("acme/certs/a.fleet.test.pem")).unwrap();
    assert_ne!(renewed, kept);
    assert_eq!(get_verified(https, &root, "a.fleet.test"), "secure");
    // The new certificate has a window of its own again, months away.
    let state = acme_state(admin, |s| {
        s["renewal_window"]["start"].as_u64() > Some(now() + 58 * DAY)
    });
    assert_eq!(state["state"], "valid", "{state}");
    again.stop();
    assert!(
        !again.log.join("\n").contains("refused the order as a replacement"),
        "{}",
        again.log.join("\n")
    );
}

#[test]
fn a_configured_profile_is_asked_for_and_one_the_ca_lacks_is_said() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https, admin) = (free_port(), free_port(), free_port());
    let options = Options {
        newer: true,
        profiles: &[("default", 90 * DAY), ("shortlived", 6 * DAY)],
        ..Options::default()
    };
    let pebble = Pebble::launch(http, https, &dns, &options);
    let dir = tempfile::tempdir().unwrap();

    let text = config(&pebble, http, https, admin, "profile = \"shortlived\"");
    let path = write_file(dir.path(), "acme.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    let state = acme_state(admin, |s| s["state"] == "valid");
    let left = state["not_after"].as_u64().unwrap() - now();
    assert!(left > 5 * DAY && left <= 6 * DAY, "a six-day certificate: {state}");
    proxy.stop();

    // A profile the CA does not offer: said, and the CA's default is ordered.
    std::fs::remove_dir_all(dir.path().join("acme")).unwrap();
    let text = config(&pebble, http, https, admin, "profile = \"tenyear\"");
    let path = write_file(dir.path(), "other.toml", &text);
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let said = proxy.wait_for("offers no profile");
    assert!(said.contains("`tenyear` (it offers: default, shortlived)"), "{said}");
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    proxy.stop();
}

#[test]
fn an_external_account_binding_makes_the_account_and_its_absence_is_said_plainly() {
    let dns = DnsServer::start("a 60 IN A 127.0.0.1");
    let (http, https, admin) = (free_port(), free_port(), free_port());
    // A 32-byte HMAC key in base64url, as a CA hands it out.
    let key = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let options = Options {
        newer: true,
        profiles: &[("default", 90 * DAY)],
        eab: &[("kid-rampart", key)],
        ..Options::default()
    };
    let pebble = Pebble::launch(http, https, &dns, &options);
    let dir = tempfile::tempdir().unwrap();

    // Without the binding the CA refuses the account: its error, in the log and /api/status.
    let path = write_file(dir.path(), "plain.toml", &config(&pebble, http, https, admin, ""));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    let refused = proxy.wait_for("acme: a.fleet.test:");
    assert!(refused.contains("externalAccountRequired"), "{refused}");
    let state = acme_state(admin, |s| s["failures"].as_u64() >= Some(1));
    assert!(
        state["error"].as_str().unwrap().contains("externalAccountRequired"),
        "{state}"
    );
    proxy.stop();

    // With it (the key in a file), the account is made and the certificate issued.
    write_file(dir.path(), "eab.key", &format!("{key}\n"));
    let extra = "[acme.eab]\nkid = \"kid-rampart\"\nhmac_key_file = \"eab.key\"";
    let path = write_file(dir.path(), "eab.toml", &config(&pebble, http, https, admin, extra));
    let mut proxy = Rampart::start(dir.path(), &["run", "-c", &path, "--workers", "1"]);
    proxy.wait_for("certificate issued");
    assert_eq!(get_verified(https, &pebble.issuing_root(), "a.fleet.test"), "secure");
    proxy.stop();

    // A key that is not base64url is refused before anything starts.
    let extra = "[acme.eab]\nkid = \"kid-rampart\"\nhmac_key = \"not base64!\"";
    let path = write_file(dir.path(), "bad.toml", &config(&pebble, http, https, admin, extra));
    let (code, _, err) = common::run_rampart(dir.path(), &["check", "-c", &path]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.toml:8:12: the HMAC key is not base64url"), "{err}");
}
