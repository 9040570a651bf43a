//! Test helpers for the request path and the exchange: a worker whose snapshot is compiled from
//! config text, and a downstream side that records, one line per call, what is said to the
//! client through the seam, and keeps no socket.

use std::borrow::BorrowMut;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rampart_config::{compile_toml, LiveState};

use rampart_proto::message::FieldsRef;

use super::downstream::{BodyFrame, Downstream, LocalAnswer, NoBodySource};
use super::error::HttpError;
use super::head_out::ResponseParts;
use super::iobuf::IoBuf;
use crate::worker::WorkerContext;

/// A current-thread runtime and worker 0 with the snapshot `config` compiles to.
pub(crate) fn worker_for(config: &str) -> (tokio::runtime::Runtime, WorkerContext) {
    let (runtime, shared) = runtime_and_snapshot(config);
    (runtime, WorkerContext::new(0, Default::default(), shared, None))
}

/// [`worker_for`] with the context shared ([`WorkerContext::shared`]): tasks of its own can
/// hold it. Run it inside a `LocalSet`.
pub(crate) fn shared_worker_for(config: &str) -> (tokio::runtime::Runtime, std::rc::Rc<WorkerContext>) {
    let (runtime, shared) = runtime_and_snapshot(config);
    (runtime, WorkerContext::shared(0, Default::default(), shared, None))
}

/// A current-thread runtime and the snapshot `config` compiles to, as workers hold it.
fn runtime_and_snapshot(config: &str) -> (tokio::runtime::Runtime, Arc<ArcSwap<rampart_model::Snapshot>>) {
    let snapshot = compile_toml("t.toml", config, &mut LiveState::default())
        .unwrap()
        .snapshot;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (runtime, Arc::new(ArcSwap::from_pointee(snapshot)))
}

/// What was said, in order.
pub(crate) type Said = Rc<RefCell<Vec<String>>>;

/// The recording side; `body` holds the request body bytes it is asked for (given as one data
/// frame, then the end).
pub(crate) struct Recording<B> {
    pub body: B,
    pub said: Said,
    bytes: u64,
    /// Body bytes the last frame gave.
    given: usize,
}

impl<B: BorrowMut<IoBuf>> Recording<B> {
    pub fn new(body: B, said: Said) -> Self {
        Recording {
            body,
            said,
            bytes: 0,
            given: 0,
        }
    }

    fn say(&self, line: String) {
        RefCell::borrow_mut(&self.said).push(line);
    }
}

impl<B: BorrowMut<IoBuf>> Downstream for Recording<B> {
    type BodySource = NoBodySource;

    fn take_body_source(&mut self) -> Option<NoBodySource> {
        None
    }

    async fn body_frame(&mut self) -> Result<BodyFrame<'_>, HttpError> {
        let body: &mut IoBuf = self.body.borrow_mut();
        body.consume(std::mem::take(&mut self.given));
        if body.is_empty() {
            return Ok(BodyFrame::End(FieldsRef::EMPTY));
        }
        self.given = body.len();
        Ok(BodyFrame::Data(body.filled()))
    }

    fn body_waiting(&self) -> bool {
        self.body.borrow().len() > self.given
    }

    fn release_read_buffer(&mut self) {}

    async fn send_continue(&mut self) -> Result<(), HttpError> {
        self.say("continue".into());
        Ok(())
    }

    async fn send_informational(&mut self, head: &ResponseParts<'_>) -> Result<(), HttpError> {
        self.say(format!("interim {}", head.status));
        Ok(())
    }

    async fn send_response_head(
        &mut self,
        head: &ResponseParts<'_>,
        body: &[u8],
        _: Duration,
    ) -> Result<(), HttpError> {
        self.bytes += body.len() as u64;
        self.say(format!(
            "head {} {:?} {}",
            head.status,
            head.length,
            String::from_utf8_lossy(body)
        ));
        Ok(())
    }

    async fn send_data(&mut self, data: &[u8]) -> Result<(), HttpError> {
        if !data.is_empty() {
            self.bytes += data.len() as u64;
            self.say(format!("data {}", String::from_utf8_lossy(data)));
        }
        Ok(())
    }

    async fn send_trailers(&mut self, trailers: FieldsRef<'_>) -> Result<(), HttpError> {
        let fields: Vec<String> = trailers
            .iter()
            .map(|(n, v)| format!("{}={}", String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
            .collect();
        self.say(format!("trailers {}", fields.join(",")));
        Ok(())
    }

    async fn end_body(&mut self) -> Result<(), HttpError> {
        self.say("end".into());
        Ok(())
    }

    async fn send_local(&mut self, answer: &LocalAnswer<'_>) -> Result<(), HttpError> {
        let headers: Vec<String> = answer.headers.iter().map(|(n, v)| format!("{n}={v}")).collect();
        self.say(format!(
            "local {} [{}] {}",
            answer.status,
            headers.join(" "),
            String::from_utf8_lossy(answer.body).trim_end()
        ));
        Ok(())
    }

    fn bytes_sent(&self) -> u64 {
        self.bytes
    }

    fn keeps_alive(&self) -> bool {
        true
    }
}
