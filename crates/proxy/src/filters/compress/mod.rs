//! The `compress` response filter: content negotiation ([`negotiate`](mod@negotiate)), the
//! decision whether and how to compress a response ([`decision`]), the streaming encoders
//! ([`encoder`]), and the filter's phases that use them ([`filter`]). Settings are
//! `rampart_model::filter::compress`.
//!
//! At the request head the filter keeps [`offer`]'s result; at the response head it gathers
//! [`ResponseFacts`], calls [`decide`], applies the [`HeaderEdits`] and creates an [`Encoder`];
//! in the body phase it passes each piece through [`Encoder::compress`] and ends with
//! [`Encoder::finish`].

pub mod decision;
pub mod encoder;
pub mod filter;
pub mod negotiate;

mod list;

pub use decision::{
    decide, offer, vary_with_accept_encoding, weakened_etag, Decision, EtagEdit, HeaderEdits, Plan, ResponseFacts,
    Skip, VaryEdit,
};
pub use encoder::Encoder;
pub use filter::{CompressRequest, COMPRESS_FAILED};
pub use negotiate::{negotiate, AcceptEncoding};
