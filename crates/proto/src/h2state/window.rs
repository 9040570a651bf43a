//! Flow-control windows (RFC 9113 section 6.9): the send side's ([`SendWindow`], which the peer's
//! WINDOW_UPDATE and SETTINGS_INITIAL_WINDOW_SIZE move, and which may go below zero) and the
//! receive side's ([`RecvWindow`], with the credit policy a proxy wants: credit goes back as
//! the data is passed on, in batches, so a slow reader holds the sender back and nothing is
//! buffered past the window).

use crate::h2frame::ErrorCode;

/// The largest a window may be (2^31 - 1).
pub const MAX_WINDOW: i64 = 0x7fff_ffff;

/// A window that data sent to the peer uses up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow(i64);

impl SendWindow {
    pub fn new(initial: u32) -> Self {
        SendWindow(i64::from(initial))
    }

    /// How many octets may be sent now (none while the window is below zero).
    pub fn available(&self) -> u32 {
        self.0.clamp(0, MAX_WINDOW) as u32
    }

    /// `n` octets were sent (at most [`SendWindow::available`]).
    pub fn consume(&mut self, n: u32) {
        self.0 -= i64::from(n);
    }

    /// A WINDOW_UPDATE of `increment`: past 2^31 - 1 is a FLOW_CONTROL_ERROR.
    pub fn increase(&mut self, increment: u32) -> Result<(), ErrorCode> {
        let next = self.0 + i64::from(increment);
        if next > MAX_WINDOW {
            return Err(ErrorCode::FlowControl);
        }
        self.0 = next;
        Ok(())
    }

    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE went from `old` to `new`: every stream's window
    /// moves by the difference, below zero if need be (RFC 9113 6.9.2); past 2^31 - 1 is a
    /// FLOW_CONTROL_ERROR.
    pub fn adjust(&mut self, old: u32, new: u32) -> Result<(), ErrorCode> {
        let next = self.0 + i64::from(new) - i64::from(old);
        if next > MAX_WINDOW {
            return Err(ErrorCode::FlowControl);
        }
        self.0 = next;
        Ok(())
    }
}

/// A window the peer's data uses up, and the credit this side gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    /// What the peer may still send.
    window: i64,
    /// The window this side keeps offering.
    target: u32,
    /// Octets passed on whose credit has not gone back yet.
    unacked: u32,
}

impl RecvWindow {
    /// A window of `target` octets (what SETTINGS or the initial window gave the peer).
    pub fn new(target: u32) -> Self {
        RecvWindow {
            window: i64::from(target),
            target,
            unacked: 0,
        }
    }

    /// A window of `target` octets that lets the peer send `allowed` for now (more, while the
    /// peer may not yet have read this side's smaller SETTINGS_INITIAL_WINDOW_SIZE): credit goes
    /// back by `target`, which is what the peer counts.
    pub fn with_allowance(target: u32, allowed: u32) -> Self {
        RecvWindow {
            window: i64::from(allowed.max(target)),
            target,
            unacked: 0,
        }
    }

    /// `n` octets arrived (a DATA frame's whole payload, padding included): more than the window
    /// allows is a FLOW_CONTROL_ERROR.
    pub fn receive(&mut self, n: u32) -> Result<(), ErrorCode> {
        if i64::from(n) > self.window {
            return Err(ErrorCode::FlowControl);
        }
        self.window -= i64::from(n);
        Ok(())
    }

    /// `n` octets were passed on (written to the other side, or dropped): their credit goes back
    /// in one WINDOW_UPDATE once half the window has been passed on. Returns that update's
    /// increment, when one is due.
    pub fn release(&mut self, n: u32) -> Option<u32> {
        self.unacked = self.unacked.saturating_add(n);
        if self.unacked < self.target / 2 {
            return None;
        }
        let increment = std::mem::take(&mut self.unacked);
        self.window += i64::from(increment);
        Some(increment)
    }

    /// What the peer may still send.
    pub fn available(&self) -> u32 {
        self.window.clamp(0, MAX_WINDOW) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_window_follows_updates_and_settings_and_refuses_overflow() {
        let mut w = SendWindow::new(65_535);
        w.consume(65_535);
        assert_eq!(w.available(), 0);
        w.increase(10).unwrap();
        assert_eq!(w.available(), 10);
        // A smaller initial window takes it below zero: nothing may be sent until updates come.
        w.adjust(65_535, 0).unwrap();
        assert_eq!(w.available(), 0);
        w.increase(65_525).unwrap();
        assert_eq!(w.available(), 0);
        w.increase(1).unwrap();
        assert_eq!(w.available(), 1);
        let mut full = SendWindow::new(0x7fff_ffff);
        assert_eq!(full.increase(1), Err(ErrorCode::FlowControl));
        assert_eq!(full.adjust(0, 1), Err(ErrorCode::FlowControl));
    }

    #[test]
    fn the_receive_window_gives_credit_back_as_data_is_passed_on() {
        let mut w = RecvWindow::new(1000);
        w.receive(600).unwrap();
        assert_eq!(w.available(), 400);
        // More than the window: the peer broke flow control.
        assert_eq!(w.receive(401), Err(ErrorCode::FlowControl));
        // Passed on in pieces: credit goes back in one update once half the window is due.
        assert_eq!(w.release(300), None);
        assert_eq!(w.release(300), Some(600));
        assert_eq!(w.available(), 1000);
        // A reader that passes nothing on gives no credit: the sender stops at the window.
        w.receive(1000).unwrap();
        assert_eq!(w.available(), 0);
        assert_eq!(w.receive(1), Err(ErrorCode::FlowControl));
    }
}
