//! The connection table: the `max_connections` places of the downstream
//! listener, and who yields one when they are all taken.
//!
//! A connection is *head-less* from its accept until a complete request
//! head arrives, and again from the end of each response (the whole body,
//! SSE streams included) until the next head: it is then costing a place
//! and doing nothing. Silent sockets, half-sent heads, TLS handshakes in
//! progress and idle keep-alive connections are all head-less; a connection
//! answering a request (a call in flight, an open GET or listen stream) is
//! *busy* and is never closed to make room.
//!
//! When every place is taken, a new connection is admitted by closing the
//! connection that has been head-less longest; when its peer address
//! already holds `max_connections_per_peer` places, by closing that peer's
//! longest head-less one, and if there is none, it is refused with 503. A
//! connection head-less for less than [`CONNECTION_YIELD_GRACE`] is not
//! closed (the accept loop waits for one to come of age, or refuses a peer
//! over its share): a client gets that long to be read, however fast
//! others connect. So idle or half-sent connections can delay a client by
//! a grace period or so, never lock it out. Each closed or refused
//! connection is counted in `mcp_edge_refused_total`
//! (`limit="idle_connections"` for a head-less connection closed to free a
//! place, `limit="peer_connections"` for one closed or refused over its
//! peer's share).
//!
//! The table never reads the clock: the accept loop passes `now` to every
//! call and [`Conns::insert`] leaves it as the table's time, which is what
//! a request ending in between ([`Busy`]'s drop) records. Fixed capacity,
//! allocated at start; scans are linear in it and happen once per accept.
//!
//! [`CONNECTION_YIELD_GRACE`]: crate::limits::CONNECTION_YIELD_GRACE

use crate::limits::CONNECTION_YIELD_GRACE as GRACE;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A taken place: the peer's address and the connection's slot.
type Entry = (IpAddr, Arc<Slot>);

/// The `state` bit of a connection told to close.
const CLOSED: u32 = 1 << 31;

/// One place's shared state: read by the accept loop, written by the
/// connection's task as requests begin and end.
#[derive(Debug, Default)]
pub struct Slot {
    /// Requests being answered (low bits; HTTP/1.1: 0 or 1), or [`CLOSED`].
    state: AtomicU32,
    /// The table's time (ms since its epoch) when it last became head-less.
    since: AtomicU64,
    /// Fired once when the table closes this connection.
    close: Notify,
}

impl Slot {
    /// Resolves once the table told this connection to close (to admit a
    /// newer one); the connection then drops its socket.
    pub async fn closed(&self) {
        self.close.notified().await
    }
}

/// A request being answered on a connection: while it lives (until the
/// response body is dropped) the connection is busy.
#[derive(Debug)]
pub struct Busy {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let now = self.conns.now.load(Ordering::Relaxed);
        self.slot.since.store(now, Ordering::Relaxed);
        if self.slot.state.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Head-less again: a new connection waiting for room may take it.
            self.conns.headless.notify_waiters();
        }
    }
}

/// A response body that keeps its connection busy until it is dropped
/// (written to the end, or abandoned); frames, `is_end_stream` and
/// `size_hint` pass through untouched, so `Content-Length` stays.
#[derive(Debug)]
pub struct Held<B> {
    body: B,
    _busy: Busy,
}

impl Busy {
    /// `body`, holding this request's mark until it is dropped.
    pub fn hold<B>(self, body: B) -> Held<B> {
        Held { body, _busy: self }
    }
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A place in the table, held by the connection's task: dropping it frees
/// the place (then the `P`ermit it carries, if any).
#[derive(Debug)]
pub struct Place<P> {
    index: usize,
    slot: Arc<Slot>,
    conns: Arc<Conns>,
    _permit: P,
}

impl<P> Place<P> {
    /// The connection's shared state (for [`Slot::closed`]).
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// What the connection's request handler marks requests with.
    pub fn tracker(&self) -> Tracker {
        Tracker {
            slot: self.slot.clone(),
            conns: self.conns.clone(),
        }
    }
}

impl<P> Drop for Place<P> {
    fn drop(&mut self) {
        let mut t = self.conns.table.lock().expect("conns");
        t[self.index] = None;
    }
}

/// Marks the requests of one connection ([`Tracker::begin`]).
#[derive(Debug, Clone)]
pub struct Tracker {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Tracker {
    /// Marks a request begun; `None` if the connection was told to close
    /// (its place went to a newer connection just as this head arrived).
    pub fn begin(&self) -> Option<Busy> {
        let s = &self.slot.state;
        s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v & CLOSED == 0).then_some(v + 1)
        })
        .ok()?;
        Some(Busy {
            slot: self.slot.clone(),
            conns: self.conns.clone(),
        })
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Its peer holds its whole share, none of them head-less for a grace
    /// period.
    #[error("this address holds its share of connections ({0}), all in use")]
    PeerShare(usize),
}

