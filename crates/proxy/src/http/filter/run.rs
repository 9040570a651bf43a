//! Running a route's chain for one request: the per-request states, which filters have let the
//! request through, and the dispatch of each phase to the built-in filters (a `match`, no trait
//! objects) or to an external filter (a trait object). The built-ins' per-worker states are
//! declared beside the slots (`super::slots`) from the same list.

use std::any::Any;
use std::net::SocketAddr;

use rampart_model::filter::{self, Filter, FilterChain, FilterSlot};
use rampart_model::Snapshot;

use super::slots::FilterWorker;
use super::{external, UpstreamAttempt};
use super::{
    Answer, FilterCx, HttpFilter, Outcome, Rejection, RequestFacts, RequestParts, ResponseParts, TrailerParts, Verdict,
};
use crate::worker::WorkerContext;

/// Where a request runs: what every phase's [`FilterCx`] is made from.
#[derive(Clone, Copy)]
pub(crate) struct Where<'a> {
    pub worker: &'a WorkerContext,
    pub snapshot: &'a Snapshot,
    pub listener: &'a str,
    pub route: &'a str,
    pub route_index: usize,
    pub peer: SocketAddr,
    /// `http` or `https` (the client's side).
    pub scheme: &'static str,
}

impl<'a> Where<'a> {
    fn cx<'f>(&self, facts: &'f mut RequestFacts, slot: FilterSlot) -> FilterCx<'f>
    where
        'a: 'f,
    {
        FilterCx {
            worker: FilterWorker::new(&self.worker.http.filters, slot),
            context: self.worker,
            snapshot: self.snapshot,
            listener: self.listener,
            route: self.route,
            route_index: self.route_index,
            peer: self.peer,
            scheme: self.scheme,
            facts,
        }
    }
}

/// One request's run through its route's chain.
#[derive(Default)]
pub struct FilterRun {
    states: Vec<FilterState>,
    /// How many filters (from the chain's start) let the request through its head phase: the
    /// ones that see the response and the log phase.
    ran: usize,
    pub facts: RequestFacts,
    /// A filter asked for the request body phase.
    pub(super) inspect_body: bool,
}

impl FilterRun {
    /// Whether any filter runs for this request.
    pub fn is_active(&self) -> bool {
        !self.states.is_empty()
    }

    /// Starts a request on `chain`: a state for each filter (the list from the worker's pool).
    pub(crate) fn start(&mut self, worker: &WorkerContext, chain: &FilterChain, client: std::net::IpAddr) {
        self.ran = 0;
        self.inspect_body = false;
        self.facts = RequestFacts {
            client_ip: client,
            ..RequestFacts::default()
        };
        if chain.filters.is_empty() {
            return;
        }
        self.states = worker.http.take_filter_states();
        self.states.extend(chain.filters.iter().map(|f| new_state(f)));
    }

    /// Runs the request head phase: `None` when every filter let the request through, or the
    /// first answer.
    pub(crate) async fn request_head(
        &mut self,
        chain: &FilterChain,
        at: Where<'_>,
        req: &mut RequestParts<'_>,
    ) -> Option<Answer> {
        for (i, (f, state)) in chain.filters.iter().zip(self.states.iter_mut()).enumerate() {
            let mut cx = at.cx(&mut self.facts, f.slot);
            match request_head(f, state, &mut cx, req).await {
                Verdict::Continue => self.ran = i + 1,
                Verdict::Respond(answer) => {
                    self.inspect_body |= req.inspect_body;
                    return Some(answer);
                }
            }
        }
        self.inspect_body |= req.inspect_body;
        None
    }

