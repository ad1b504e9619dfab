//! Room for one more session when the table is full: who gives up a slot,
//! under the clients' shares ([`crate::share`]), and the refusal otherwise.

use super::{Removal, SessionError, SessionId, Table, NIL};
use crate::share::{self, Decision, Shares};
use std::time::Duration;
use tokio::time::Instant;

impl Table {
    /// A free slot for one more session of `owner` ([`Table::insert`]'s
    /// rule): none needed, or the id of the session evicted for it.
    pub(super) fn make_room(
        &mut self,
        owner: u64,
        shares: &Shares,
        now: Instant,
    ) -> Result<Option<SessionId>, SessionError> {
        let decide = |idle: &[(u64, u32)]| {
            let is_idle = |c: u64| idle.iter().any(|(o, _)| *o == c);
            let (capacity, live) = (self.capacity(), self.live);
            share::decide(shares, capacity, live, &self.counts, owner, is_idle)
        };
        // Without a free slot to take (the table full, or what is free kept
        // for other clients), the sessions that may give theirs up are
        // looked for: one walk of the recency list, only then.
        let mut idle = Vec::new();
        let mut decision = decide(&idle);
        if decision != Decision::Take {
            idle = self.evictable(owner, shares, now);
            decision = decide(&idle);
        }
        match decision {
            Decision::Take => Ok(None),
            Decision::TakeFrom(c) => {
                let (_, i) = *idle.iter().find(|(o, _)| *o == c).expect("an idle session");
                let id = self.id_at(i);
                let why = match c == owner || !shares.applies() {
                    true => Removal::Lru,
                    false => Removal::Share,
                };
                self.release(i, why);
                Ok(Some(id))
            }
            Decision::Refuse(why) => Err(self.refusal(why, owner, shares, now)),
        }
    }

    /// Per owner, the session [`Table::make_room`] may evict for `who`: its
    /// least recently used one with no request in flight — for `who`'s own
    /// (and anyone's without shares) only once idle `min_idle_before_evict`,
    /// and never an HTTP+SSE session (its stream is open).
    /// One walk of the recency list, made only when no free slot may be taken.
    fn evictable(&self, who: u64, shares: &Shares, now: Instant) -> Vec<(u64, u32)> {
        let mut seen: Vec<u64> = Vec::new();
        let mut found = Vec::new();
        let mut i = self.head;
        while i != NIL {
            let s = self.slots[i as usize].session.expect("live slot");
            let own = s.owner == who || !shares.applies();
            // An HTTP+SSE session's stream is open: it is not idle to its
            // own client (a client under its share may still take it).
            let streaming = own && s.sse;
            if !streaming && !seen.contains(&s.owner) {
                seen.push(s.owner);
                if !own || self.idle_for(i, now) >= self.min_idle_before_evict {
                    found.push((s.owner, i));
                }
            }
            i = self.slots[i as usize].next;
        }
        found
    }

    /// The error of a refused `initialize` of `owner`, counted: retry once
    /// its own least recently used session (anyone's without shares) may be
    /// replaced.
    fn refusal(
        &self,
        why: share::Refusal,
        owner: u64,
        shares: &Shares,
        now: Instant,
    ) -> SessionError {
        let mut i = self.head;
        while i != NIL
            && shares.applies()
            && self.slots[i as usize]
                .session
                .is_some_and(|s| s.owner != owner)
        {
            i = self.slots[i as usize].next;
        }
        let idle = match i {
            NIL => Duration::ZERO,
            i => self.idle_for(i, now),
        };
        let retry_after =
            (self.min_idle_before_evict.saturating_sub(idle)).max(Duration::from_secs(1));
        let capacity = self.capacity();
        match why {
            share::Refusal::Full => {
                crate::metrics::refused("session_capacity");
                SessionError::Full {
                    capacity,
                    retry_after,
                }
            }
            share::Refusal::Share => {
                crate::metrics::refused("session_share");
                SessionError::Share {
                    held: self.counts.get(owner) as usize,
                    share: shares.share_of(owner, capacity),
                    capacity,
                    retry_after,
                }
            }
        }
    }
}
