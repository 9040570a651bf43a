//! The `compress` response filter's self-contained parts: content negotiation
//! ([`negotiate`](mod@negotiate)), the decision whether and how to compress a response
//! ([`decision`]), and the streaming encoders ([`encoder`]). Settings are
//! `rampart_model::filter::compress`.
//!
//! The filter glue (phases, per-request state, applying the header edits) comes with the filter
//! trait: at the request head it keeps [`offer`]'s result; at the response head it gathers
//! [`ResponseFacts`], calls [`decide`], applies the [`HeaderEdits`] and creates an [`Encoder`];
//! in the body phase it passes each piece through [`Encoder::compress`] and ends with
//! [`Encoder::finish`].

pub mod decision;
pub mod encoder;
pub mod negotiate;

mod list;

pub use decision::{
    decide, offer, vary_with_accept_encoding, weakened_etag, Decision, EtagEdit, HeaderEdits, Plan, ResponseFacts,
    Skip, VaryEdit,
};
pub use encoder::Encoder;
pub use negotiate::{negotiate, AcceptEncoding};