    /// Runs the upstream-request phase over the filters that let the request through, in chain
    /// order: once per attempt, after the target is chosen.
    pub(crate) fn upstream_request(&mut self, chain: &FilterChain, at: Where<'_>, req: &mut RequestParts<'_>) {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]) {
            let mut cx = at.cx(&mut self.facts, f.slot);
            upstream_request(f, state, &mut cx, req);
        }
    }

    /// Runs the upstream-response phase (`failed`: the upstream-error phase) over the filters that
    /// let the request through, in chain order: once per attempt.
    pub(crate) fn upstream_attempt(
        &mut self,
        chain: &FilterChain,
        at: Where<'_>,
        attempt: &UpstreamAttempt<'_>,
        failed: bool,
    ) {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]) {
            let mut cx = at.cx(&mut self.facts, f.slot);
            upstream_attempt(f, state, &mut cx, attempt, failed);
        }
    }

    /// Runs the response head phase over the filters that let the request through, last first.
    pub(crate) fn response_head(&mut self, chain: &FilterChain, at: Where<'_>, resp: &mut ResponseParts<'_>) {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]).rev() {
            let mut cx = at.cx(&mut self.facts, f.slot);
            response_head(f, state, &mut cx, resp);
        }
    }

    /// Runs the request body phase over the filters that let the request through.
    pub(crate) fn request_body(
        &mut self,
        chain: &FilterChain,
        at: Where<'_>,
        chunk: &[u8],
        end: bool,
    ) -> Result<(), Rejection> {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]) {
            let mut cx = at.cx(&mut self.facts, f.slot);
            request_body(f, state, &mut cx, chunk, end)?;
        }
        Ok(())
    }

    /// Runs the response body phase over the filters that let the request through, last first.
    pub(crate) fn response_body(
        &mut self,
        chain: &FilterChain,
        at: Where<'_>,
        body: &mut Vec<u8>,
        end: bool,
    ) -> Result<(), Rejection> {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]).rev() {
            let mut cx = at.cx(&mut self.facts, f.slot);
            response_body(f, state, &mut cx, body, end)?;
        }
        Ok(())
    }

    /// Runs the request trailers phase over the filters that let the request through.
    pub(crate) fn request_trailers(&mut self, chain: &FilterChain, at: Where<'_>, trailers: &mut TrailerParts<'_>) {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]) {
            let mut cx = at.cx(&mut self.facts, f.slot);
            request_trailers(f, state, &mut cx, trailers);
        }
    }

    /// Runs the response trailers phase over the filters that let the request through, last first.
    pub(crate) fn response_trailers(&mut self, chain: &FilterChain, at: Where<'_>, trailers: &mut TrailerParts<'_>) {
        let ran = self.ran;
        for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]).rev() {
            let mut cx = at.cx(&mut self.facts, f.slot);
            response_trailers(f, state, &mut cx, trailers);
        }
    }

    /// Runs the log phase, then gives the states back to the worker's pool.
    pub(crate) fn finish(&mut self, chain: Option<&FilterChain>, at: Where<'_>, outcome: &Outcome) {
        if let Some(chain) = chain.filter(|c| c.filters.len() == self.states.len()) {
            let ran = self.ran;
            for (f, state) in chain.filters[..ran].iter().zip(&mut self.states[..ran]) {
                let mut cx = at.cx(&mut self.facts, f.slot);
                log(f, state, &mut cx, outcome);
            }
        }
        if self.states.capacity() > 0 {
            at.worker.http.give_filter_states(std::mem::take(&mut self.states));
        }
        self.ran = 0;
    }
}

/// The answer of an external filter the data plane cannot call (it was not registered through
/// [`external::register`]): fail closed.
fn unavailable() -> Verdict {
    Verdict::Respond(Answer::plain(500, "filter_unavailable", ""))
}

