//! The connection table: the `max_connections` places of the downstream
//! listener, and who yields one when they are all taken.
//!
//! A connection is *idle* from its accept until a request head and its
//! whole body have arrived, and again from the end of each response (its
//! whole body, SSE streams included, handed to hyper) until the next head:
//! it is then costing a place and doing nothing. Silent sockets, half-sent
//! heads, bodies sent slowly, TLS handshakes in progress and idle
//! keep-alive connections are all idle; a connection answering a request
//! (a call in flight, an open GET or listen stream) is *busy* and is never
//! closed to make room. The requests of a connection mark its place through
//! [`super::receiving`], the connection layer of the request pipeline,
//! which writes the state this table shares with it (a slot's bits and
//! owner mark, the per-client counts under the table's lock, the idle
//! signal); this module never calls it.
//!
//! When every place is taken, a new connection is admitted by closing the
//! connection that has been idle longest; when its peer (an IPv4 address,
//! an IPv6 /64: [`peer_key`]) already holds `max_connections_per_peer`
//! places, by closing that peer's longest idle one, and if there is none,
//! it is refused with 503. A connection idle for less than
//! [`CONNECTION_YIELD_GRACE`] is not closed (the accept loop waits for one
//! to come of age, or refuses a peer over its share): a client gets that
//! long to be read, however fast others connect. So idle or half-sent
//! connections delay a client by a grace period or so, never lock it out.
//! Each closed or refused connection is counted in `mcp_edge_refused_total`
//! (`limit="idle_connections"` for an idle connection closed to free a
//! place, `limit="peer_connections"` for one closed or refused over its
//! peer's share). What closing does to the socket is the connection task's
//! business (`downstream::accept`): a body still arriving is dropped, anything
//! else is shut down gracefully so a response hyper still holds goes out.
//!
//! With `[[client]]`s, a connection belongs to the client its last request
//! head named ([`super::receiving::Tracker::claim`]), and the table is
//! shared fairly ([`crate::share`]): a client at or over its share of the places does
//! not take one of the last ones while other clients are under theirs
//! (its request is answered 503 naming `connection_share`, and the
//! connection closed), so its busy connections — streams, slow calls —
//! always leave a place for the others; and the connection closed to admit
//! a new one is the longest idle of the client furthest over its share —
//! at once, without the grace period: a client over its share that keeps
//! its kept-alive connections busy every few hundred milliseconds cannot
//! make others wait behind them. A connection no request head named yet is
//! idle and belongs to nobody: its place counts as one a client may still
//! have, and it is closed after those of clients over their share.
//!
//! The table never reads the clock: the accept loop passes `now` to every
//! call. A request that ends in between ([`super::receiving::Busy`]'s
//! drop) marks its connection idle "since after the last look", and the
//! next look stamps it with its `now`, so its grace starts no earlier than
//! that. Fixed
//! capacity, allocated at start; scans are linear in it, once per accept.
//!
//! [`CONNECTION_YIELD_GRACE`]: crate::limits::CONNECTION_YIELD_GRACE

use crate::limits::CONNECTION_YIELD_GRACE as GRACE;
use crate::share::{Counts, Shares};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A taken place: the peer's key and the connection's slot.
pub(super) type Entry = (IpAddr, Arc<Slot>);

/// The `state` bit of a connection told to close.
pub(super) const CLOSED: u32 = 1 << 31;
/// The `state` bit of a request whose body is still arriving.
pub(super) const RECEIVING: u32 = 1 << 30;
/// `since` of a connection gone idle after the table's last look.
pub(super) const UNSTAMPED: u64 = u64::MAX;
/// `owner` of a connection no request head named a client on (owner marks
/// of clients are odd: [`crate::access::Access::owner`]).
pub(super) const UNNAMED: u64 = 0;

/// One place's shared state: read by the accept loop, written by the
/// connection's task as requests begin and end.
#[derive(Debug, Default)]
pub struct Slot {
    /// Requests being answered (low bits; HTTP/1.1: 0 or 1), plus
    /// [`RECEIVING`] and [`CLOSED`].
    pub(super) state: AtomicU32,
    /// The table's time (ms since its epoch) since when it is idle, or
    /// [`UNSTAMPED`].
    pub(super) since: AtomicU64,
    /// Fired once when the table closes this connection.
    pub(super) close: Notify,
    /// A request was answered on it (hyper has taken a response).
    pub(super) answered: AtomicBool,
    /// The owner mark of the client its last request head named, or
    /// [`UNNAMED`] (written under the table's lock).
    pub(super) owner: AtomicU64,
}

