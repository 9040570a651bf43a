//! The request layer, which knows no protocol: a request's head, once a mux has read it, is
//! routed with the snapshot current at that moment, its filters run, and it is answered by its
//! route's action (a local answer, a redirect, static files, or the exchange with an upstream),
//! then logged and counted at its end ([`RequestPath::finish`], the end-of-request point every
//! request passes, refused ones included). The muxes below it (`crate::http::h1`,
//! `crate::http::h2`) each hold a [`RequestPath`] per client side (an HTTP/1 connection, one
//! HTTP/2 stream) and reach their client through [`crate::http::client_side::ClientSide`]; neither
//! mux imports the other.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use rampart_model::ListenerKey;
use rampart_model::{HttpListener, Snapshot};

use super::iobuf::IoBuf;
use crate::slot::ConnSlot;
use crate::worker::{SharedSnapshot, WorkerContext};

mod action;
mod common;
mod proxy_action;
#[allow(clippy::module_inception)] // the request path of one request, in the request layer
mod request;
mod static_answer;

/// The request path of one client side: an HTTP/1 connection (`T` is its `Stream`) or one
/// stream of an HTTP/2 connection, with what its requests need: the snapshot, buffers, the
/// client.
pub(crate) struct RequestPath<'a, T> {
    pub(crate) ctx: &'a WorkerContext,
    pub(crate) stream: T,
    pub(crate) client: SocketAddr,
    pub(in crate::http) client_from_header: bool,
    /// The connection's place in its listener's limit (HTTP/1; an HTTP/2 connection keeps it
    /// where its streams are driven).
    pub(in crate::http) slot: Option<ConnSlot>,
    /// What finds the connection's listener in a newer snapshot.
    pub(in crate::http) listener_key: ListenerKey,
    /// The client's address as text, for X-Forwarded-For.
    pub(in crate::http) client_ip: String,
    /// The snapshot the current (or last) request is routed with, this connection's listener in
    /// it (its index, read with a check), and that listener's HTTP settings, held: set together
    /// by [`RequestPath::new`], [`RequestPath::for_stream`] and [`RequestPath::follow_reload`].
    pub(in crate::http) snapshot: Rc<SharedSnapshot>,
    pub(in crate::http) listener: usize,
    pub(in crate::http) http: Arc<HttpListener>,
    pub(crate) inbuf: IoBuf,
    /// The field list of the last request's head, kept for the next one's (HTTP/1).
    pub(in crate::http) field_list: Vec<rampart_proto::h1::Field>,
    pub(in crate::http) out: Vec<u8>,
    pub(in crate::http) head_out: Vec<u8>,
    /// Copies of the request's method, target, host, referer and user agent for the access log.
    pub(in crate::http) log_scratch: Vec<u8>,
}

/// Listener `key` of `snapshot` when it speaks HTTP: its index and its HTTP settings.
pub(in crate::http) fn http_listener(snapshot: &Snapshot, key: &ListenerKey) -> Option<(usize, Arc<HttpListener>)> {
    let index = snapshot.listener_index(key)?;
    let http = snapshot.listeners.get(index)?.http_shared()?;
    Some((index, http.clone()))
}

#[cfg(test)]
mod test_side;
#[cfg(test)]
mod tests;
