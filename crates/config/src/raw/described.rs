//! Text values that say what they hold when they have the wrong type: `idle_timeout = 5` is
//! refused with `expected a duration such as "5s"` rather than `expected a string`.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, Visitor};
use toml::Spanned;

/// What a kind of text value holds, for type errors.
trait Kind {
    const EXPECTING: &'static str;
}

struct Duration;
impl Kind for Duration {
    const EXPECTING: &'static str = "a duration such as \"5s\"";
}

struct Size;
impl Kind for Size {
    const EXPECTING: &'static str = "a size such as \"64KiB\"";
}

/// A string that expects to be a `K`.
struct Described<K>(String, PhantomData<K>);

impl<'de, K: Kind> Deserialize<'de> for Described<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor<K>(PhantomData<K>);
        impl<K: Kind> Visitor<'_> for TextVisitor<K> {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(K::EXPECTING)
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<String, E> {
                Ok(v.to_string())
            }
        }
        d.deserialize_str(TextVisitor::<K>(PhantomData))
            .map(|s| Described(s, PhantomData))
    }
}

fn described<'de, K: Kind, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    let v = Spanned::<Described<K>>::deserialize(d)?;
    let span = v.span();
    Ok(Some(Spanned::new(span, v.into_inner().0)))
}

/// `deserialize_with` for an optional duration (`"5s"`); give the field `#[serde(default)]`.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    described::<Duration, D>(d)
}

/// `deserialize_with` for an optional size (`"64KiB"`); give the field `#[serde(default)]`.
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    described::<Size, D>(d)
}
