//! What the per-attempt phases show a filter: one attempt of the request at its upstream
//! (Pingora's `upstream_response_filter` and `error_while_proxy`), read-only. The attempt's record
//! is the request's own ([`crate::http::attempts`]): target, new or reused connection, connect
//! time, time to the response head, status or error.

use std::net::SocketAddr;

use rampart_proto::message::FieldsRef;

use crate::http::attempts::Attempt;

/// One attempt, its response head's fields with it when one came.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamAttempt<'a> {
    pub upstream: &'a str,
    pub target: &'a str,
    pub addr: SocketAddr,
    /// Which attempt of the request this is (1 for the first).
    pub number: u8,
    pub attempt: &'a Attempt,
    /// The response head's fields (`upstream_response`; empty in `upstream_error`).
    pub fields: FieldsRef<'a>,
}
