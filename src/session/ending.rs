//! How sessions leave the table: the reasons, and the drain of a box
//! that is leaving its fleet.

use super::Table;

/// Why a session left the table (the `reason` label of `mcp_edge_sessions_evicted_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Idle for `idle_timeout` or longer.
    Idle,
    /// Least recently used, evicted to make room for a new `initialize`
    /// of its own client (or of anyone, without `[[client]]`s).
    Lru,
    /// Evicted for a new `initialize` of a client under its share: the
    /// least recently used idle session of the client furthest over its
    /// share ([`crate::share`]).
    Share,
    /// Ended by the client (HTTP DELETE).
    Deleted,
    /// Its HTTP+SSE stream closed (that transport's session ends with
    /// its stream, [`Session::sse`]).
    Closed,
    /// Its client is no longer in the `[[client]]` table (a reload).
    Revoked,
    /// The gateway is stopping.
    Shutdown,
    /// The box is draining (SIGTERM, `server.drain_grace`): its client is
    /// told to initialize again, on another box ([`Table::drain`]).
    Drained,
}

impl Removal {
    pub(super) fn label(self) -> &'static str {
        match self {
            Removal::Idle => "idle",
            Removal::Lru => "lru",
            Removal::Share => "share",
            Removal::Deleted => "deleted",
            Removal::Closed => "closed",
            Removal::Revoked => "revoked",
            Removal::Shutdown => "shutdown",
            Removal::Drained => "drain",
        }
    }
}

impl Table {
    /// The box is leaving (SIGTERM): every session now in the table is
    /// told to initialize again — ended at once when idle (its next request
    /// is answered 404), else marked [`super::Session::ending`] and ended when its
    /// last request in flight ends, so what it runs finishes first.
    /// Sessions opened after this are not touched. Returns how many ended
    /// now.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() as u32 {
            let Some(s) = self.slots[i as usize].session.as_mut() else {
                continue;
            };
            if s.busy > 0 {
                s.ending = true;
            } else {
                self.release(i, Removal::Drained);
                n += 1;
            }
        }
        n
    }
}
