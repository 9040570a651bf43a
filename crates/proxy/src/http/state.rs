//! What one worker keeps for HTTP: its upstream connection pool, its parked client connections,
//! its read and write buffers, and the field lists response heads are parsed into.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use rampart_model::Snapshot;
use rampart_proto::h1::Field;
use rampart_proto::message::{RequestHead, ResponseHead};

use super::filter::FilterState;
use super::h2pool::H2Pool;
use super::park::{Parked, ParkingLot};
use super::pool::UpstreamPool;
use crate::filters::worker::FilterWorkerState;
use crate::free_list::FreeList;

/// Initial size of an HTTP read buffer; it grows (up to the head limit) only for large heads.
/// Upstream responses are read into one too: 32 KiB takes a head and a 16 KiB body in one read.
pub const HTTP_BUFFER_SIZE: usize = 32 * 1024;

/// A worker's HTTP state.
pub struct HttpWorkerState {
    /// Idle keep-alive upstream connections.
    pub pool: RefCell<UpstreamPool>,
    /// HTTP/2 upstream connections, shared by the requests of this worker.
    pub h2_pool: RefCell<H2Pool>,
    /// Idle keep-alive client connections held outside any task.
    pub parking: ParkingLot,
    /// What the built-in filters keep per worker.
    pub filters: FilterWorkerState,
    /// Field lists for parsing response heads, one per request waiting for its response.
    field_lists: FreeList<Vec<Field>>,
    read_buffers: FreeList<Vec<u8>>,
    write_buffers: FreeList<Vec<u8>>,
    /// Lists of per-request filter states, one per request running filters.
    filter_states: FreeList<Vec<FilterState>>,
    /// The snapshot generation whose targets the pool was last checked against.
    pool_generation: Cell<u64>,
}

impl HttpWorkerState {
    pub fn new(worker: usize, max_pooled_buffers: usize) -> Self {
        HttpWorkerState {
            pool: RefCell::default(),
            h2_pool: RefCell::default(),
            parking: ParkingLot::default(),
            filters: FilterWorkerState::new(worker),
            field_lists: FreeList::new(max_pooled_buffers),
            read_buffers: FreeList::new(max_pooled_buffers),
            write_buffers: FreeList::new(max_pooled_buffers),
            filter_states: FreeList::new(max_pooled_buffers),
            pool_generation: Cell::new(0),
        }
    }

    /// A read buffer (initialised, [`HTTP_BUFFER_SIZE`] bytes).
    pub(crate) fn take_read_buffer(&self) -> Vec<u8> {
        self.read_buffers.take().unwrap_or_else(|| vec![0u8; HTTP_BUFFER_SIZE])
    }

    pub(crate) fn give_read_buffer(&self, mut buf: Vec<u8>) {
        // A buffer grown for a large head goes back at the standard size.
        buf.truncate(HTTP_BUFFER_SIZE);
        buf.shrink_to(HTTP_BUFFER_SIZE);
        self.read_buffers.give(buf);
    }

    /// A field list for parsing a response head: kept from earlier responses, so parsing one
    /// allocates nothing in the steady state, however many requests wait at once.
    pub(crate) fn take_field_list(&self) -> Vec<Field> {
        self.field_lists.take().unwrap_or_default()
    }

    pub(crate) fn give_field_list(&self, mut fields: Vec<Field>) {
        fields.clear();
        self.field_lists.give(fields);
    }

    /// An empty request head with storage from the pools (a write buffer and a field list), for
    /// a head laid out rather than read in place.
    pub(crate) fn take_head_storage(&self) -> (Vec<u8>, Vec<Field>) {
        (self.take_write_buffer(), self.take_field_list())
    }

    /// Gives a request head's storage back: its bytes to the pool they fit (a read buffer it was
    /// read in place into, or a write buffer), its field list to the field lists.
    pub(crate) fn give_request_head(&self, head: RequestHead) {
        let (bytes, fields) = head.into_storage();
        self.give_bytes(bytes);
        self.give_field_list(fields);
    }

    /// Gives a response head's storage back (see [`HttpWorkerState::give_request_head`]).
    pub(crate) fn give_response_head(&self, head: ResponseHead) {
        let (bytes, fields) = head.into_storage();
        self.give_bytes(bytes);
        self.give_field_list(fields);
    }

    /// Gives a buffer back to the pool it came from: a read buffer is as long as
    /// [`HTTP_BUFFER_SIZE`] (or longer, grown for a large head), a write buffer shorter.
    pub(crate) fn give_bytes(&self, bytes: Vec<u8>) {
        if bytes.capacity() == 0 {
            return;
        }
        match bytes.len() >= HTTP_BUFFER_SIZE {
            true => self.give_read_buffer(bytes),
            false => self.give_write_buffer(bytes),
        }
    }

    /// An empty write buffer (for heads being written).
    pub(crate) fn take_write_buffer(&self) -> Vec<u8> {
        self.write_buffers.take().unwrap_or_else(|| Vec::with_capacity(4096))
    }

    pub(crate) fn give_write_buffer(&self, mut buf: Vec<u8>) {
        if buf.capacity() <= 64 * 1024 {
            buf.clear();
            self.write_buffers.give(buf);
        }
    }

    /// An empty list for a request's filter states (kept from earlier requests, so running
    /// filters allocates no list in the steady state).
    pub(crate) fn take_filter_states(&self) -> Vec<FilterState> {
        self.filter_states.take().unwrap_or_default()
    }

    pub(crate) fn give_filter_states(&self, mut states: Vec<FilterState>) {
        states.clear();
        self.filter_states.give(states);
    }

    /// Closes stale pooled connections, and after a reload those to targets no upstream has any
    /// more; frees buffers unused since the last call; closes parked connections whose keep-alive
    /// time is over.
    pub(crate) fn housekeeping(&self, snapshot: &Snapshot) {
        let longest = snapshot.upstreams.iter().map(|u| u.http.pool_idle_timeout).max();
        let mut pool = self.pool.borrow_mut();
        let mut h2_pool = self.h2_pool.borrow_mut();
        if self.pool_generation.replace(snapshot.generation) != snapshot.generation {
            let known = |addr| {
                snapshot
                    .upstreams
                    .iter()
                    .any(|u| u.targets.iter().any(|t| t.addr == addr))
            };
            pool.retain_targets(known);
            h2_pool.retain_targets(known);
            if !self.filters.slots.is_empty() {
                self.filters.slots.retain(snapshot.http_filter_slots());
            }
        }
        pool.sweep(longest.unwrap_or_default());
        h2_pool.sweep(longest.unwrap_or_default());
        drop((pool, h2_pool));
        self.read_buffers.trim();
        self.write_buffers.trim();
        self.field_lists.trim();
        self.filter_states.trim();
        let mut expired = Vec::new();
        self.parking.take_expired(Instant::now(), &mut expired);
        // Dropping a parked connection closes it and gives back its place in the limit.
        drop(expired);
    }

    /// Closes every parked connection and refuses parking from now on.
    pub(crate) fn begin_drain(&self) {
        let mut parked: Vec<Parked> = Vec::new();
        self.parking.close(&mut parked);
    }
}