impl Slot {
    /// Whether `state` is idle: no request, or one whose body is arriving.
    fn idle(state: u32) -> bool {
        state == 0 || state == RECEIVING | 1
    }
}

/// A place in the table, held by the connection's task: dropping it frees
/// the place (then the `P`ermit it carries, if any).
#[derive(Debug)]
pub struct Place<P> {
    index: usize,
    /// Its connection's state, marked by its requests
    /// ([`super::receiving::Tracker::of`]).
    pub(super) slot: Arc<Slot>,
    pub(super) conns: Arc<Conns>,
    _permit: P,
}

impl<P> Drop for Place<P> {
    fn drop(&mut self) {
        let mut t = self.conns.table.lock().expect("conns");
        t.entries[self.index] = None;
        metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
        match self.slot.owner.load(Ordering::Relaxed) {
            UNNAMED => {}
            owner => t.counts.remove(owner),
        }
    }
}

/// The key a peer's share is counted by: an IPv4 address (IPv4-mapped
/// IPv6 included), or an IPv6 address's /64 (one host usually holds a
/// whole /64).
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into()),
        },
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Its peer holds its whole share, none of them idle for a grace period.
    #[error("this address holds its share of connections ({0}), all in use")]
    PeerShare(usize),
}

/// What admitting a connection did to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Room without closing anything.
    Free,
    /// The peer's longest idle connection was told to close.
    ClosedSamePeer,
}

/// What [`Conns::close_oldest_idle`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    /// A connection was told to close; its place frees once it has.
    Closed,
    /// The longest idle connection comes of age after this long.
    After(Duration),
    /// Every connection is busy.
    AllBusy,
}

/// The table: one entry per place, each the peer key and its slot.
#[derive(Debug)]
pub struct Conns {
    pub(super) table: Mutex<Table>,
    per_peer: usize,
    epoch: Instant,
    /// Told when a busy connection becomes idle.
    pub(super) idle: Notify,
}

/// The places and who holds them.
#[derive(Debug)]
pub(super) struct Table {
    pub(super) entries: Vec<Option<Entry>>,
    /// Places per client ([`super::receiving::Tracker::claim`]).
    pub(super) counts: Counts,
}

impl Conns {
    /// A table of `capacity` places, at most `per_peer` for one peer key,
    /// its time starting at `epoch`.
    pub fn new(capacity: usize, per_peer: usize, epoch: Instant) -> Arc<Conns> {
        let table = Table {
            entries: vec![None; capacity],
            counts: Counts::new(),
        };
        Arc::new(Conns {
            table: Mutex::new(table),
            per_peer: per_peer.clamp(1, capacity.max(1)),
            epoch,
            idle: Notify::new(),
        })
    }

    /// `now` as the table's time (ms since its epoch).
    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Places taken now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let t = self.table.lock().expect("conns");
        t.entries.iter().filter(|e| e.is_some()).count()
    }

    /// Whether no place is taken.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves when a busy connection becomes idle (then
    /// [`Conns::close_oldest_idle`] may find one). `enable` it before
    /// looking, so a change in between is not missed.
    pub fn idle_again(&self) -> tokio::sync::futures::Notified<'_> {
        self.idle.notified()
    }

    /// Takes a free place for `peer` (a [`peer_key`]) at `now`, holding
    /// `permit` (the capacity semaphore's: a place is free when one is held).
    ///
    /// # Panics
    /// If no place is free: a caller without a permit broke the protocol.
    pub fn insert<P>(self: &Arc<Self>, peer: IpAddr, permit: P, now: Instant) -> Place<P> {
        let now = self.ms(now);
        let mut t = self.table.lock().expect("conns");
        let index = (t.entries.iter())
            .position(Option::is_none)
            .expect("a permit means a free place");
        let slot = Arc::new(Slot::default());
        slot.since.store(now, Ordering::Relaxed);
        t.entries[index] = Some((peer, slot.clone()));
        metrics::gauge!(crate::metrics::CONNECTIONS).increment(1.0);
        Place {
            index,
            slot,
            conns: self.clone(),
            _permit: permit,
        }
    }
}

impl Conns {
    /// Makes room for a new connection from `peer` (a [`peer_key`]) within
    /// its share: when the peer already holds `per_peer` places, its longest
    /// idle one is told to close; if it has none past the grace period, the
    /// new one is refused. A share of the whole table is no limit. (The
    /// place itself is taken by [`Conns::insert`].)
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Result<Admission, Refusal> {
        let now = self.ms(now);
        let t = self.table.lock().expect("conns");
        self.admit_locked(&t, peer, now, None)
    }

