use argon2::password_hash::{PasswordHasher, SaltString};

use super::*;

fn bcrypt_hash(password: &str) -> PasswordHash {
    PasswordHash::Bcrypt(bcrypt::hash(password, 4).unwrap())
}

fn argon2_hash(password: &str, algorithm: argon2::Algorithm) -> PasswordHash {
    let params = argon2::Params::new(64, 1, 1, None).unwrap();
    let salt = SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    let hash = argon2::Argon2::new(algorithm, argon2::Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .unwrap();
    PasswordHash::Argon2(hash.to_string())
}

#[test]
fn bcrypt_hashes_of_every_prefix_verify() {
    let hash = bcrypt_hash("correct horse");
    assert!(verify_password(&hash, b"correct horse"));
    assert!(!verify_password(&hash, b"correct horsE"));
    assert!(!verify_password(&hash, b""));
    // htpasswd -B writes $2y$; older tools $2a$: the same hash under another prefix.
    for prefix in ["$2y$", "$2a$"] {
        let other = PasswordHash::Bcrypt(hash.as_str().replacen("$2b$", prefix, 1));
        assert!(verify_password(&other, b"correct horse"), "{prefix}");
        assert!(!verify_password(&other, b"wrong"), "{prefix}");
    }
    // A hash that does not parse matches nothing (no panic).
    assert!(!verify_password(&PasswordHash::Bcrypt("$2y$04$short".into()), b"x"));
}

#[test]
fn argon2_hashes_verify_with_their_own_parameters() {
    for algorithm in [
        argon2::Algorithm::Argon2id,
        argon2::Algorithm::Argon2i,
        argon2::Algorithm::Argon2d,
    ] {
        let hash = argon2_hash("s3cret", algorithm);
        // Parameters (m=64, t=1) differ from argon2's defaults: the hash's own are used.
        assert!(hash.as_str().contains("m=64,t=1,p=1"), "{hash:?}");
        assert!(verify_password(&hash, b"s3cret"), "{algorithm:?}");
        assert!(!verify_password(&hash, b"s3cre"), "{algorithm:?}");
    }
    assert!(!verify_password(
        &PasswordHash::Argon2("$argon2id$nonsense".into()),
        b"x"
    ));
}

#[test]
fn digests_separate_users_passwords_and_hashes() {
    let h1 = PasswordHash::Bcrypt("$2y$04$aaaa".into());
    let h2 = PasswordHash::Bcrypt("$2y$04$bbbb".into());
    let d = credential_digest(b"ab", b"c", &h1);
    assert_eq!(d, credential_digest(b"ab", b"c", &h1));
    assert_ne!(d, credential_digest(b"a", b"bc", &h1), "parts are length-prefixed");
    assert_ne!(d, credential_digest(b"ab", b"d", &h1));
    assert_ne!(d, credential_digest(b"ab", b"c", &h2), "a new hash for the user misses");
}

#[test]
fn accepted_and_refused_outcomes_expire_on_their_own_clocks() {
    let t0 = Instant::now();
    let mut cache = PasswordCache::new(8, Duration::from_secs(300), Duration::from_secs(10));
    let good = [1u8; 32];
    let bad = [2u8; 32];
    assert_eq!(cache.lookup(&good, t0), None);
    cache.record(good, true, t0);
    cache.record(bad, false, t0);
    assert_eq!(cache.lookup(&good, t0 + Duration::from_secs(299)), Some(true));
    assert_eq!(cache.lookup(&bad, t0 + Duration::from_secs(9)), Some(false));
    // The refusal is forgotten after its short expiry, the acceptance after its long one.
    assert_eq!(cache.lookup(&bad, t0 + Duration::from_secs(10)), None);
    assert_eq!(cache.len(), (1, 0), "an expired entry is dropped when met");
    assert_eq!(cache.lookup(&good, t0 + Duration::from_secs(300)), None);
    assert_eq!(cache.len(), (0, 0));
}

#[test]
fn a_full_side_drops_expired_entries_first_then_everything() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(10);
    let mut cache = PasswordCache::new(3, ttl, ttl);
    cache.record([1; 32], true, t0);
    cache.record([2; 32], true, t0 + Duration::from_secs(5));
    cache.record([3; 32], true, t0 + Duration::from_secs(5));
    // Full; at t0+10 the first has expired and makes room, the others stay.
    let t1 = t0 + Duration::from_secs(10);
    cache.record([4; 32], true, t1);
    assert_eq!(cache.len(), (3, 0));
    assert_eq!(cache.lookup(&[2; 32], t1), Some(true));
    assert_eq!(cache.lookup(&[4; 32], t1), Some(true));
    // Full with nothing expired: emptied, then the new entry goes in.
    cache.record([5; 32], true, t1);
    assert_eq!(cache.len(), (1, 0));
    assert_eq!(cache.lookup(&[5; 32], t1), Some(true));
    assert_eq!(cache.lookup(&[2; 32], t1), None);
    // Refreshing an entry that is there never empties a full side.
    cache.record([6; 32], true, t1);
    cache.record([7; 32], true, t1);
    cache.record([7; 32], true, t1 + Duration::from_secs(1));
    assert_eq!(cache.len(), (3, 0));
    // The refused side has its own room.
    for i in 10..13 {
        cache.record([i; 32], false, t1);
    }
    assert_eq!(cache.len(), (3, 3));
}
