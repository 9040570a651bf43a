use argon2::password_hash::{PasswordHasher, SaltString};

use super::*;

fn messages(e: ConfigErrors) -> Vec<String> {
    e.0.iter().map(|e| e.to_string()).collect()
}

/// A cheap bcrypt hash (cost 4) of `password`.
fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

/// A cheap argon2 hash (8 KiB, one pass) of `password`, of the given variant.
fn argon2_hash(password: &str, algorithm: argon2::Algorithm) -> String {
    let params = argon2::Params::new(8, 1, 1, None).unwrap();
    let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    argon2::Argon2::new(algorithm, argon2::Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

#[test]
fn htpasswd_takes_bcrypt_and_argon2_users() {
    let b = bcrypt_hash("pw");
    let id = argon2_hash("pw", argon2::Algorithm::Argon2id);
    let i = argon2_hash("pw", argon2::Algorithm::Argon2i);
    let d = argon2_hash("pw", argon2::Algorithm::Argon2d);
    let b2a = b.replacen("$2b$", "$2a$", 1);
    let b2y = b.replacen("$2b$", "$2y$", 1);
    let src = format!("\u{feff}# users\n\nalice:{b}\r\n  bob : {id}  \ncarol:{i}\ndave:{d}\nerin:{b2a}\nfrank:{b2y}\n");
    let users = parse_htpasswd("users.htpasswd", &src).unwrap();
    assert_eq!(users.len(), 6);
    assert_eq!(users.get(b"alice"), Some(&PasswordHash::Bcrypt(b.clone())));
    assert_eq!(users.get(b"bob"), Some(&PasswordHash::Argon2(id)));
    assert_eq!(users.get(b"dave").map(PasswordHash::kind), Some("argon2"));
    assert_eq!(users.get(b"frank").map(PasswordHash::as_str), Some(b2y.as_str()));
}

#[test]
fn htpasswd_refuses_weak_hashes_naming_the_line_and_user() {
    let src = "# users\nalice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\nbob:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\ncarol:$6$salt$abc\ndave:rqXexS6ZhobKA\nerin:hunter2\nfrank:$2x$05$abcdefghijklmnopqrstuu5Vv7ZQGnDjhJfKaQ0hJFj3B4W2sF6m\ngina:$sha1$x\n";
    let got = messages(parse_htpasswd("users.htpasswd", src).unwrap_err());
    let hint = "(use bcrypt: htpasswd -B, or argon2)";
    assert_eq!(
        got,
        [
            format!("users.htpasswd:2:7: unsupported hash for user \"alice\": SHA-1 ({{SHA}}) {hint}"),
            format!("users.htpasswd:3:5: unsupported hash for user \"bob\": MD5 {hint}"),
            format!("users.htpasswd:4:7: unsupported hash for user \"carol\": SHA-crypt {hint}"),
            format!("users.htpasswd:5:6: unsupported hash for user \"dave\": DES crypt or plain text {hint}"),
            format!("users.htpasswd:6:6: unsupported hash for user \"erin\": plain text {hint}"),
            format!(
                "users.htpasswd:7:7: unsupported hash for user \"frank\": bcrypt $2x$ (the variant with the sign-extension bug) {hint}"
            ),
            format!("users.htpasswd:8:6: unsupported hash for user \"gina\": crypt {hint}"),
        ]
    );
    // No message repeats a hash.
    assert!(got.iter().all(|m| !m.contains("W6ph5") && !m.contains("hunter2")));
}

#[test]
fn htpasswd_checks_each_hash_and_line_at_load() {
    let good = bcrypt_hash("pw");
    let cost3 = good.replacen("$04$", "$03$", 1);
    let short = &good[..50];
    let bad_salt = format!("{}!{}", &good[..7], &good[8..]);
    let argon = argon2_hash("pw", argon2::Algorithm::Argon2id);
    let no_hash = argon.rsplit_once('$').unwrap().0.to_string();
    let bad_param = argon.replacen("m=8,", "x=8,", 1);
    let greedy = argon.replacen("m=8,", "m=1048576,", 1);
    let src = format!(
        "a:{cost3}\nb:{short}\nc:{bad_salt}\nd:{no_hash}\ne:{bad_param}\nf:{greedy}\nno colon\n:{good}\ng:\nh:{good}\nh:{good}\n"
    );
    let got = messages(parse_htpasswd("u", &src).unwrap_err());
    assert_eq!(got.len(), 10, "{got:#?}");
    assert_eq!(got[0], "u:1:3: bcrypt hash for user \"a\": cost 3 is outside 4-31");
    assert!(
        got[1].starts_with("u:2:3: malformed bcrypt hash for user \"b\": "),
        "{}",
        got[1]
    );
    assert!(
        got[2].starts_with("u:3:3: malformed bcrypt hash for user \"c\": "),
        "{}",
        got[2]
    );
    assert!(
        got[3].starts_with("u:4:3: malformed argon2 hash for user \"d\": "),
        "{}",
        got[3]
    );
    assert!(
        got[4].starts_with("u:5:3: malformed argon2 hash for user \"e\": "),
        "{}",
        got[4]
    );
    assert!(
        got[5].starts_with("u:6:3: malformed argon2 hash for user \"f\": memory cost m=1048576 KiB"),
        "{}",
        got[5]
    );
    assert_eq!(got[6], "u:7:1: expected user:hash");
    assert_eq!(got[7], "u:8:1: no user name before `:`");
    assert_eq!(got[8], "u:9:3: no password hash for user \"g\"");
    assert_eq!(got[9], "u:11:1: user \"h\" is already listed on line 10");
}

#[test]
fn an_htpasswd_file_without_users_is_an_error() {
    let got = messages(parse_htpasswd("u", "# nobody\n\n").unwrap_err());
    assert_eq!(got, ["u:1:1: no users: add user:hash lines (htpasswd -B)"]);
}

#[test]
fn api_keys_are_stored_by_digest_with_a_name_or_a_label() {
    let src = "# clients\nci   0123456789abcdef  # the CI runner\n\n  fedcba9876543210\nmobile\tk3y#with#hashes\r\n";
    let keys = parse_api_keys("keys", src).unwrap();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys.lookup(b"0123456789abcdef"), Some("ci"));
    let label = ApiKeySet::label(&ApiKeySet::digest(b"fedcba9876543210"));
    assert_eq!(keys.lookup(b"fedcba9876543210"), Some(label.as_str()));
    assert!(label.starts_with("sha256:") && label.len() == 15);
    assert_eq!(keys.lookup(b"k3y#with#hashes"), Some("mobile"));
    assert_eq!(keys.lookup(b"0123456789abcde"), None);
}

#[test]
fn api_key_lines_are_checked_without_quoting_keys() {
    let src = "a b c\nshort\nname \u{e9}t\u{e9}-key-long\n  dup 0123456789abcdef\nother   0123456789abcdef\nn\u{e9}me 0123456789abcdeX\n";
    let got = messages(parse_api_keys("keys", src).unwrap_err());
    assert_eq!(
        got,
        [
            "keys:1:1: expected KEY or NAME KEY, found 3 fields",
            "keys:2:1: key too short (5 characters; at least 8, better 32 random ones: openssl rand -hex 16)",
            "keys:3:6: a key must be visible ASCII",
            "keys:5:9: this key is already listed on line 4",
            "keys:6:1: a key name must be visible ASCII",
        ]
    );
    assert!(got.iter().all(|m| !m.contains("0123")));
    let got = messages(parse_api_keys("keys", "# none\n").unwrap_err());
    assert_eq!(got, ["keys:1:1: no keys: add one KEY or NAME KEY per line"]);
}