    /// A connection from a trusted proxy named its client (a PROXY protocol
    /// header, `super::proxied`): its place is counted as the client's from
    /// now, admitted as [`Conns::admit`] admits a new connection of that
    /// client (the proxy's own address is never held to a share).
    pub fn rekey<P>(
        &self,
        place: &Place<P>,
        peer: IpAddr,
        now: Instant,
    ) -> Result<Admission, Refusal> {
        let now = self.ms(now);
        let mut t = self.table.lock().expect("conns");
        let a = self.admit_locked(&t, peer, now, Some(place.index))?;
        if let Some(e) = t.entries[place.index].as_mut() {
            e.0 = peer;
        }
        Ok(a)
    }

    /// [`Conns::admit`] under the table's lock, the place `skip` (the
    /// connection being admitted) not counted.
    fn admit_locked(
        &self,
        t: &Table,
        peer: IpAddr,
        now: u64,
        skip: Option<usize>,
    ) -> Result<Admission, Refusal> {
        // A share of every place is no share: the whole table's rule applies
        // (wait for a place rather than be refused).
        if self.per_peer >= t.entries.len() {
            return Ok(Admission::Free);
        }
        let of_peer = || {
            (t.entries.iter().enumerate())
                .filter(move |(i, _)| Some(*i) != skip)
                .filter_map(|(_, e)| e.as_ref())
                .filter(move |(p, _)| *p == peer)
        };
        if of_peer().count() < self.per_peer {
            return Ok(Admission::Free);
        }
        match close_oldest(of_peer(), now, |_| 0) {
            Yield::Closed => Ok(Admission::ClosedSamePeer),
            Yield::After(_) | Yield::AllBusy => Err(Refusal::PeerShare(self.per_peer)),
        }
    }

    /// Tells a connection idle for the grace period, of any peer, to close:
    /// of the client furthest over its share under `shares` (without
    /// shares: of anyone), the one idle longest.
    pub fn close_oldest_idle(&self, now: Instant, shares: &Shares) -> Yield {
        let now = self.ms(now);
        let t = self.table.lock().expect("conns");
        let capacity = t.entries.len();
        let excess = |s: &Slot| match s.owner.load(Ordering::Relaxed) {
            UNNAMED => 0,
            o => shares.excess(o, t.counts.get(o), capacity),
        };
        close_oldest(t.entries.iter().flatten(), now, excess)
    }
}

/// Of `entries`, tells one idle connection to close — the highest `rank`
/// (how far its client is over its share; positive: over, and then it
/// gets no grace period), then the one idle longest, of those idle for the
/// grace period — marking it, so a head or body end arriving now finds it
/// closed; or says when the one idle longest comes of age. Stamps
/// connections gone idle since the last look.
fn close_oldest<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    now: u64,
    rank: impl Fn(&Slot) -> i64,
) -> Yield {
    let since = |s: &Slot| {
        let _ = (s.since).compare_exchange(UNSTAMPED, now, Ordering::Relaxed, Ordering::Relaxed);
        s.since.load(Ordering::Relaxed)
    };
    let grace = GRACE.as_millis() as u64;
    let (mut oldest, mut chosen) = (None::<u64>, None);
    let idle = entries
        .map(|(_, s)| (s, s.state.load(Ordering::Acquire)))
        .filter(|(_, v)| Slot::idle(*v));
    for (slot, seen) in idle {
        let at = since(slot);
        oldest = Some(oldest.map_or(at, |o| o.min(at)));
        let rank = rank(slot);
        if rank > 0 || now.saturating_sub(at) >= grace {
            let key = (rank, std::cmp::Reverse(at));
            if chosen.as_ref().is_none_or(|(k, _, _)| key > *k) {
                chosen = Some((key, slot, seen));
            }
        }
    }
    let Some((_, slot, seen)) = chosen else {
        return match oldest {
            None => Yield::AllBusy,
            Some(at) => Yield::After(GRACE - Duration::from_millis(now.saturating_sub(at))),
        };
    };
    if (slot.state)
        .compare_exchange(seen, seen | CLOSED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // It changed between the load and now (a head, or a body's end).
        return Yield::After(Duration::ZERO);
    }
    slot.close.notify_one();
    Yield::Closed
}
