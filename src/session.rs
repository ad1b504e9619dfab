//! The fixed-capacity table of legacy downstream sessions.
//!
//! Legacy revisions (2025-03-26 … 2025-11-25) give each `initialize` a
//! session named by `Mcp-Session-Id` (`../shared/spec/2025-11-25/transports.mdx`
//! §Session Management). The table is one allocation made at start-up with
//! `capacity` slots and never grows. The current time is an argument of every
//! method (no clock inside), so tests drive expiry without sleeping.
//!
//! A session id is 32 hex digits of CSPRNG output followed by 4 hex digits of
//! slot index: lookup is O(1) (parse the slot, compare the secret in constant
//! time), and the id stays unguessable (128 random bits).

use crate::instance::InstanceId;
use crate::protocol::{ClientCaps, ProtocolVersion};
use crate::share::{Counts, Shares};
use std::time::Duration;
use tokio::time::Instant;

mod ending;
mod http_sse;
mod id;
pub use ending::Removal;
pub use id::SessionId;

/// What one legacy session holds: fixed-size, no heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// The negotiated legacy protocol version.
    pub version: ProtocolVersion,
    /// When the last client request arrived (idle clock).
    pub last_seen: Instant,
    /// Whether `notifications/initialized` arrived.
    pub initialized: bool,
    /// GET streams open on this session.
    pub streams: u8,
    /// The least severe `notifications/message` the client wants, as a rank
    /// of `relay::LOG_LEVELS` (`logging/setLevel`; 0 = all).
    pub log_floor: u8,
    /// Who created it (`crate::access::Access::owner`; 0 = anonymous):
    /// another client presenting its id is answered as for an unknown id.
    pub owner: u64,
    /// Its requests being served now ([`Table::begin_request`]). A session
    /// with one in flight is not idle: it is out of the recency list, so
    /// neither expiry nor LRU eviction can take it, and its idle clock
    /// starts again when the last one ends.
    pub busy: u32,
    /// What the client declared at `initialize` of elicitation, sampling
    /// and roots ([`ClientCaps`]): asked of a modern upstream for it.
    pub caps: ClientCaps,
    /// Opened by a `GET /sse` of the 2024-11-05 HTTP+SSE transport
    /// ([`Table::set_sse`]): its answers go on that stream, and it ends
    /// with it.
    pub sse: bool,
    /// Told to initialize again by a drain ([`Table::drain`]): it ends
    /// when its last request in flight ends.
    pub ending: bool,
}

const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Slot {
    secret: [u8; 16],
    session: Option<Session>,
    /// Neighbours in the recency list (live slots) or the free list.
    prev: u32,
    next: u32,
}

/// Errors of [`Table`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// Every slot holds a session active within `min_idle_before_evict`: HTTP
    /// 503; `retry_after` is when the least recently used one qualifies.
    #[error("session table full ({capacity} sessions active); retry in {}s", retry_after.as_secs().max(1))]
    Full {
        /// The table's fixed capacity.
        capacity: usize,
        /// Until the oldest session may be evicted.
        retry_after: Duration,
    },
    /// The client holds its share of the table or more, and the places
    /// left are kept for clients under theirs ([`crate::share`]): HTTP 503.
    #[error("the session table keeps its last places for clients under their share; \
             this client holds {held}, its share is {share} of {capacity} (session_share); \
             retry in {}s", retry_after.as_secs().max(1))]
    Share {
        /// Sessions the client holds.
        held: usize,
        /// Its share of the table, in whole sessions.
        share: usize,
        /// The table's fixed capacity.
        capacity: usize,
        /// Until its least recently used session may be replaced.
        retry_after: Duration,
    },
    /// Unknown, deleted or expired id: HTTP 404.
    #[error("unknown or ended session")]
    NotFound,
    /// The session already has its maximum of open GET streams: HTTP 429.
    #[error("this session already has {max} open GET streams")]
    TooManyStreams {
        /// `limits::MAX_STREAMS_PER_SESSION`.
        max: u8,
    },
    /// The CSPRNG failed (getrandom).
    #[error("no randomness for a session id: {0}")]
    Random(String),
}

