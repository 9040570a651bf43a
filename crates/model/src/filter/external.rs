//! Filters from outside the built-ins: a program that embeds Rampart registers a factory under a
//! `type` name; the config compiler hands each `{ type = "NAME", ... }` table's other keys to that
//! factory as [`FilterOptions`] and keeps what it builds. The model cannot name the data plane's
//! filter trait, so the built filter travels type-erased; the data plane turns it back into its
//! trait object (`rampart_proxy::http::filter::external`).

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A filter value as the config wrote it, without the file format.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Array(Vec<OptionValue>),
    Table(BTreeMap<String, OptionValue>),
}

/// A filter table's keys other than `type`.
pub type FilterOptions = BTreeMap<String, OptionValue>;

/// Builds one configured instance of an external filter from its options; an error is the
/// message shown at the filter's table (`FILE:LINE:COL: MESSAGE`).
pub trait ExternalFactory: Send + Sync {
    fn build(&self, options: &FilterOptions) -> Result<Arc<dyn Any + Send + Sync>, String>;
}

impl<F> ExternalFactory for F
where
    F: Fn(&FilterOptions) -> Result<Arc<dyn Any + Send + Sync>, String> + Send + Sync,
{
    fn build(&self, options: &FilterOptions) -> Result<Arc<dyn Any + Send + Sync>, String> {
        self(options)
    }
}

/// A configured external filter.
#[derive(Clone)]
pub struct ExternalFilter {
    pub type_name: String,
    /// What the factory built (the data plane knows its real type).
    pub instance: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for ExternalFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExternalFilter")
            .field("type_name", &self.type_name)
            .finish()
    }
}

/// The external filter types a process knows, by `type` name.
#[derive(Clone, Default)]
pub struct FilterRegistry {
    factories: BTreeMap<String, Arc<dyn ExternalFactory>>,
}

impl fmt::Debug for FilterRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.factories.keys()).finish()
    }
}

impl FilterRegistry {
    /// Registers `factory` under `type_name` (replacing an earlier one of that name).
    pub fn register(&mut self, type_name: &str, factory: Arc<dyn ExternalFactory>) {
        self.factories.insert(type_name.to_string(), factory);
    }

    /// The factory registered under `type_name`.
    pub fn get(&self, type_name: &str) -> Option<&Arc<dyn ExternalFactory>> {
        self.factories.get(type_name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}
