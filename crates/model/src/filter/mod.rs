//! HTTP filters as compiled: each route's ordered chain of filters, their settings, and the
//! registry through which filters written outside Rampart's built-ins are configured.
//!
//! A route's chain is the listener's filters (shared by every route of the listener, unless a
//! route opts out), then the filters its own legacy keys stand for (`strip_prefix`,
//! `request_headers`, `max_body_size`, ...), then its `filters` list. The data plane runs a chain
//! (`rampart_proxy::http::filter`); this module only holds what it runs.
//!
//! Static request and response header edits are folded into the chain's starting edits when no
//! filter could observe the difference, so that a route whose filters are only header edits costs
//! nothing per request.

use std::sync::Arc;

use crate::route::HeaderOps;

pub mod auth;
pub mod basic;
pub mod compress;
pub mod endpoint;
pub mod external;
pub mod forward_auth;
pub mod jwt;
pub mod rate_limit;

pub use auth::{ApiKey, BasicAuth};
pub use basic::{
    is_success_status, BodyLimit, Cors, IpFilter, OriginMatch, RequestHeaders, RequestId, ResponseHeaders, Rewrite,
};
/// The `compress` filter's settings under the name of its [`Filter`] variant (the data plane's
/// dispatch list names each built-in by its variant).
pub use compress::CompressSettings as Compress;
pub use external::{ExternalFactory, ExternalFilter, FilterOptions, FilterRegistry, OptionValue};
pub use forward_auth::ForwardAuth;
pub use jwt::Jwt;
pub use rate_limit::RateLimitFilter;

/// The identity of one filter definition, process-unique: the owner of the state that filter
/// keeps per worker (caches, leases, connections). The config compiler hands one out per filter
/// it has not seen before and gives a filter the id it had in the previous snapshot when a reload
/// leaves its definition as it was (see [`FilterSlot`]). Ids are never reused within a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FilterId(u64);

impl FilterId {
    /// A new id, never handed out before in this process.
    pub fn new() -> FilterId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        FilterId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The number itself.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Default for FilterId {
    fn default() -> Self {
        FilterId::new()
    }
}

/// Where a filter keeps its per-worker state: `index` into each worker's list of filter slots
/// (dense and small: the config compiler allocates it), and the filter definition that owns
/// the slot. A worker finds a filter's state by the index, with no hash; a slot whose owner is
/// another definition (an index a reload handed to a new filter while requests of the old
/// snapshot still ran) starts over empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FilterSlot {
    pub index: u32,
    pub owner: FilterId,
}

impl FilterSlot {
    /// Slot `index` for a new owner (what a compiler without a previous snapshot hands out).
    pub fn fresh(index: u32) -> FilterSlot {
        FilterSlot {
            index,
            owner: FilterId::new(),
        }
    }
}

/// A filter as a snapshot holds it: its compiled settings and the slot of its per-worker state.
#[derive(Debug)]
pub struct FilterInstance {
    pub slot: FilterSlot,
    pub filter: Filter,
}

impl FilterInstance {
    /// `filter` with a new owner of slot 0, for chains built by hand (tests). Filters that
    /// share an index with different owners are correct but keep no per-worker state for long
    /// (each use by the other owner starts the slot over); the config compiler gives every
    /// filter an index of its own.
    pub fn unslotted(filter: Filter) -> FilterInstance {
        FilterInstance {
            slot: FilterSlot::fresh(0),
            filter,
        }
    }
}

impl std::ops::Deref for FilterInstance {
    type Target = Filter;

    fn deref(&self) -> &Filter {
        &self.filter
    }
}

/// A route's filters in the order they see a request (responses see them in reverse).
#[derive(Debug, Default)]
pub struct FilterChain {
    /// Filters run per request. Listener filters are shared (the same `Arc`) by the routes that
    /// inherit them, so a listener-wide limit counts every route's requests together.
    pub filters: Vec<Arc<FilterInstance>>,
    /// The request header edits every proxied request starts with (static edits folded in).
    pub request_edits: HeaderOps,
    /// The response header edits every response starts with (static edits folded in).
    pub response_edits: ResponseEdits,
}

