//! What the session table does for sessions of the 2024-11-05 HTTP+SSE
//! transport ([`super::Session::sse`]): made when their stream opens,
//! before the client says its version; that `initialize` then sets it.
//! Such a session ends with its stream, which is its connection: while it
//! is in the table its stream is open, so it never expires idle (it may
//! still be evicted for a client under its share, which ends its stream;
//! its own client's new session never replaces it, `room`).

use super::{SessionError, SessionId, Table};
use crate::protocol::{ClientCaps, ProtocolVersion};
use tokio::time::Instant;

impl Table {
    /// Marks session `id` (just inserted) as one of the HTTP+SSE
    /// transport ([`super::Session::sse`]); false if it is gone.
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

    /// Whether live slot `i` has expired at `now`: idle `idle_timeout` or
    /// longer, unless it is an HTTP+SSE session (its open stream is its
    /// activity).
    pub(super) fn expired(&self, i: u32, now: Instant) -> bool {
        let s = self.slots[i as usize].session.as_ref().expect("live slot");
        !s.sse && self.idle_for(i, now) >= self.idle_timeout
    }

    /// Every HTTP+SSE session idle past the timeout at the head of the
    /// recency list moved on ([`Table::pass_over`]), so that the head is
    /// again the session that expires first.
    pub(super) fn pass_over_streaming(&mut self, now: Instant) {
        while self.head != super::NIL
            && !self.expired(self.head, now)
            && self.idle_for(self.head, now) >= self.idle_timeout
        {
            self.pass_over(self.head, now);
        }
    }

    /// An HTTP+SSE session found idle past the timeout at the head of the
    /// recency list: moved to its tail as if touched `now`, so the sweep
    /// goes on past it.
    fn pass_over(&mut self, i: u32, now: Instant) {
        self.unlink(i);
        self.push_tail(i);
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        s.last_seen = now;
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::{ClientCaps, ProtocolVersion};
    use crate::session::{SessionError, Table};
    use crate::share::Shares;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn an_sse_session_never_expires_idle_and_does_not_hold_the_sweep_up() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(60);
        let mut t = Table::new(4, idle, Duration::from_secs(10));
        let v = ProtocolVersion::V2024_11_05;
        let put = |t: &mut Table, at| t.insert(v, 7, ClientCaps::NONE, &Shares::default(), at);
        let sse = put(&mut t, t0).unwrap().id;
        assert!(t.set_sse(&sse));
        let plain = put(&mut t, t0 + Duration::from_secs(1)).unwrap().id;
        let late = t0 + Duration::from_secs(200);
        // The sweep passes over the stream's session and takes the other.
        assert_eq!(t.expire(late), 1);
        assert!(t.peek(&sse, late).is_some() && t.peek(&plain, late).is_none());
        assert_eq!((t.len(), t.sse_len()), (1, 1));
        // Its initialize: only by its owner, only for a session of the transport.
        let agreed = (ProtocolVersion::V2025_06_18, ClientCaps::NONE);
        assert_eq!(
            t.initialize(&sse, 8, agreed, late),
            Err(SessionError::NotFound)
        );
        assert_eq!(t.initialize(&sse, 7, agreed, late), Ok(()));
        assert_eq!(
            t.peek(&sse, late).map(|s| s.version),
            Some(ProtocolVersion::V2025_06_18)
        );
        let other = put(&mut t, late).unwrap().id;
        assert_eq!(
            t.initialize(&other, 7, agreed, late),
            Err(SessionError::NotFound)
        );
    }

    #[test]
    fn a_new_session_passes_over_a_stream_s_session_and_never_replaces_it() {
        let t0 = Instant::now();
        let (idle, min_idle) = (Duration::from_secs(60), Duration::from_secs(10));
        let mut t = Table::new(2, idle, min_idle);
        let v = ProtocolVersion::V2025_11_25;
        let put = |t: &mut Table, at| t.insert(v, 7, ClientCaps::NONE, &Shares::default(), at);
        let sse = put(&mut t, t0).unwrap().id;
        t.set_sse(&sse);
        let plain = put(&mut t, t0 + Duration::from_secs(1)).unwrap().id;
        // Full; the head (the stream's session) is passed over, the expired
        // one behind it goes.
        let late = t0 + Duration::from_secs(200);
        let third = put(&mut t, late).unwrap();
        assert_eq!(third.expired, Some(plain));
        assert!(t.peek(&sse, late).is_some());
        // Full again, both idle long enough to be replaced: only the plain one is.
        let later = late + Duration::from_secs(30);
        let fourth = put(&mut t, later).unwrap();
        assert_eq!(fourth.evicted, Some(third.id));
        let last = later + Duration::from_secs(30);
        assert_eq!(put(&mut t, last).unwrap().evicted, Some(fourth.id));
        assert!(t.peek(&sse, last).is_some(), "the stream's session stays");
        // With only the stream's session left to replace: none is.
        let mut t = Table::new(1, idle, min_idle);
        let sse = put(&mut t, t0).unwrap().id;
        t.set_sse(&sse);
        let refused = put(&mut t, t0 + Duration::from_secs(30));
        assert!(
            matches!(refused, Err(SessionError::Full { .. })),
            "{refused:?}"
        );
    }
}
