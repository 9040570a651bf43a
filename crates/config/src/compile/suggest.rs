//! "Did you mean ...?": a mistyped key, policy or name gets the one valid word it is most likely a
//! typo of, instead of the whole list of valid words. The list is still given when nothing is
//! close.

/// The candidate `word` is most likely a typo of, if one is close: within two edits (a missed,
/// doubled or swapped letter), or sharing a long prefix with it (`leastconn` for
/// `least_connections`), by Jaro-Winkler similarity.
pub(crate) fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|c| !c.is_empty())
        .map(|c| {
            let edits = strsim::damerau_levenshtein(&word, &c.to_ascii_lowercase());
            let similar = strsim::jaro_winkler(&word, &c.to_ascii_lowercase());
            let close = (edits <= 2 && edits < c.len().max(word.len())) || similar >= 0.85;
            (c, close, edits, similar)
        })
        .filter(|(_, close, ..)| *close)
        .min_by(|a, b| a.2.cmp(&b.2).then(b.3.total_cmp(&a.3)))
        .map(|(c, ..)| c)
}

/// `(did you mean `X`?)` when one candidate is close, else `(expected one of: a, b, c)`.
pub(crate) fn hint<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str> + Clone) -> String {
    match closest(word, candidates.clone()) {
        Some(c) => format!("(did you mean `{c}`?)"),
        None => {
            let all: Vec<&str> = candidates.into_iter().collect();
            format!("(expected one of: {})", all.join(", "))
        }
    }
}

/// `(defined: a, b)` for a name that refers to nothing, led by `did you mean `a`?` when one is
/// close; `defined` is the list as messages show it (`a, b`).
pub(crate) fn defined(word: &str, defined: &str) -> String {
    match closest(word, defined.split(", ")) {
        Some(c) => format!("(did you mean `{c}`? defined: {defined})"),
        None => format!("(defined: {defined})"),
    }
}

/// Keys other proxies use for one Rampart names otherwise: (their word, Rampart's, whose word).
const OTHER_PROXIES: &[(&str, &str, &str)] = &[
    ("listen", "bind", "nginx's"),
    ("server", "targets", "nginx's"),
    ("servers", "targets", "HAProxy's and nginx's"),
    ("backends", "targets", "Traefik's"),
    ("proxy_pass", "upstream", "nginx's"),
    ("backend", "upstream", "HAProxy's"),
    ("location", "routes", "nginx's"),
    ("locations", "routes", "nginx's"),
    ("worker_processes", "workers", "nginx's"),
    ("ssl", "tls", "nginx's"),
    ("ssl_certificate", "cert", "nginx's"),
    ("ssl_certificate_key", "key", "nginx's"),
];

/// Longer lists of valid keys are not printed whole (a table can have two dozen).
const LIST_AT_MOST: usize = 8;

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a` or `b`") and "unknown
/// variant" messages, said with a suggestion.
pub(crate) fn unknown_name_message(message: &str) -> Option<String> {
    let (kind, rest) = if let Some(rest) = message.strip_prefix("unknown field `") {
        ("key", rest)
    } else if let Some(rest) = message.strip_prefix("unknown variant `") {
        ("value", rest)
    } else {
        return None;
    };
    let (word, expected) = rest.split_once('`')?;
    let expected = expected.trim_start_matches(',').trim();
    let list = expected
        .strip_prefix("expected one of ")
        .or_else(|| expected.strip_prefix("expected "))
        .unwrap_or("");
    let candidates: Vec<&str> = list
        .split(['`', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "or")
        .collect();
    if candidates.is_empty() {
        return Some(format!("unknown {kind} `{word}`"));
    }
    if kind == "key" {
        let other = OTHER_PROXIES
            .iter()
            .find(|(theirs, ours, _)| *theirs == word && candidates.contains(ours));
        if let Some((theirs, ours, whose)) = other {
            return Some(format!(
                "unknown key `{theirs}` (did you mean `{ours}`? `{theirs}` is {whose} word for it)"
            ));
        }
    }
    if kind == "key" && candidates.len() > LIST_AT_MOST && closest(word, candidates.iter().copied()).is_none() {
        return Some(format!(
            "unknown key `{word}` (no key of this table is close to it; docs/config.md lists them)"
        ));
    }
    Some(format!(
        "unknown {kind} `{word}` {}",
        hint(word, candidates.iter().copied())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_proxies_words_get_ramparts() {
        assert_eq!(
            unknown_name_message("unknown field `listen`, expected one of `bind`, `protocol`, `upstream`").as_deref(),
            Some("unknown key `listen` (did you mean `bind`? `listen` is nginx's word for it)")
        );
        // Only where Rampart's word is a key of that table.
        assert_eq!(
            unknown_name_message("unknown field `listen`, expected `cert` or `key`").as_deref(),
            Some("unknown key `listen` (expected one of: cert, key)")
        );
    }

    #[test]
    fn typos_get_the_word_they_are_near() {
        let policies = ["round_robin", "least_connections", "random_two", "consistent_hash"];
        assert_eq!(closest("leastconn", policies), Some("least_connections"));
        assert_eq!(closest("round-robin", policies), Some("round_robin"));
        assert_eq!(closest("upstrem", ["bind", "upstream", "protocol"]), Some("upstream"));
        assert_eq!(closest("xyz", ["bind", "upstream", "protocol"]), None);
        assert_eq!(closest("a", ["b"]), None);
    }

    #[test]
    fn serde_messages_become_suggestions() {
        assert_eq!(
            unknown_name_message("unknown field `upstrem`, expected one of `bind`, `protocol`, `upstream`").as_deref(),
            Some("unknown key `upstrem` (did you mean `upstream`?)")
        );
        assert_eq!(
            unknown_name_message("unknown field `zzz`, expected `cert` or `key`").as_deref(),
            Some("unknown key `zzz` (expected one of: cert, key)")
        );
        assert_eq!(
            unknown_name_message("unknown field `bogus`").as_deref(),
            Some("unknown key `bogus`")
        );
        assert_eq!(unknown_name_message("invalid type: string"), None);
    }
}