/// What admitting a connection did to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Room without closing anything.
    Free,
    /// The peer's longest head-less connection was told to close.
    ClosedSamePeer,
}

/// What [`Conns::close_oldest_headless`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    /// A connection was told to close; its place frees at once.
    Closed,
    /// The longest head-less connection comes of age after this long.
    After(Duration),
    /// Every connection is busy.
    AllBusy,
}

/// The table: one entry per place, each the peer address and its slot.
#[derive(Debug)]
pub struct Conns {
    table: Mutex<Vec<Option<Entry>>>,
    per_peer: usize,
    epoch: Instant,
    /// The table's time: ms since `epoch` at the last call given `now`.
    now: AtomicU64,
    headless: Notify,
}

impl Conns {
    /// A table of `capacity` places, at most `per_peer` for one address,
    /// its time starting at `epoch`.
    pub fn new(capacity: usize, per_peer: usize, epoch: Instant) -> Arc<Conns> {
        Arc::new(Conns {
            table: Mutex::new(vec![None; capacity]),
            per_peer: per_peer.clamp(1, capacity.max(1)),
            epoch,
            now: AtomicU64::new(0),
            headless: Notify::new(),
        })
    }

    /// Moves the table's time to `now`; returns it (ms since the epoch).
    fn tick(&self, now: Instant) -> u64 {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        self.now.fetch_max(ms, Ordering::Relaxed);
        ms
    }

    /// Places taken now.
    pub fn len(&self) -> usize {
        let t = self.table.lock().expect("conns");
        t.iter().filter(|e| e.is_some()).count()
    }

    /// Whether no place is taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for a new connection from `peer` within its share: when
    /// the peer already holds `per_peer` places, its longest head-less one
    /// is told to close; if it has none past the grace period, the new one
    /// is refused. (The place itself is taken by [`Conns::insert`].)
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Result<Admission, Refusal> {
        let now = self.tick(now);
        let t = self.table.lock().expect("conns");
        let held = t.iter().flatten().filter(|(p, _)| *p == peer).count();
        if held < self.per_peer {
            return Ok(Admission::Free);
        }
        match close_oldest(t.iter().flatten().filter(|(p, _)| *p == peer), now) {
            Yield::Closed => Ok(Admission::ClosedSamePeer),
            Yield::After(_) | Yield::AllBusy => Err(Refusal::PeerShare(self.per_peer)),
        }
    }

    /// Tells the connection head-less longest, of any peer, to close if it
    /// has been so for the grace period.
    pub fn close_oldest_headless(&self, now: Instant) -> Yield {
        let now = self.tick(now);
        let t = self.table.lock().expect("conns");
        close_oldest(t.iter().flatten(), now)
    }

    /// Resolves when a busy connection becomes head-less (then
    /// [`Conns::close_oldest_headless`] may find one). `enable` it before
    /// looking, so a change in between is not missed.
    pub fn headless_again(&self) -> tokio::sync::futures::Notified<'_> {
        self.headless.notified()
    }

    /// Takes a free place for `peer` at `now`, holding `permit` (the
    /// capacity semaphore's, so a place is always free when one is held).
    ///
    /// # Panics
    /// If no place is free: a caller without a permit broke the protocol.
    pub fn insert<P>(self: &Arc<Self>, peer: IpAddr, permit: P, now: Instant) -> Place<P> {
        let now = self.tick(now);
        let mut t = self.table.lock().expect("conns");
        let index = t
            .iter()
            .position(Option::is_none)
            .expect("a permit means a free place");
        let slot = Arc::new(Slot::default());
        slot.since.store(now, Ordering::Relaxed);
        t[index] = Some((peer, slot.clone()));
        Place {
            index,
            slot,
            conns: self.clone(),
            _permit: permit,
        }
    }
}