/// Fixed-capacity session table with O(1) insert, lookup, touch and removal.
///
/// Live slots form a doubly linked recency list (least recently used at the
/// head), free slots a singly linked free list, both threaded through the slot
/// array itself, so the table allocates once and never again. Because `touch`
/// moves a slot to the tail with `last_seen = now`, the head is always the
/// session idle the longest: expiry and LRU eviction look only at the head
/// (HTTP+SSE sessions, which never expire, are moved on from it first:
/// `pass_over_streaming`).
/// A session with a request in flight is taken out of the list until its
/// last request ends ([`Table::begin_request`], [`Table::end_request`]), so
/// it can be neither expired nor evicted while it works.
///
/// Every ending, whichever method causes it (an expired session found by
/// `touch`, LRU eviction in `insert`, `expire`, `revoke`, `remove`), goes
/// through one private `release`, which also records the id and reason;
/// the owner of the table takes them with [`Table::take_ended`] after each
/// call and finishes each ending (upstream state, subscriptions, streams):
/// no way of ending a session can skip those steps.
#[derive(Debug)]
pub struct Table {
    slots: Box<[Slot]>,
    /// Endings not yet taken ([`Table::take_ended`]): allocated with room
    /// for every slot at construction, so a call that ends every session
    /// still fits, and never grown.
    ended: Vec<(SessionId, Removal)>,
    idle_timeout: Duration,
    min_idle_before_evict: Duration,
    live: usize,
    /// Of them, sessions of the HTTP+SSE transport ([`Session::sse`]).
    live_sse: usize,
    head: u32,
    tail: u32,
    free: u32,
    /// Sessions held per owner mark ([`crate::share`]).
    counts: Counts,
    /// The box whose ids these are ([`Table::with_instance`]).
    instance: InstanceId,
}

/// What [`Table::insert`] did: the new session, and the sessions it ended
/// to make room (each must be ended fully by the caller: its streams,
/// relayed requests and subscriptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// The new session.
    pub id: SessionId,
    /// An expired session removed (reason `idle`).
    pub expired: Option<SessionId>,
    /// An idle session evicted (reason `lru` or `share`).
    pub evicted: Option<SessionId>,
}