/// Declares the per-request state of each built-in filter and the dispatch of every phase, from the model's list of built-ins (`rampart_model::with_builtin_filters!`): each
/// entry is a [`Filter`] variant whose settings type in `rampart_model::filter` implements
/// [`HttpFilter`] in `crate::filters`.
macro_rules! builtin_filters {
    ($($(#[$doc:meta])* $name:ident($settings:ident) = $type_name:literal,)*) => {
        /// One filter's state for one request.
        pub(crate) enum FilterState {
            $($name(<filter::$settings as HttpFilter>::State),)*
            External(Box<dyn Any>),
            /// An external filter the data plane cannot call.
            Unavailable,
        }

        fn new_state(f: &Filter) -> FilterState {
            match f {
                $(Filter::$name(_) => FilterState::$name(Default::default()),)*
                Filter::External(e) => match external::instance(e) {
                    Some(instance) => FilterState::External(instance.new_state()),
                    None => FilterState::Unavailable,
                },
            }
        }

        async fn request_head(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, req: &mut RequestParts<'_>) -> Verdict {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.request_head(cx, s, req).await,)*
                (Filter::External(e), FilterState::External(s)) => match external::instance(e) {
                    Some(instance) => instance.request_head(cx, s.as_mut(), req).await,
                    None => unavailable(),
                },
                _ => unavailable(),
            }
        }

        fn request_body(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, chunk: &[u8], end: bool) -> Result<(), Rejection> {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.request_body(cx, s, chunk, end),)*
                (Filter::External(e), FilterState::External(s)) => match external::instance(e) {
                    Some(instance) => instance.request_body(cx, s.as_mut(), chunk, end),
                    None => Ok(()),
                },
                _ => Ok(()),
            }
        }

        fn upstream_request(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, req: &mut RequestParts<'_>) {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.upstream_request(cx, s, req),)*
                (Filter::External(e), FilterState::External(s)) => {
                    if let Some(instance) = external::instance(e) {
                        instance.upstream_request(cx, s.as_mut(), req);
                    }
                }
                _ => {}
            }
        }

        fn upstream_attempt(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, attempt: &UpstreamAttempt<'_>, failed: bool) {
            match (f, state, failed) {
                $((Filter::$name(f), FilterState::$name(s), false) => f.upstream_response(cx, s, attempt),)*
                $((Filter::$name(f), FilterState::$name(s), true) => f.upstream_error(cx, s, attempt),)*
                (Filter::External(e), FilterState::External(s), _) => {
                    if let Some(instance) = external::instance(e) {
                        instance.upstream_attempt(cx, s.as_mut(), attempt, failed);
                    }
                }
                _ => {}
            }
        }

        fn response_head(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, resp: &mut ResponseParts<'_>) {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.response_head(cx, s, resp),)*
                (Filter::External(e), FilterState::External(s)) => {
                    if let Some(instance) = external::instance(e) {
                        instance.response_head(cx, s.as_mut(), resp);
                    }
                }
                _ => {}
            }
        }

        fn response_body(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, body: &mut Vec<u8>, end: bool) -> Result<(), Rejection> {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.response_body(cx, s, body, end),)*
                (Filter::External(e), FilterState::External(s)) => match external::instance(e) {
                    Some(instance) => instance.response_body(cx, s.as_mut(), body, end),
                    None => Ok(()),
                },
                _ => Ok(()),
            }
        }

        fn request_trailers(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, trailers: &mut TrailerParts<'_>) {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.request_trailers(cx, s, trailers),)*
                (Filter::External(e), FilterState::External(s)) => {
                    if let Some(instance) = external::instance(e) {
                        instance.request_trailers(cx, s.as_mut(), trailers);
                    }
                }
                _ => {}
            }
        }

        fn response_trailers(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, trailers: &mut TrailerParts<'_>) {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.response_trailers(cx, s, trailers),)*
                (Filter::External(e), FilterState::External(s)) => {
                    if let Some(instance) = external::instance(e) {
                        instance.response_trailers(cx, s.as_mut(), trailers);
                    }
                }
                _ => {}
            }
        }

        fn log(f: &Filter, state: &mut FilterState, cx: &mut FilterCx<'_>, outcome: &Outcome) {
            match (f, state) {
                $((Filter::$name(f), FilterState::$name(s)) => f.log(cx, s, outcome),)*
                (Filter::External(e), FilterState::External(s)) => {
                    if let Some(instance) = external::instance(e) {
                        instance.log(cx, s.as_mut(), outcome);
                    }
                }
                _ => {}
            }
        }
    };
}

rampart_model::with_builtin_filters!(builtin_filters);
