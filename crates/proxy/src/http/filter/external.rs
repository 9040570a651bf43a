//! Filters written outside Rampart's built-ins. A program that embeds Rampart registers a filter
//! type with [`register`]: from then on, `{ type = "NAME", ... }` in a config builds one with the
//! table's other keys, and requests run it like any built-in, through a trait object
//! ([`DynHttpFilter`]) and a boxed per-request state. Its [`HttpFilter::WorkerState`] lives in
//! the filter's slot on each worker like a built-in's (boxed), and is kept across reloads that
//! leave the filter's type and options as they were.
//!
//! ```ignore
//! let mut registry = FilterRegistry::default();
//! register(&mut registry, "tenant_header", |options| {
//!     let header = options.get("header").and_then(|v| match v { OptionValue::String(s) => Some(s.clone()), _ => None })
//!         .ok_or("tenant_header needs `header`")?;
//!     Ok(TenantHeader { header })
//! });
//! let live = LiveState::new(None).with_filters(registry);
//! ```

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rampart_model::filter::{ExternalFilter, FilterOptions, FilterRegistry};

use super::{
    FilterCx, HttpFilter, Outcome, Rejection, RequestParts, ResponseParts, TrailerParts, UpstreamAttempt, Verdict,
};

/// A filter future borrowing the request for `'a`.
pub type PhaseFuture<'a> = Pin<Box<dyn Future<Output = Verdict> + 'a>>;

/// [`HttpFilter`] as a trait object: state boxed, the request head's future boxed.
pub trait DynHttpFilter {
    fn new_state(&self) -> Box<dyn Any>;
    fn request_head<'a>(
        &'a self,
        cx: &'a mut FilterCx<'_>,
        state: &'a mut dyn Any,
        req: &'a mut RequestParts<'_>,
    ) -> PhaseFuture<'a>;
    fn request_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut dyn Any,
        chunk: &[u8],
        end: bool,
    ) -> Result<(), Rejection>;
    fn upstream_request(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, req: &mut RequestParts<'_>);
    fn upstream_attempt(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, attempt: &UpstreamAttempt<'_>, failed: bool);
    fn response_head(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, resp: &mut ResponseParts<'_>);
    fn response_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut dyn Any,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection>;
    fn request_trailers(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, trailers: &mut TrailerParts<'_>);
    fn response_trailers(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, trailers: &mut TrailerParts<'_>);
    fn log(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, outcome: &Outcome);
}

impl<F> DynHttpFilter for F
where
    F: HttpFilter,
    F::State: 'static,
{
    fn new_state(&self) -> Box<dyn Any> {
        Box::new(F::State::default())
    }

    fn request_head<'a>(
        &'a self,
        cx: &'a mut FilterCx<'_>,
        state: &'a mut dyn Any,
        req: &'a mut RequestParts<'_>,
    ) -> PhaseFuture<'a> {
        Box::pin(async move {
            match state.downcast_mut::<F::State>() {
                Some(state) => HttpFilter::request_head(self, cx, state, req).await,
                None => Verdict::Continue,
            }
        })
    }

    fn request_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut dyn Any,
        chunk: &[u8],
        end: bool,
    ) -> Result<(), Rejection> {
        match state.downcast_mut::<F::State>() {
            Some(state) => HttpFilter::request_body(self, cx, state, chunk, end),
            None => Ok(()),
        }
    }

    fn upstream_request(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, req: &mut RequestParts<'_>) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            HttpFilter::upstream_request(self, cx, state, req);
        }
    }

    fn upstream_attempt(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut dyn Any,
        attempt: &UpstreamAttempt<'_>,
        failed: bool,
    ) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            match failed {
                true => HttpFilter::upstream_error(self, cx, state, attempt),
                false => HttpFilter::upstream_response(self, cx, state, attempt),
            }
        }
    }

    fn response_head(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, resp: &mut ResponseParts<'_>) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            HttpFilter::response_head(self, cx, state, resp);
        }
    }

    fn response_body(
        &self,
        cx: &mut FilterCx<'_>,
        state: &mut dyn Any,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection> {
        match state.downcast_mut::<F::State>() {
            Some(state) => HttpFilter::response_body(self, cx, state, body, end),
            None => Ok(()),
        }
    }

    fn request_trailers(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, trailers: &mut TrailerParts<'_>) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            HttpFilter::request_trailers(self, cx, state, trailers);
        }
    }

    fn response_trailers(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, trailers: &mut TrailerParts<'_>) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            HttpFilter::response_trailers(self, cx, state, trailers);
        }
    }

    fn log(&self, cx: &mut FilterCx<'_>, state: &mut dyn Any, outcome: &Outcome) {
        if let Some(state) = state.downcast_mut::<F::State>() {
            HttpFilter::log(self, cx, state, outcome);
        }
    }
}

/// What an external filter's instance is made of: a trait object the data plane can call.
type Instance = Box<dyn DynHttpFilter + Send + Sync>;

/// Registers filter type `type_name`: `build` makes one filter from a config table's options (an
/// error is shown at the table as `FILE:LINE:COL: MESSAGE`).
pub fn register<F, B>(registry: &mut FilterRegistry, type_name: &str, build: B)
where
    F: HttpFilter + Send + Sync + 'static,
    F::State: 'static,
    B: Fn(&FilterOptions) -> Result<F, String> + Send + Sync + 'static,
{
    let factory = move |options: &FilterOptions| -> Result<Arc<dyn Any + Send + Sync>, String> {
        let filter: Instance = Box::new(build(options)?);
        Ok(Arc::new(filter))
    };
    registry.register(type_name, Arc::new(factory));
}

/// The callable filter inside a configured external filter. Instances come only from
/// [`register`]'s factories; anything else is ignored (a filter that does nothing).
pub(super) fn instance(filter: &ExternalFilter) -> Option<&(dyn DynHttpFilter + Send + Sync)> {
    filter.instance.downcast_ref::<Instance>().map(|b| &**b)
}