impl Table {
    /// A table with `capacity` slots (allocated now, never grown; 1…65,536)
    /// whose sessions expire after `idle_timeout` without a client request;
    /// when full, a session idle for `min_idle_before_evict` may be evicted.
    pub fn new(capacity: usize, idle_timeout: Duration, min_idle_before_evict: Duration) -> Self {
        let capacity = capacity.clamp(1, u16::MAX as usize + 1);
        let slots = (0..capacity)
            .map(|i| Slot {
                secret: [0; 16],
                session: None,
                prev: NIL,
                next: if i + 1 < capacity {
                    (i + 1) as u32
                } else {
                    NIL
                },
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Table {
            ended: Vec::with_capacity(slots.len()),
            slots,
            idle_timeout,
            min_idle_before_evict: min_idle_before_evict.min(idle_timeout),
            live: 0,
            live_sse: 0,
            head: NIL,
            tail: NIL,
            free: 0,
            counts: Counts::new(),
            instance: InstanceId::DEFAULT,
        }
    }

    /// The fixed capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sessions currently held (expired ones count until removed).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Of [`Table::len`], the sessions of the HTTP+SSE transport.
    pub fn sse_len(&self) -> usize {
        self.live_sse
    }

    /// True when no session is held.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Bytes the table occupies (fixed at construction).
    pub fn footprint_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of_val(&*self.slots)
            + self.ended.capacity() * std::mem::size_of::<(SessionId, Removal)>()
    }

    /// The sessions ended since the last call, with why, oldest first
    /// (see [`Table`]): the caller finishes each ending.
    pub fn take_ended(&mut self) -> std::vec::Drain<'_, (SessionId, Removal)> {
        self.ended.drain(..)
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = (self.slots[i as usize].prev, self.slots[i as usize].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_tail(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.prev = self.tail;
        s.next = NIL;
        match self.tail {
            NIL => self.head = i,
            t => self.slots[t as usize].next = i,
        }
        self.tail = i;
    }

    /// Frees live slot `i`, counting `why` and recording the ending for
    /// [`Table::take_ended`]: the one place a session ends.
    fn release(&mut self, i: u32, why: Removal) {
        if self.in_list(i) {
            self.unlink(i);
        }
        let id = self.id_at(i);
        // Room for every slot was made at construction; an owner that
        // never takes its endings loses the oldest, not memory.
        if self.ended.len() == self.ended.capacity() {
            self.ended.remove(0);
        }
        self.ended.push((id, why));
        let s = &mut self.slots[i as usize];
        if let Some(gone) = s.session.take() {
            self.counts.remove(gone.owner);
            self.live_sse -= usize::from(gone.sse);
        }
        s.secret = [0; 16];
        s.prev = NIL;
        s.next = self.free;
        self.free = i;
        self.live -= 1;
        metrics::counter!(crate::metrics::SESSIONS_EVICTED, "reason" => why.label()).increment(1);
    }

    /// Whether live slot `i` is in the recency list (not busy).
    fn in_list(&self, i: u32) -> bool {
        self.slots[i as usize].session.is_some_and(|s| s.busy == 0)
    }

    /// How long live slot `i` has been idle: zero while a request of it is
    /// in flight.
    fn idle_for(&self, i: u32, now: Instant) -> Duration {
        let s = self.slots[i as usize].session.as_ref().expect("live slot");
        if s.busy > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(s.last_seen)
    }

    /// Creates a session for an `initialize` that negotiated `version`, owned
    /// by `owner` ([`Session::owner`]) with the client's declared `caps`,
    /// under the clients' `shares` ([`crate::share::decide`]). When full, an
    /// expired session at the head of the recency list goes first (reason
    /// `idle`). Then a client under its share takes the least recently used
    /// session with no request in flight of the client furthest over its
    /// share, however recently used (reason `share`); any client may replace
    /// its own least recently used session once that has been idle
    /// `min_idle_before_evict` (reason `lru`; without `[[client]]`s, anyone's
    /// is everyone's). A client at or over its share does not take one of
    /// the last free slots while other clients are under theirs (one is kept
    /// for each). The sessions ended are in the [`Inserted`]: the caller ends
    /// what they held. Errors: [`SessionError::Full`] (counted as
    /// `session_capacity`), [`SessionError::Share`] (`session_share`),
    /// [`SessionError::Random`]; the table is unchanged then.
    pub fn insert(
        &mut self,
        version: ProtocolVersion,
        owner: u64,
        caps: ClientCaps,
        shares: &Shares,
        now: Instant,
    ) -> Result<Inserted, SessionError> {
        let mut secret = [0u8; 16];
        getrandom::fill(&mut secret).map_err(|e| SessionError::Random(e.to_string()))?;
        let mut expired = None;
        self.pass_over_streaming(now);
        if self.free == NIL && self.head != NIL && self.expired(self.head, now) {
            expired = Some(self.id_at(self.head));
            self.release(self.head, Removal::Idle);
        }
        let evicted = self.make_room(owner, shares, now)?;
        let i = self.free;
        self.free = self.slots[i as usize].next;
        let slot = &mut self.slots[i as usize];
        slot.secret = secret;
        slot.session = Some(Session {
            version,
            last_seen: now,
            initialized: false,
            log_floor: 0,
            streams: 0,
            owner,
            busy: 0,
            caps,
            sse: false,
            ending: false,
        });
        self.push_tail(i);
        self.live += 1;
        self.counts.add(owner);
        Ok(Inserted {
            id: self.id_at(i),
            expired,
            evicted,
        })
    }

    /// The id of live slot `i`.
    pub(super) fn id_at(&self, i: u32) -> SessionId {
        SessionId {
            instance: self.instance,
            secret: self.slots[i as usize].secret,
            slot: i as u16,
        }
    }

    fn find(&self, id: &SessionId) -> Option<u32> {
        let slot = self.slots.get(id.slot as usize)?;
        // Constant-time comparison of the secret.
        let diff = slot
            .secret
            .iter()
            .zip(id.secret.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        let here = id.instance == self.instance;
        (diff == 0 && here && slot.session.is_some()).then_some(id.slot as u32)
    }

    /// Looks up a session for a client request and marks it active at `now`.
    /// An expired session is removed and reported as [`SessionError::NotFound`].
    pub fn touch(&mut self, id: &SessionId, now: Instant) -> Result<Session, SessionError> {
        let i = self.find(id).ok_or(SessionError::NotFound)?;
        if self.expired(i, now) {
            self.release(i, Removal::Idle);
            return Err(SessionError::NotFound);
        }
        if self.in_list(i) {
            self.unlink(i);
            self.push_tail(i);
        }
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        s.last_seen = now;
        Ok(*s)
    }

    /// A request of the session is being served (the caller has just
    /// [`Table::touch`]ed it): while any is, the session is not idle
    /// (issue 13 part 6). False if the id is unknown. Pair with
    /// [`Table::end_request`].
    pub fn begin_request(&mut self, id: &SessionId) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        if self.in_list(i) {
            self.unlink(i);
        }
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        s.busy = s.busy.saturating_add(1);
        true
    }

    /// A request begun by [`Table::begin_request`] ended at `now`: when it
    /// was the last, the idle clock starts again from `now`. No-op if the
    /// session is gone (deleted or revoked meanwhile).
    pub fn end_request(&mut self, id: &SessionId, now: Instant) {
        let Some(i) = self.find(id) else {
            return;
        };
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        if s.busy == 0 {
            return;
        }
        s.busy -= 1;
        s.last_seen = now;
        if s.busy == 0 {
            let ending = s.ending;
            // Back in the list first: `release` unlinks what it finds there.
            self.push_tail(i);
            if ending {
                self.release(i, Removal::Drained);
            }
        }
    }

    /// A request of `owner` in session `id` begins at `now`: the one lookup
    /// of a legacy request ([`Table::touch`] then [`Table::begin_request`]).
    /// A session of another owner is [`SessionError::NotFound`], as an
    /// unknown one. Pair with [`Table::end_request`].
    pub fn enter(
        &mut self,
        id: &SessionId,
        owner: u64,
        now: Instant,
    ) -> Result<Session, SessionError> {
        match self.find(id) {
            Some(i)
                if self.slots[i as usize]
                    .session
                    .is_some_and(|s| s.owner == owner) => {}
            _ => return Err(SessionError::NotFound),
        }
        let seen = self.touch(id, now)?;
        self.begin_request(id);
        Ok(seen)
    }

    /// Looks up a session without touching its idle clock (GET streams use
    /// this: an open stream does not keep a session alive, except an
    /// HTTP+SSE session's own, [`Table::expired`]).
    pub fn peek(&self, id: &SessionId, now: Instant) -> Option<Session> {
        let i = self.find(id)?;
        (!self.expired(i, now)).then(|| self.slots[i as usize].session.expect("live slot"))
    }

    /// Ends every session whose owner mark `keep` refuses, for `why`
    /// (`revoked` at a reload, `shutdown`); returns how many.
    pub fn revoke(&mut self, keep: impl Fn(u64) -> bool, why: Removal) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() as u32 {
            if self.slots[i as usize]
                .session
                .is_some_and(|x| !keep(x.owner))
            {
                self.release(i, why);
                n += 1;
            }
        }
        n
    }

    /// The owner mark of a session still in its slot, expired or not.
    pub fn owner(&self, id: &SessionId) -> Option<u64> {
        let i = self.find(id)?;
        self.slots[i as usize].session.map(|s| s.owner)
    }

    /// Opens a GET stream on a session (a client request: touches it). At
    /// most `max` at once. Errors: [`SessionError::NotFound`], or
    /// [`SessionError::TooManyStreams`] (counted as `streams_per_session`).
    pub fn open_stream(
        &mut self,
        id: &SessionId,
        now: Instant,
        max: u8,
    ) -> Result<Session, SessionError> {
        self.touch(id, now)?;
        let i = self.find(id).ok_or(SessionError::NotFound)?;
        let s = self.slots[i as usize].session.as_mut().expect("live slot");
        // An HTTP+SSE session's notifications go on its own stream only.
        let max = if s.sse { 1 } else { max };
        if s.streams >= max {
            crate::metrics::refused("streams_per_session");
            return Err(SessionError::TooManyStreams { max });
        }
        s.streams += 1;
        Ok(*s)
    }

    /// A GET stream of the session ended (no-op if the session is gone).
    pub fn close_stream(&mut self, id: &SessionId) {
        if let Some(i) = self.find(id) {
            if let Some(s) = self.slots[i as usize].session.as_mut() {
                s.streams = s.streams.saturating_sub(1);
            }
        }
    }

    /// Records `notifications/initialized`.
    pub fn mark_initialized(&mut self, id: &SessionId) {
        if let Some(i) = self.find(id) {
            if let Some(s) = self.slots[i as usize].session.as_mut() {
                s.initialized = true;
            }
        }
    }

    /// Records the session's `logging/setLevel` (2025-11-25
    /// server/utilities/logging.mdx); false if the id was unknown.
    pub fn set_log_floor(&mut self, id: &SessionId, rank: u8) -> bool {
        let Some(i) = self.find(id) else {
            return false;
        };
        match self.slots[i as usize].session.as_mut() {
            Some(s) => {
                s.log_floor = rank;
                true
            }
            None => false,
        }
    }

    /// Ends a session for `why` (HTTP DELETE: [`Removal::Deleted`]); its
    /// slot is free at once. Returns false if the id was unknown.
    pub fn remove(&mut self, id: &SessionId, why: Removal) -> bool {
        match self.find(id) {
            Some(i) => {
                self.release(i, why);
                true
            }
            None => false,
        }
    }

    /// Removes every session idle for `idle_timeout` or longer (they sit at
    /// the head of the recency list; HTTP+SSE sessions, which never expire,
    /// are passed over); returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            self.pass_over_streaming(now);
            if self.head == NIL || !self.expired(self.head, now) {
                return n;
            }
            self.release(self.head, Removal::Idle);
            n += 1;
        }
    }

    /// When the next session will expire if nobody touches it (for the sweep timer).
    pub fn next_expiry(&self) -> Option<Instant> {
        let s = self.slots.get(self.head as usize)?.session.as_ref()?;
        Some(s.last_seen + self.idle_timeout)
    }
}

mod room;
#[cfg(test)]
mod session_tests;
