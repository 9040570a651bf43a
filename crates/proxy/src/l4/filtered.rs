//! The relay of a route with payload filters: both directions through user space (never splice),
//! each read shown to its direction's [`FilterChain`] before it is written on.

use std::cell::Cell;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::filter::{FilterChain, FilterVerdict, MAX_HELD};
use crate::relay::{set_reset_on_close, until_done, Flow, RelayEnd, RelayOutcome, Side, SideError};
use crate::stream::Stream;
use crate::worker::WorkerContext;

/// Relays between `client` and `upstream` through `filters` (up, down) until both directions
/// end, one side fails, a filter closes the connection, or nothing moves for `idle_timeout`.
/// `early`, the client's bytes read before (those peeked to pick the route), go through the up
/// filters first, as if read then: a filter must see them, not only what follows.
pub async fn relay_filtered(
    ctx: &WorkerContext,
    client: &mut Stream,
    upstream: &mut Stream,
    (idle_timeout, buffer_size): (Duration, usize),
    (mut up_filters, mut down_filters): (FilterChain, FilterChain),
    early: &[u8],
) -> RelayOutcome {
    let activity = Cell::new(0u64);
    let closed_by_filter = Cell::new(false);
    let (up, down) = (Flow::default(), Flow::default());
    let mut outcome = {
        let (client_read, client_write) = tokio::io::split(&mut *client);
        let (upstream_read, upstream_write) = tokio::io::split(&mut *upstream);
        let up_pump = Pump {
            ctx,
            sides: (Side::Client, Side::Upstream),
            flow: &up,
            activity: &activity,
            closed_by_filter: &closed_by_filter,
            buffer_size,
        };
        let down_pump = Pump {
            sides: (Side::Upstream, Side::Client),
            flow: &down,
            ..up_pump
        };
        let directions = async {
            tokio::try_join!(
                up_pump.run(client_read, upstream_write, &mut up_filters, early),
                down_pump.run(upstream_read, client_write, &mut down_filters, &[]),
            )
        };
        until_done(directions, &activity, idle_timeout, (&up, &down)).await
    };
    if closed_by_filter.get() {
        outcome.end = RelayEnd::Filtered;
    }
    set_reset_on_close(upstream, &outcome);
    outcome
}

/// One direction's copy loop and what it reports to.
#[derive(Clone, Copy)]
struct Pump<'a> {
    ctx: &'a WorkerContext,
    /// Read from, write to.
    sides: (Side, Side),
    flow: &'a Flow,
    activity: &'a Cell<u64>,
    closed_by_filter: &'a Cell<bool>,
    buffer_size: usize,
}

impl Pump<'_> {
    /// Copies `from` to `to` through `filters` until end of stream, then ends `to`'s direction.
    /// `early`: bytes of `from` read before, shown to the filters first (and counted as moved
    /// when relayed, like the bytes read here).
    async fn run(
        self,
        mut from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
        filters: &mut FilterChain,
        early: &[u8],
    ) -> Result<(), SideError> {
        let (from_side, to_side) = self.sides;
        let mut buf = self.ctx.buffer(self.buffer_size);
        let mut held: Vec<u8> = Vec::new();
        let write_err = |e: std::io::Error| (to_side, e.kind());
        let mut early = Some(early).filter(|e| !e.is_empty());
        loop {
            let read: &[u8] = match early.take() {
                Some(bytes) => bytes,
                None => match from.read(&mut buf).await {
                    Ok(0) => {
                        self.flow.ended.set(true);
                        break;
                    }
                    Ok(n) => &buf[..n],
                    Err(e) => return Err((from_side, e.kind())),
                },
            };
            if !held.is_empty() {
                held.extend_from_slice(read);
            }
            let data = if held.is_empty() { read } else { &held[..] };
            match filters.on_data(data) {
                FilterVerdict::Pass => to.write_all(data).await.map_err(write_err)?,
                FilterVerdict::Replace(bytes) => to.write_all(&bytes).await.map_err(write_err)?,
                FilterVerdict::Hold => {
                    if held.is_empty() {
                        held.extend_from_slice(read);
                    }
                    if held.len() > MAX_HELD {
                        return Err(self.filter_close());
                    }
                    self.flow.moved(read.len(), self.activity);
                    continue;
                }
                FilterVerdict::Close => return Err(self.filter_close()),
            }
            held.clear();
            to.flush().await.map_err(write_err)?;
            self.flow.moved(read.len(), self.activity);
        }
        // Bytes a filter still holds at end of stream are dropped: it never let them through.
        let _ = to.shutdown().await;
        Ok(())
    }

    fn filter_close(&self) -> SideError {
        self.closed_by_filter.set(true);
        (self.sides.0, std::io::ErrorKind::ConnectionAborted)
    }
}
