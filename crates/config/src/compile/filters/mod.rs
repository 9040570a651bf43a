//! Compiling HTTP filters: the listener's `filters` list, each route's legacy keys and `filters`
//! list, into the route's chain (`rampart_model::filter::FilterChain`).
//!
//! A filter table is read key by key ([`FilterTable`]): each type takes the keys it knows, every
//! other key is an error at that key, and every value error points at the value. Types are the
//! built-ins (`compile_builtin` in each type's module) or a registered external filter (its
//! options handed to its factory).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use rampart_model::filter::{self, ExternalFilter, Filter, FilterChain, FilterInstance, FilterOptions, OptionValue};
use rampart_model::route::HeaderOps;
use toml::{Spanned, Value};

use super::filter_slots::DefinitionDigest;
use super::{Checker, LiveState};
use crate::raw::{RawFilter, RawRoute};
use crate::units::{parse_duration, parse_size};

mod auth;
pub(crate) mod auth_files;
mod basic;
mod compress;
mod jwt;
pub(crate) mod jwt_key_files;
mod rate_limit;

/// One filter table as it is compiled: its keys, and which of them the type has read.
pub(crate) struct FilterTable<'t> {
    /// The whole table (errors about a missing key point here).
    pub span: Range<usize>,
    pub type_name: &'t str,
    entries: &'t RawFilter,
    read: Vec<&'t str>,
}

impl<'t> FilterTable<'t> {
    /// The value of `key`, if the table has it (and the key counts as known).
    pub fn get(&mut self, key: &str) -> Option<&'t Spanned<Value>> {
        let (k, v) = self.entries.iter().find(|(k, _)| k.get_ref() == key)?;
        self.read.push(k.get_ref());
        Some(v)
    }

    /// Whether the table has `key` (read or not).
    pub fn entries_has(&self, key: &str) -> bool {
        self.entries.keys().any(|k| k.get_ref() == key)
    }

    /// The keys not read, with their spans.
    fn unread(&self) -> Vec<(&'t str, Range<usize>)> {
        self.entries
            .keys()
            .filter(|k| !self.read.contains(&k.get_ref().as_str()))
            .map(|k| (k.get_ref().as_str(), k.span()))
            .collect()
    }
}

