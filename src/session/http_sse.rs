//! What the session table does for sessions of the 2024-11-05 HTTP+SSE
//! transport ([`Session::sse`]): made when their stream opens, before the
//! client says its version; that `initialize` then sets it.

use super::{SessionError, SessionId, Table};
use crate::protocol::{ClientCaps, ProtocolVersion};
use tokio::time::Instant;

impl Table {
    /// Marks session `id` (just inserted) as one of the HTTP+SSE
    /// transport ([`Session::sse`]); false if it is gone.
    pub fn set_sse(&mut self, id: &SessionId) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        if !s.sse {
            s.sse = true;
            self.live_sse += 1;
        }
        true
    }

    /// An `initialize` of `owner` in its HTTP+SSE session `id` at `now`
    /// (the session was made when its stream opened, before the client
    /// could say its version): the negotiated `version` and declared
    /// `caps` set, the session touched. [`SessionError::NotFound`] for a
    /// session of another owner, or one not of that transport.
    pub fn initialize(
        &mut self,
        id: &SessionId,
        owner: u64,
        (version, caps): (ProtocolVersion, ClientCaps),
        now: Instant,
    ) -> Result<(), SessionError> {
        let i = self.find(id).ok_or(SessionError::NotFound)?;
        let s = self.slots[i as usize].session.expect("live slot");
        if s.owner != owner || !s.sse {
            return Err(SessionError::NotFound);
        }
        self.touch(id, now)?;
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        (s.version, s.caps) = (version, caps);
        Ok(())
    }
}