/// Of `entries`, tells the one head-less longest to close, if that is at
/// least the grace period (marking it, so a head arriving now finds it
/// closed).
fn close_oldest<'a>(entries: impl Iterator<Item = &'a Entry>, now: u64) -> Yield {
    let oldest = entries
        .map(|(_, s)| s)
        .filter(|s| s.state.load(Ordering::Acquire) == 0)
        .min_by_key(|s| s.since.load(Ordering::Relaxed));
    let Some(slot) = oldest else {
        return Yield::AllBusy;
    };
    let age = Duration::from_millis(now.saturating_sub(slot.since.load(Ordering::Relaxed)));
    if age < GRACE {
        return Yield::After(GRACE - age);
    }
    if slot
        .state
        .compare_exchange(0, CLOSED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // A head arrived between the load and now: it is busy after all.
        return Yield::After(Duration::ZERO);
    }
    slot.close.notify_one();
    Yield::Closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    /// `t0 + ms`.
    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn the_longest_headless_connection_yields_after_its_grace_and_busy_ones_never() {
        let t0 = Instant::now();
        let c = Conns::new(3, 3, t0);
        let a = c.insert(ip(1), (), at(t0, 0));
        let b = c.insert(ip(2), (), at(t0, 10));
        let d = c.insert(ip(3), (), at(t0, 20));
        let (ta, tb, td) = (a.tracker(), b.tracker(), d.tracker());
        let busy_a = ta.begin().expect("a is open");
        let grace = GRACE.as_millis() as u64;
        // b is the longest head-less, but not yet for the grace period.
        let wait = c.close_oldest_headless(at(t0, 30));
        assert_eq!(wait, Yield::After(GRACE - Duration::from_millis(20)));
        assert!(tb.begin().is_some(), "not closed before its grace");
        // b went busy and head-less again (at the table's time, 30): d is
        // now the longest head-less.
        assert_eq!(c.close_oldest_headless(at(t0, 20 + grace)), Yield::Closed);
        assert!(td.begin().is_none(), "a closed connection takes no request");
        drop(d);
        let wait = c.close_oldest_headless(at(t0, 20 + grace));
        assert_eq!(wait, Yield::After(Duration::from_millis(10)));
        assert_eq!(c.close_oldest_headless(at(t0, 30 + grace)), Yield::Closed);
        assert!(tb.begin().is_none());
        drop(b);
        assert_eq!(c.close_oldest_headless(at(t0, 1000)), Yield::AllBusy);
        drop(busy_a);
        // a became head-less at the table's time (1000).
        assert_eq!(c.close_oldest_headless(at(t0, 1000 + grace)), Yield::Closed);
        assert_eq!(c.len(), 1);
        drop(a);
        assert!(c.is_empty());
    }

    #[test]
    fn a_peer_over_its_share_yields_its_own_oldest_or_is_refused() {
        let t0 = Instant::now();
        let later = at(t0, GRACE.as_millis() as u64);
        let c = Conns::new(8, 2, t0);
        let x1 = c.insert(ip(1), (), t0);
        let x2 = c.insert(ip(1), (), t0);
        let other = c.insert(ip(2), (), t0);
        assert_eq!(c.admit(ip(2), t0), Ok(Admission::Free));
        assert_eq!(
            c.admit(ip(1), t0),
            Err(Refusal::PeerShare(2)),
            "none past its grace"
        );
        assert_eq!(c.admit(ip(1), later), Ok(Admission::ClosedSamePeer));
        assert!(x1.tracker().begin().is_none(), "x1 was the peer's oldest");
        assert!(
            other.tracker().begin().is_some(),
            "another peer's connection is untouched"
        );
        drop(x1);
        let x3 = c.insert(ip(1), (), later);
        let _b2 = x2.tracker().begin().unwrap();
        let _b3 = x3.tracker().begin().unwrap();
        assert_eq!(
            c.admit(ip(1), at(later, 10_000)),
            Err(Refusal::PeerShare(2))
        );
    }

    #[test]
    fn a_busy_connection_turning_headless_wakes_a_waiter() {
        let c = Conns::new(1, 1, Instant::now());
        let a = c.insert(ip(1), (), Instant::now());
        let busy = a.tracker().begin().unwrap();
        let mut waiter = Box::pin(c.headless_again());
        waiter.as_mut().enable();
        let waker = futures_util::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        use std::future::Future;
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
        drop(busy);
        assert!(waiter.as_mut().poll(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn a_closed_connection_hears_it_even_if_told_before_it_listens() {
        let t0 = Instant::now();
        let c = Conns::new(1, 1, t0);
        let a = c.insert(ip(1), (), t0);
        assert_eq!(c.close_oldest_headless(t0 + GRACE), Yield::Closed);
        tokio::time::timeout(Duration::from_secs(5), a.slot().closed())
            .await
            .expect("the close is not lost");
    }
}