impl Checker<'_> {
    /// Compiles a list of filter tables; `scope` says where the list is (`LISTENER` or
    /// `LISTENER/ROUTE`).
    pub(super) fn filter_list(
        &mut self,
        scope: &str,
        list: &[Spanned<RawFilter>],
        live: &mut LiveState,
    ) -> Vec<Arc<FilterInstance>> {
        let mut out = Vec::with_capacity(list.len());
        for (i, table) in list.iter().enumerate() {
            self.filter_scope = format!("{scope}#{}", i + 1);
            self.filter_definition = Some(DefinitionDigest::of_table(table.get_ref()));
            let filter = self.filter(table, live);
            let definition = self.filter_definition.take();
            if let (Some(filter), Some(definition)) = (filter, definition) {
                let slot = live.filter_slot(scope, definition);
                out.push(Arc::new(FilterInstance { slot, filter }));
            }
        }
        out
    }

    /// The chain of a route: the listener's filters (unless the route opts out), the filters its
    /// legacy keys stand for, then its own list.
    pub(super) fn route_chain(
        &mut self,
        scope: &str,
        listener_filters: &[Arc<FilterInstance>],
        route: Option<&RawRoute>,
        live: &mut LiveState,
    ) -> FilterChain {
        let inherit = route
            .and_then(|r| r.inherit_filters.as_ref())
            .is_none_or(|i| *i.get_ref());
        let mut filters: Vec<Arc<FilterInstance>> = if inherit { listener_filters.to_vec() } else { Vec::new() };
        if let Some(r) = route {
            for filter in self.legacy_filters(r) {
                let slot = live.filter_slot(scope, DefinitionDigest::of_settings(&filter));
                filters.push(Arc::new(FilterInstance { slot, filter }));
            }
            filters.extend(self.filter_list(scope, &r.filters, live));
        }
        filter::build_chain(filters)
    }

    fn filter(&mut self, raw: &Spanned<RawFilter>, live: &mut LiveState) -> Option<Filter> {
        let span = raw.span();
        let entries = raw.get_ref();
        let Some((_, type_value)) = entries.iter().find(|(k, _)| k.get_ref() == "type") else {
            self.error(
                span,
                "a filter needs `type` (such as \"request_id\", \"rate_limit\" or \"jwt\")",
            );
            return None;
        };
        let Value::String(type_name) = type_value.get_ref() else {
            self.error(type_value.span(), "a filter's `type` is a string");
            return None;
        };
        let mut table = FilterTable {
            span,
            type_name,
            entries,
            read: vec!["type"],
        };
        let filter = match self.builtin_filter(&mut table, live) {
            Some(built) => built,
            None => return self.external_filter(&mut table, type_value.span(), live),
        };
        // A filter that stopped at an error may not have read every key it knows: its unread
        // keys are only reported once it compiles.
        if filter.is_some() {
            for (key, key_span) in table.unread() {
                self.error(key_span, format!("`{key}` is not a key of a `{type_name}` filter"));
            }
        }
        filter
    }

    /// A built-in filter: `None` when `type` names none (`Some(None)`: it does, with errors).
    fn builtin_filter(&mut self, t: &mut FilterTable<'_>, live: &mut LiveState) -> Option<Option<Filter>> {
        Some(match t.type_name {
            "request_id" => self.request_id_filter(t),
            "ip_filter" => self.ip_filter(t),
            "cors" => self.cors_filter(t),
            "compress" => self.compress_filter(t),
            "rewrite" => self.rewrite_filter(t),
            "request_headers" => self
                .header_ops_filter(t)
                .map(|ops| Filter::RequestHeaders(filter::RequestHeaders { ops })),
            "response_headers" => {
                let always = self.filter_bool(t, "always", false);
                self.header_ops_filter(t)
                    .map(|ops| Filter::ResponseHeaders(filter::ResponseHeaders { ops, always }))
            }
            "body_limit" => self.body_limit_filter(t),
            "jwt" => self.jwt_filter(t, live),
            "rate_limit" => self.rate_limit_filter(t, live),
            "basic_auth" => self.basic_auth_filter(t),
            "api_key" => self.api_key_filter(t),
            "forward_auth" => self.forward_auth_filter(t, live),
            _ => return None,
        })
    }

    /// A filter registered from outside: its options go to its factory.
    fn external_filter(
        &mut self,
        t: &mut FilterTable<'_>,
        type_span: Range<usize>,
        live: &LiveState,
    ) -> Option<Filter> {
        let Some(factory) = live.filter_registry().get(t.type_name) else {
            let mut known: Vec<&str> = filter::BUILTIN_FILTER_TYPES.to_vec();
            known.extend(live.filter_registry().names());
            self.error(
                type_span,
                match crate::compile::suggest::closest(t.type_name, known.iter().copied()) {
                    Some(near) => format!("unknown filter type `{}` (did you mean `{near}`?)", t.type_name),
                    None => format!("unknown filter type `{}` (known: {})", t.type_name, known.join(", ")),
                },
            );
            return None;
        };
        let options: FilterOptions = t
            .entries
            .iter()
            .filter(|(k, _)| k.get_ref() != "type")
            .map(|(k, v)| (k.get_ref().clone(), option_value(v.get_ref())))
            .collect();
        match factory.build(&options) {
            Ok(instance) => Some(Filter::External(ExternalFilter {
                type_name: t.type_name.to_string(),
                instance,
            })),
            Err(message) => {
                self.error(t.span.clone(), format!("`{}` filter: {message}", t.type_name));
                None
            }
        }
    }

    /// The filters a route's legacy keys stand for: `max_body_size`, then `strip_prefix`,
    /// `replace_prefix` and `rewrite`, then `request_headers` and `response_headers`.
    fn legacy_filters(&mut self, r: &RawRoute) -> Vec<Filter> {
        let mut out = Vec::new();
        if r.max_body_size.is_some() {
            let max = self.size(&r.max_body_size, 0, 0, u64::MAX / 2) as u64;
            out.push(Filter::BodyLimit(filter::BodyLimit { max }));
        }
        if let Some(rewrite) = self.legacy_rewrite(r) {
            out.push(Filter::Rewrite(rewrite));
        }
        if let Some(always) = &r.request_headers.always {
            self.error(
                always.span(),
                "`always` is for response_headers (request headers have no status to depend on)",
            );
        }
        if !r.request_headers.is_empty() {
            if let Some(ops) = self.raw_header_ops(&r.request_headers, "request_headers") {
                out.push(Filter::RequestHeaders(filter::RequestHeaders { ops }));
            }
        }
        if !r.response_headers.is_empty() {
            if let Some(ops) = self.raw_header_ops(&r.response_headers, "response_headers") {
                let always = r.response_headers.always.as_ref().is_some_and(|a| *a.get_ref());
                out.push(Filter::ResponseHeaders(filter::ResponseHeaders { ops, always }));
            }
        }
        out
    }

    // Value readers: each reports a wrong type at the value.

    /// A string value.
    pub(crate) fn filter_string(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<Spanned<String>> {
        let v = t.get(key)?;
        match v.get_ref() {
            Value::String(s) => Some(Spanned::new(v.span(), s.clone())),
            _ => {
                self.error(v.span(), format!("`{key}` is a string"));
                None
            }
        }
    }

    /// A boolean value, or `default`.
    pub(crate) fn filter_bool(&mut self, t: &mut FilterTable<'_>, key: &str, default: bool) -> bool {
        let Some(v) = t.get(key) else { return default };
        match v.get_ref() {
            Value::Boolean(b) => *b,
            _ => {
                self.error(v.span(), format!("`{key}` is true or false"));
                default
            }
        }
    }

    /// A whole number in `min..=max`, or `default`.
    pub(crate) fn filter_int(&mut self, t: &mut FilterTable<'_>, key: &str, default: i64, min: i64, max: i64) -> i64 {
        let Some(v) = t.get(key) else { return default };
        match v.get_ref() {
            Value::Integer(n) if (min..=max).contains(n) => *n,
            Value::Integer(n) => {
                self.error(v.span(), format!("`{key}` = {n} is out of range ({min} to {max})"));
                default
            }
            _ => {
                self.error(v.span(), format!("`{key}` is a whole number"));
                default
            }
        }
    }

    /// A list of strings (a single string counts as a list of one).
    pub(crate) fn filter_strings(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<Spanned<Vec<String>>> {
        let v = t.get(key)?;
        let list = match v.get_ref() {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        match list {
            Some(list) => Some(Spanned::new(v.span(), list)),
            None => {
                self.error(v.span(), format!("`{key}` is a list of strings"));
                None
            }
        }
    }

    /// A table of strings (`{ name = "value" }`), in the file's order of keys (sorted).
    pub(crate) fn filter_string_table(
        &mut self,
        t: &mut FilterTable<'_>,
        key: &str,
    ) -> Option<Spanned<Vec<(String, String)>>> {
        let v = t.get(key)?;
        let pairs = match v.get_ref() {
            Value::Table(table) => table
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Some((k.clone(), s.clone())),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        match pairs {
            Some(pairs) => Some(Spanned::new(v.span(), pairs)),
            None => {
                self.error(
                    v.span(),
                    format!("`{key}` is a table of strings, such as {{ name = \"value\" }}"),
                );
                None
            }
        }
    }

    /// A duration (`"5s"`), greater than zero.
    pub(crate) fn filter_duration(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<Duration> {
        let v = self.filter_string(t, key)?;
        match parse_duration(v.get_ref()) {
            Ok(d) if d.is_zero() => {
                self.error(v.span(), "duration must be greater than zero");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.error(v.span(), e);
                None
            }
        }
    }

    /// A size (`"10MiB"`, or a whole number of bytes).
    pub(crate) fn filter_size(&mut self, t: &mut FilterTable<'_>, key: &str) -> Option<u64> {
        let v = t.get(key)?;
        let parsed = match v.get_ref() {
            Value::Integer(n) if *n >= 0 => Ok(*n as u64),
            Value::String(s) => parse_size(s),
            _ => Err(format!("`{key}` is a size, such as \"10MiB\"")),
        };
        match parsed {
            Ok(n) => Some(n),
            Err(e) => {
                self.error(v.span(), e);
                None
            }
        }
    }

    /// A key the type needs: an error at the table when it is missing.
    pub(crate) fn filter_required<T>(&mut self, t: &FilterTable<'_>, key: &str, value: Option<T>) -> Option<T> {
        if value.is_none() && !t.entries_has(key) {
            self.error(t.span.clone(), format!("a `{}` filter needs `{key}`", t.type_name));
        }
        value
    }

    /// Header edits read from a filter table's `set`, `add` and `remove`.
    fn header_ops_filter(&mut self, t: &mut FilterTable<'_>) -> Option<HeaderOps> {
        let mut ops = HeaderOps::default();
        for name in self
            .filter_strings(t, "remove")
            .map(Spanned::into_inner)
            .unwrap_or_default()
        {
            ops.remove.push(name.to_ascii_lowercase());
        }
        ops.set = self
            .filter_string_table(t, "set")
            .map(Spanned::into_inner)
            .unwrap_or_default();
        ops.add = self
            .filter_string_table(t, "add")
            .map(Spanned::into_inner)
            .unwrap_or_default();
        // The table's entries carry no place of their own: errors point at the filter.
        let what = format!("a `{}` filter", t.type_name);
        let mut ok = true;
        for name in &ops.remove {
            ok &= self.check_header_name(t.span.clone(), name, &what);
        }
        for (name, value) in ops.set.iter().chain(&ops.add) {
            ok &= self.check_header_name(t.span.clone(), name, &what)
                && self.check_header_value(t.span.clone(), name, value, &what);
        }
        if !ok {
            return None;
        }
        if ops.is_empty() {
            self.error(
                t.span.clone(),
                format!("a `{}` filter needs `set`, `add` or `remove`", t.type_name),
            );
            return None;
        }
        Some(ops)
    }
}

/// A TOML value without the file format.
fn option_value(v: &Value) -> OptionValue {
    match v {
        Value::String(s) => OptionValue::String(s.clone()),
        Value::Integer(n) => OptionValue::Integer(*n),
        Value::Float(f) => OptionValue::Float(*f),
        Value::Boolean(b) => OptionValue::Boolean(*b),
        Value::Datetime(d) => OptionValue::String(d.to_string()),
        Value::Array(items) => OptionValue::Array(items.iter().map(option_value).collect()),
        Value::Table(t) => OptionValue::Table(t.iter().map(|(k, v)| (k.clone(), option_value(v))).collect()),
    }
}

#[cfg(test)]
mod tests;
