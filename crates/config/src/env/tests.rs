use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "PORT" => Some("8080".into()),
        "HOST" => Some("example.com".into()),
        "QUOTE" => Some("a\"b\\c\nd = 1\n[admin]".into()),
        "APOS" => Some("it's".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn run(text: &str) -> Result<String, Vec<EnvError>> {
    substitute(text, &env).map(|s| s.text)
}

#[test]
fn references_are_replaced_in_strings_and_bare_values() {
    assert_eq!(
        run("bind = \"127.0.0.1:${PORT}\"\nport = ${PORT}\nname = '${HOST}'\n").unwrap(),
        "bind = \"127.0.0.1:8080\"\nport = 8080\nname = 'example.com'\n"
    );
    assert_eq!(
        run("a = \"\"\"x ${HOST} y\"\"\"").unwrap(),
        "a = \"\"\"x example.com y\"\"\""
    );
    assert_eq!(run("a = '''${HOST}'''").unwrap(), "a = '''example.com'''");
}

#[test]
fn defaults_apply_when_unset_or_empty() {
    assert_eq!(run("a = \"${NOPE:-fallback}\"").unwrap(), "a = \"fallback\"");
    assert_eq!(run("a = \"${EMPTY:-fallback}\"").unwrap(), "a = \"fallback\"");
    assert_eq!(run("a = \"${EMPTY}\"").unwrap(), "a = \"\"");
    assert_eq!(run("a = \"${NOPE:-}\"").unwrap(), "a = \"\"");
    assert_eq!(run("a = \"${PORT:-1}\"").unwrap(), "a = \"8080\"");
}

#[test]
fn comments_and_escaped_references_stay_as_written() {
    assert_eq!(
        run("# ${NOPE} in a comment\na = 1 # ${NOPE}\n").unwrap(),
        "# ${NOPE} in a comment\na = 1 # ${NOPE}\n"
    );
    assert_eq!(
        run("a = \"$${NOPE} and $$ and $x\"").unwrap(),
        "a = \"${NOPE} and $$ and $x\""
    );
    // A `#` inside a string starts no comment.
    assert_eq!(run("a = \"#${PORT}\"").unwrap(), "a = \"#8080\"");
    // A quote inside a comment starts no string.
    assert_eq!(run("# it's\na = ${PORT}").unwrap(), "# it's\na = 8080");
}

#[test]
fn an_unset_variable_without_default_is_an_error_at_its_reference() {
    let errors = run("a = 1\nb = \"x${MISSING}\"\n").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].at.start, "a = 1\nb = \"x".len());
    assert_eq!(
        errors[0].message,
        "environment variable MISSING is not set (write ${MISSING:-default} for a default)"
    );
}

#[test]
fn malformed_references_are_errors() {
    for text in [
        "a = \"${\"",
        "a = \"${1X}\"",
        "a = \"${A-b}\"",
        "a = \"${}\"",
        "a = \"${A\n}\"",
    ] {
        assert!(run(text).is_err(), "{text}");
    }
}

/// A value with a quote, a backslash and a newline stays one string value: it cannot end the
/// string and add keys or tables of its own.
#[test]
fn a_value_cannot_break_out_of_a_basic_string() {
    let text = run("a = \"${QUOTE}\"\nb = \"\"\"${QUOTE}\"\"\"\n").unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(table.len(), 2, "{text}");
    assert_eq!(table["a"].as_str(), Some("a\"b\\c\nd = 1\n[admin]"));
    assert_eq!(table["b"].as_str(), Some("a\"b\\c\nd = 1\n[admin]"));
}

#[test]
fn a_value_that_a_literal_string_or_a_bare_value_cannot_hold_is_an_error() {
    let errors = run("a = '${APOS}'").unwrap_err();
    assert!(errors[0].message.contains("APOS"), "{errors:?}");
    assert!(run("a = '''${APOS}'''").is_err());
    // A newline is fine in a multi-line literal string, not in a one-line one.
    assert!(run("a = '''${QUOTE}'''").is_ok());
    assert!(run("a = '${QUOTE}'").is_err());
    // Outside a string only a bare word goes.
    let errors = run("a = ${QUOTE}").unwrap_err();
    assert!(errors[0].message.contains("outside a string"), "{errors:?}");
    assert!(run("a = ${HOST}").is_ok());
    assert!(run("a = ${EMPTY}").is_err());
}

#[test]
fn offsets_map_back_to_the_text_as_written() {
    let original = "a = \"${HOST}\" # x\nb = $${PORT}\nc = ${PORT}x";
    let s = substitute(original, &env).unwrap();
    // Before the reference: unchanged.
    assert_eq!(s.offsets.original(2), 2);
    // Inside the value: the reference's `$`.
    let value_at = s.text.find("example").unwrap();
    assert_eq!(s.offsets.original(value_at + 3), original.find("${HOST}").unwrap());
    // After it: shifted back by the difference in length.
    let hash = s.text.find('#').unwrap();
    assert_eq!(s.offsets.original(hash), original.find('#').unwrap());
    // After `$${`: the dropped `$` is accounted for.
    let b_brace = s.text.find("{PORT}").unwrap();
    assert_eq!(s.offsets.original(b_brace), original.find("{PORT}").unwrap());
    let x = s.text.rfind('x').unwrap();
    assert_eq!(s.offsets.original(x), original.rfind('x').unwrap());
}

#[test]
fn a_regex_group_reference_says_how_to_write_it() {
    let errors = run("replacement = \"/v2/${1}x\"").unwrap_err();
    assert!(errors[0].message.contains("$${1}"), "{errors:?}");
    assert_eq!(
        run("replacement = \"/v2/$${1}x\"").unwrap(),
        "replacement = \"/v2/${1}x\""
    );
}