/// The static response header edits of a chain, folded: those a response of a success status
/// starts with (every folded `response_headers`), and those any other starts with (the ones with
/// `always` alone).
#[derive(Debug, Default, Clone)]
pub struct ResponseEdits {
    pub on_success: HeaderOps,
    pub on_any_status: HeaderOps,
}

impl ResponseEdits {
    /// The edits a response of `status` starts with.
    pub fn for_status(&self, status: u16) -> &HeaderOps {
        if is_success_status(status) {
            &self.on_success
        } else {
            &self.on_any_status
        }
    }

    /// Whether no response is edited (the `always` edits are among the success ones).
    pub fn is_empty(&self) -> bool {
        self.on_success.is_empty()
    }
}

impl FilterChain {
    /// Whether requests on this route run no filter at all (static edits aside).
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

/// The built-in filters, listed once: each one's variant of [`Filter`], its settings type (in
/// this module) and the `type` name that configures it. The model writes [`Filter`],
/// [`Filter::type_name`] and [`BUILTIN_FILTER_TYPES`] from it; the data plane writes its dispatch
/// and state enums from it (`rampart_model::with_builtin_filters!(its_macro)` calls `its_macro!`
/// with the list). Adding a built-in: a line here, its settings beside the others, its keys in
/// `rampart-config`, its `HttpFilter` in `rampart-proxy`.
#[macro_export]
macro_rules! with_builtin_filters {
    ($callback:ident) => {
        $callback! {
            /// Keep or make an `X-Request-Id`.
            RequestId(RequestId) = "request_id",
            /// Allow or deny client networks.
            IpFilter(IpFilter) = "ip_filter",
            /// Cross-origin resource sharing: preflights answered, response headers added.
            Cors(Cors) = "cors",
            /// Response bodies compressed on the fly (gzip, brotli, zstd) by `Accept-Encoding`.
            Compress(Compress) = "compress",
            /// Path rewrites (`strip_prefix`, `replace_prefix`, `rewrite`).
            Rewrite(Rewrite) = "rewrite",
            /// Header edits on the request sent upstream.
            RequestHeaders(RequestHeaders) = "request_headers",
            /// Header edits on the response sent to the client.
            ResponseHeaders(ResponseHeaders) = "response_headers",
            /// Largest request body accepted; past it, 413.
            BodyLimit(BodyLimit) = "body_limit",
            /// Verify a JSON Web Token; forward selected claims.
            Jwt(Jwt) = "jwt",
            /// A token bucket per key, in this process or in Redis.
            RateLimit(RateLimitFilter) = "rate_limit",
            /// HTTP Basic authentication against an htpasswd file.
            BasicAuth(BasicAuth) = "basic_auth",
            /// API keys from a key file, in a header, a query parameter or a bearer token.
            ApiKey(ApiKey) = "api_key",
            /// A sub-request to an auth service decides.
            ForwardAuth(ForwardAuth) = "forward_auth",
        }
    };
}

/// Writes [`Filter`] and what follows from the list of built-ins.
macro_rules! declare_filters {
    ($($(#[$doc:meta])* $name:ident($settings:ident) = $type_name:literal,)*) => {
        /// One filter with its compiled settings.
        // Each filter is built once per config load and lives behind an `Arc`: the size of the
        // largest variant costs nothing per request.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        pub enum Filter {
            $($(#[$doc])* $name($settings),)*
            /// A filter registered from outside the built-ins.
            External(ExternalFilter),
        }

        /// The `type` names of the built-in filters.
        pub const BUILTIN_FILTER_TYPES: &[&str] = &[$($type_name),*];

        impl Filter {
            /// The `type` that configures it.
            pub fn type_name(&self) -> &str {
                match self {
                    $(Filter::$name(_) => $type_name,)*
                    Filter::External(e) => &e.type_name,
                }
            }
        }
    };
}

with_builtin_filters!(declare_filters);

impl Filter {
    /// Whether running it per request may change the request's header edits in a way that
    /// depends on the request (so static edits after it cannot be folded into the chain's start).
    pub fn edits_request_headers_per_request(&self) -> bool {
        match self {
            Filter::RequestId(_) | Filter::Jwt(_) | Filter::External(_) => true,
            Filter::BasicAuth(f) => f.forward_user_header.is_some() || f.hide_credentials,
            Filter::ApiKey(f) => f.forward_name_header.is_some() || f.hide_credentials,
            Filter::ForwardAuth(f) => !f.response_headers.is_empty(),
            Filter::Rewrite(_)
            | Filter::RequestHeaders(_)
            | Filter::ResponseHeaders(_)
            | Filter::BodyLimit(_)
            | Filter::IpFilter(_)
            | Filter::Cors(_)
            | Filter::RateLimit(_)
            | Filter::Compress(_) => false,
        }
    }

    /// The same for response headers (responses meet the filters in reverse order).
    pub fn edits_response_headers_per_request(&self) -> bool {
        match self {
            Filter::RequestId(_)
            | Filter::Cors(_)
            | Filter::RateLimit(_)
            | Filter::Compress(_)
            | Filter::External(_) => true,
            Filter::Rewrite(_)
            | Filter::RequestHeaders(_)
            | Filter::ResponseHeaders(_)
            | Filter::BodyLimit(_)
            | Filter::IpFilter(_)
            | Filter::Jwt(_)
            | Filter::BasicAuth(_)
            | Filter::ApiKey(_)
            | Filter::ForwardAuth(_) => false,
        }
    }

    /// A query parameter that carries a credential (an `api_key` read from the query): the
    /// access log blanks its value.
    pub fn secret_query_param(&self) -> Option<&str> {
        match self {
            Filter::ApiKey(f) => f.query.as_deref(),
            _ => None,
        }
    }
}

/// Builds a chain from filters in order, folding static header edits into its starting edits
/// where no other filter can tell: request edits before the first filter that edits request
/// headers per request, response edits after the last filter that edits response headers per
/// request.
pub fn build_chain(filters: Vec<Arc<FilterInstance>>) -> FilterChain {
    let first_dynamic_request = filters
        .iter()
        .position(|f| f.edits_request_headers_per_request())
        .unwrap_or(filters.len());
    let last_dynamic_response = filters.iter().rposition(|f| f.edits_response_headers_per_request());
    let mut chain = FilterChain::default();
    for (i, filter) in filters.into_iter().enumerate() {
        match &filter.filter {
            Filter::RequestHeaders(RequestHeaders { ops }) if i < first_dynamic_request => {
                merge(&mut chain.request_edits, ops)
            }
            Filter::ResponseHeaders(ResponseHeaders { ops, always })
                if last_dynamic_response.is_none_or(|last| i > last) =>
            {
                // Responses run the chain backwards: a later filter's edits come first.
                let edits = &mut chain.response_edits;
                fold_response(&mut edits.on_success, ops);
                if *always {
                    fold_response(&mut edits.on_any_status, ops);
                }
            }
            _ => chain.filters.push(filter),
        }
    }
    chain
}

/// Applies `ops` after the edits already in `into`.
fn merge(into: &mut HeaderOps, ops: &HeaderOps) {
    for name in &ops.remove {
        into.remove(name);
    }
    for (name, value) in &ops.set {
        into.set(name, value);
    }
    for (name, value) in &ops.add {
        into.add(name, value);
    }
}

/// Folds the edits `ops` of a filter that responses meet before those already in `into`.
fn fold_response(into: &mut HeaderOps, ops: &HeaderOps) {
    let later = std::mem::replace(into, ops.clone());
    merge(into, &later);
}

#[cfg(test)]
mod tests;
