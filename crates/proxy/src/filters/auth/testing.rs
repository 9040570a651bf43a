//! What the auth filters' unit tests share: a request as a filter sees it, parsed from raw
//! bytes, a worker to run a filter's request head phase on, and TLS for test servers.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_model::tls::ListenerTls;
use rampart_model::Snapshot;
use rampart_proto::h1::parse_request_owned;
use rampart_proto::message::RequestHead;
use tokio::net::TcpStream;

use rampart_model::filter::FilterSlot;

use crate::http::filter::{FilterCx, FilterWorker, HttpFilter, RequestFacts, RequestParts, Verdict};
use crate::stream::Stream;
use crate::worker::WorkerContext;

/// A request head parsed from raw bytes.
pub(crate) struct RawRequest {
    head: RequestHead,
}

impl RawRequest {
    pub fn new(raw: &str) -> Self {
        let (_, head) = parse_request_owned(raw.as_bytes(), &Default::default())
            .expect("a valid request")
            .expect("a whole head");
        RawRequest { head }
    }

    /// The request as the filters see it (no edits yet).
    pub fn parts(&self) -> RequestParts<'_> {
        RequestParts::of(&self.head, Cow::Owned(Default::default()), None)
    }
}

/// A worker with an empty snapshot.
pub(crate) fn worker() -> WorkerContext {
    let snapshot = Snapshot {
        generation: 1,
        listeners: Default::default(),
        dns: Default::default(),
        acme: None,
        upstreams: Vec::new(),
        session_log: None,
        drain_timeout: Duration::from_secs(1),
        upgrade_timeout: Duration::from_secs(1),
        tracing: None,
    };
    WorkerContext::new(0, Default::default(), Arc::new(ArcSwap::from_pointee(snapshot)), None)
}

/// `worker` as `filter` sees it: each filter of these tests (by its address) in a slot of its
/// own, kept while the test runs.
pub(crate) fn filter_worker<'w, F>(worker: &'w WorkerContext, filter: &F) -> FilterWorker<'w> {
    thread_local! {
        static SLOTS: std::cell::RefCell<Vec<(usize, FilterSlot)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let at = filter as *const F as usize;
    let slot = SLOTS.with_borrow_mut(|slots| match slots.iter().find(|(a, _)| *a == at) {
        Some((_, slot)) => *slot,
        None => {
            let slot = FilterSlot::fresh(slots.len() as u32);
            slots.push((at, slot));
            slot
        }
    });
    FilterWorker::new(&worker.http.filters, slot)
}

/// Runs `filter`'s request head phase for `req` on `worker` (client 192.0.2.7 over http);
/// returns the verdict and what the filter found out.
pub(crate) async fn request_head<F: HttpFilter>(
    filter: &F,
    worker: &WorkerContext,
    req: &mut RequestParts<'_>,
) -> (Verdict, RequestFacts) {
    let snapshot = worker.snapshot();
    let mut facts = RequestFacts {
        client_ip: [192, 0, 2, 7].into(),
        ..RequestFacts::default()
    };
    let mut cx = FilterCx {
        worker: filter_worker(worker, filter),
        context: worker,
        snapshot: &snapshot,
        listener: "gw",
        route: "r",
        route_index: 0,
        peer: SocketAddr::from(([192, 0, 2, 7], 40000)),
        scheme: "http",
        facts: &mut facts,
    };
    let mut state = F::State::default();
    let verdict = filter.request_head(&mut cx, &mut state, req).await;
    (verdict, facts)
}

/// Runs `f` to completion on a worker-like runtime (one thread, with a blocking pool).
pub(crate) fn block_on<T>(f: impl Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()
        .expect("a runtime");
    tokio::task::LocalSet::new().block_on(&runtime, f)
}

/// A server configuration for a self-signed certificate naming 127.0.0.1, and a client
/// configuration that trusts it.
pub(crate) fn tls_pair() -> (ListenerTls, Arc<rustls::ClientConfig>) {
    crate::tls::tests::self_signed_pair("127.0.0.1")
}

/// A test server's side of an accepted connection: plain, or TLS with `tls`; `None` when the
/// handshake fails.
pub(crate) async fn accept_stream(tcp: TcpStream, tls: Option<&ListenerTls>) -> Option<Stream> {
    let Some(tls) = tls else {
        return Some(Stream::Tcp(tcp));
    };
    let mut early = Vec::new();
    crate::tls::accept::first_bytes(&tcp, &mut early).await.ok()?;
    let stream = crate::tls::accept::accept(tcp, &mut early, tls).await.ok()?;
    Some(Stream::Tls(Box::new(stream)))
}
