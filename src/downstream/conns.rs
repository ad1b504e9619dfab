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
//! closed to make room.
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
//! business (`http::accept`): a body still arriving is dropped, anything
//! else is shut down gracefully so a response hyper still holds goes out.
//!
//! With `[[client]]`s, a connection belongs to the client its last request
//! head named ([`Tracker::claim`]), and the table is shared fairly
//! ([`crate::share`]): a client at or over its share of the places does
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
//! call. A request that ends in between ([`Busy`]'s drop) marks its
//! connection idle "since after the last look", and the next look stamps
//! it with its `now`, so its grace starts no earlier than that. Fixed
//! capacity, allocated at start; scans are linear in it, once per accept.
//!
//! [`CONNECTION_YIELD_GRACE`]: crate::limits::CONNECTION_YIELD_GRACE

use crate::limits::CONNECTION_YIELD_GRACE as GRACE;
use crate::share::{self, Counts, Decision, Shares};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A taken place: the peer's key and the connection's slot.
type Entry = (IpAddr, Arc<Slot>);

/// The `state` bit of a connection told to close.
const CLOSED: u32 = 1 << 31;
/// The `state` bit of a request whose body is still arriving.
const RECEIVING: u32 = 1 << 30;
/// `since` of a connection gone idle after the table's last look.
const UNSTAMPED: u64 = u64::MAX;
/// `owner` of a connection no request head named a client on (owner marks
/// of clients are odd: [`crate::access::Access::owner`]).
const UNNAMED: u64 = 0;

/// One place's shared state: read by the accept loop, written by the
/// connection's task as requests begin and end.
#[derive(Debug, Default)]
pub struct Slot {
    /// Requests being answered (low bits; HTTP/1.1: 0 or 1), plus
    /// [`RECEIVING`] and [`CLOSED`].
    state: AtomicU32,
    /// The table's time (ms since its epoch) since when it is idle, or
    /// [`UNSTAMPED`].
    since: AtomicU64,
    /// Fired once when the table closes this connection.
    close: Notify,
    /// A request was answered on it (hyper has taken a response).
    answered: std::sync::atomic::AtomicBool,
    /// The owner mark of the client its last request head named, or
    /// [`UNNAMED`] (written under the table's lock).
    owner: AtomicU64,
}

impl Slot {
    /// Whether `state` is idle: no request, or one whose body is arriving.
    fn idle(state: u32) -> bool {
        state == 0 || state == RECEIVING | 1
    }

    /// Clears [`RECEIVING`] unless the connection was closed meanwhile.
    fn received(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v & CLOSED == 0).then_some(v & !RECEIVING)
            });
    }
}

/// A request being answered on a connection: while it lives (until the
/// response body is dropped) the connection is busy — once its body has
/// arrived ([`receive`], [`Busy::received`]).
#[derive(Debug)]
pub struct Busy {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Busy {
    /// The request is answered whatever is left of its body: busy from now.
    pub fn received(&self) {
        self.slot.received()
    }

    /// `body`, holding this request's mark until it is dropped.
    pub fn hold<B>(self, body: B) -> Marked<B> {
        Marked { body, _busy: self }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slot.since.store(UNSTAMPED, Ordering::Relaxed);
        self.slot.answered.store(true, Ordering::Relaxed);
        let was = self.slot.state.fetch_sub(1, Ordering::AcqRel);
        if was & !RECEIVING == 1 {
            // Idle again: a new connection waiting for room may take it.
            self.conns.idle.notify_waiters();
        }
    }
}

/// A response body that keeps its connection busy until hyper has taken
/// it to the end or abandoned it ([`Busy::hold`]); frames pass through
/// (with `is_end_stream` and `size_hint`, so `Content-Length` stays).
#[derive(Debug)]
pub struct Marked<B> {
    body: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for Marked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request received whole on its connection ([`receive`]).
#[derive(Debug)]
pub struct Received {
    /// Its connection's mark, busy now (`None`: a request on no
    /// connection of the table, e.g. a test's).
    pub busy: Option<Busy>,
    /// Its head.
    pub parts: http::request::Parts,
    /// Its body, whole.
    pub body: Bytes,
}

/// Why a request was not received whole ([`receive`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReceived {
    /// It could not begin on its connection ([`Tracker::enter`]).
    NotBegun(NotBegun),
    /// Its body is larger than the limit (declared, or found so while
    /// reading); what came of it was read and dropped within bounds.
    TooLarge,
    /// Its body had not all arrived by the deadline.
    TimedOut,
    /// Reading it failed.
    Unreadable(String),
}

/// The connection layer's step on a request's way down: the request
/// begins on its connection (`tracker`; `None` for a request on no
/// connection of the table), named for `claim`'s client
/// ([`Tracker::enter`]), and its body is read whole, at most `limit`
/// bytes by `until` — the connection idle while the body arrives, busy
/// once it has (what a slow body costs is an idle place, which the table
/// may close). A body over the limit (declared, or found so while
/// reading) is read on and dropped within bounds ([`discard`]) so that a
/// client that writes its whole body before reading can read the refusal,
/// unless it waits for `100 Continue`. The mark comes back with a refusal
/// too: the connection stays busy until that answer is taken.
pub async fn receive<B>(
    tracker: Option<&Tracker>,
    claim: Option<(&Shares, u64)>,
    req: http::Request<B>,
    (limit, until): (usize, Instant),
) -> Result<Received, (Option<Busy>, NotReceived)>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let receiving = !req.body().is_end_stream();
    let busy = match tracker.map(|t| t.enter(receiving, claim)) {
        None => None,
        Some(Ok(busy)) => Some(busy),
        Some(Err(e)) => return Err((None, NotReceived::NotBegun(e))),
    };
    let read = read_whole(req, limit, until).await;
    if let Some(busy) = &busy {
        busy.received();
    }
    match read {
        Ok((parts, body)) => Ok(Received { busy, parts, body }),
        Err(why) => Err((busy, why)),
    }
}

/// The body of `req`, whole, at most `limit` bytes, by `until`.
async fn read_whole<B>(
    req: http::Request<B>,
    limit: usize,
    until: Instant,
) -> Result<(http::request::Parts, Bytes), NotReceived>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let drain = crate::limits::REFUSED_BODY_DRAIN_BYTES.max(limit.saturating_mul(2));
    let declared = (req.headers().get(http::header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A client that waits for `100 Continue` sends nothing unless asked:
    // its refusal goes out at once, the body never read.
    let waits = req.headers().contains_key(http::header::EXPECT);
    let (parts, body) = req.into_parts();
    let mut body = std::pin::pin!(body);
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        if !waits && n <= drain as u64 {
            discard(&mut body, drain).await;
        }
        return Err(NotReceived::TooLarge);
    }
    let whole = http_body_util::Limited::new(&mut body, limit).collect();
    match tokio::time::timeout_at(until, whole).await {
        Err(_) => Err(NotReceived::TimedOut),
        Ok(Ok(c)) => Ok((parts, c.to_bytes())),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            discard(&mut body, drain - limit).await;
            Err(NotReceived::TooLarge)
        }
        Ok(Err(e)) => Err(NotReceived::Unreadable(e.to_string())),
    }
}

/// Reads and drops up to `bound` more bytes of a refused body, within
/// `limits::REFUSED_BODY_DRAIN_TIME` (nginx's lingering close): a client
/// that writes its whole body before reading the answer can then read the
/// refusal instead of meeting a reset. One frame at a time (at most
/// hyper's read buffer), nothing kept.
async fn discard<B>(body: &mut B, bound: usize)
where
    B: Body<Data = Bytes> + Unpin,
{
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > bound {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(crate::limits::REFUSED_BODY_DRAIN_TIME, drain).await;
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
    /// What the connection's task marks requests with.
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
        t.entries[self.index] = None;
        metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
        match self.slot.owner.load(Ordering::Relaxed) {
            UNNAMED => {}
            owner => t.counts.remove(owner),
        }
    }
}

/// Marks the requests of one connection ([`Tracker::begin`]), and hears
/// when the table closes it ([`Tracker::closed`]).
#[derive(Debug, Clone)]
pub struct Tracker {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Tracker {
    /// Marks a request begun, its body still to come when `receiving` (the
    /// connection stays idle until the body has arrived); `None` if the
    /// connection was told to close just as this head arrived.
    pub fn begin(&self, receiving: bool) -> Option<Busy> {
        let add = if receiving { RECEIVING | 1 } else { 1 };
        let s = &self.slot.state;
        s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v & CLOSED == 0).then_some(v + add)
        })
        .ok()?;
        if receiving {
            self.slot.since.store(UNSTAMPED, Ordering::Relaxed);
        }
        Some(Busy {
            slot: self.slot.clone(),
            conns: self.conns.clone(),
        })
    }

    /// A request head named client `owner` (an owner mark) on this
    /// connection: from now on it counts as one of that client's places
    /// under `shares`. `Err` when the client holds its share or more and the
    /// places left are kept for clients under theirs ([`crate::share`]): the
    /// connection is left unnamed, and its request is to be refused and the
    /// connection closed. Without shares, or for the client it already
    /// belongs to, nothing to do (no lock).
    pub fn claim(&self, shares: &Shares, owner: u64) -> Result<(), ShareRefusal> {
        let slot = &self.slot;
        if !shares.applies() || slot.owner.load(Ordering::Relaxed) == owner {
            return Ok(());
        }
        let mut t = self.conns.table.lock().expect("conns");
        match slot.owner.swap(UNNAMED, Ordering::Relaxed) {
            UNNAMED => {}
            before => t.counts.remove(before),
        }
        let capacity = t.entries.len();
        // The places named by clients are used; one no head named yet is
        // idle (a head still to come), so another client can have it.
        let used = t.counts.total();
        match share::decide(shares, capacity, used, &t.counts, owner, |_| false) {
            Decision::Refuse(_) => Err(ShareRefusal {
                held: t.counts.get(owner) as usize,
                share: shares.share_of(owner, capacity),
                capacity,
            }),
            Decision::Take | Decision::TakeFrom(_) => {
                t.counts.add(owner);
                slot.owner.store(owner, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// A request begins on this connection ([`Tracker::begin`]), its head
    /// naming `claim`'s client (`(shares, owner mark)`) when it names one
    /// ([`Tracker::claim`]): the two marks of the request's way down in one
    /// step. `Err` when the client is at its share (nothing marked) or the
    /// connection was told to close just as this head arrived.
    pub fn enter(&self, receiving: bool, claim: Option<(&Shares, u64)>) -> Result<Busy, NotBegun> {
        if let Some((shares, owner)) = claim {
            self.claim(shares, owner).map_err(NotBegun::OverShare)?;
        }
        self.begin(receiving).ok_or(NotBegun::Closed)
    }

    /// Resolves once the table told this connection to close.
    pub async fn closed(&self) {
        self.slot.close.notified().await
    }

    /// Whether a close should shut the connection down gracefully: a
    /// request was answered on it and no body is arriving now (what hyper
    /// still holds of that answer then goes out first). Otherwise there is
    /// nothing to finish, and hyper would wait for a head or body that may
    /// never come: the connection is dropped.
    pub fn closes_gracefully(&self) -> bool {
        let receiving = self.slot.state.load(Ordering::Acquire) & RECEIVING != 0;
        self.slot.answered.load(Ordering::Relaxed) && !receiving
    }

    /// Whether a request's body is arriving.
    #[cfg(test)]
    fn receiving(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) & RECEIVING != 0
    }
}

/// Why [`Tracker::claim`] refused: the client holds `held` of the
/// `capacity` places, its share is `share`, and the places left are kept
/// for clients under theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this client holds {held} of the {capacity} connections, its share is {share}, and the \
     places left are kept for other clients (connection_share); retry on a connection it \
     holds, or once one of them ends"
)]
pub struct ShareRefusal {
    /// Connections the client holds.
    pub held: usize,
    /// Its share, in whole connections.
    pub share: usize,
    /// `server.max_connections`.
    pub capacity: usize,
}

/// Why a request could not begin on a connection ([`Tracker::enter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotBegun {
    /// The table closed the connection to admit a newer one.
    Closed,
    /// The request's client holds its share of the connections.
    OverShare(ShareRefusal),
}

/// The table: one entry per place, each the peer key and its slot.
#[derive(Debug)]
pub struct Conns {
    table: Mutex<Table>,
    per_peer: usize,
    epoch: Instant,
    idle: Notify,
}

/// The places and who holds them.
#[derive(Debug)]
struct Table {
    entries: Vec<Option<Entry>>,
    /// Places per client ([`Tracker::claim`]).
    counts: Counts,
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
    fn len(&self) -> usize {
        let t = self.table.lock().expect("conns");
        t.entries.iter().filter(|e| e.is_some()).count()
    }

    /// Whether no place is taken.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
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

mod yielding;

pub use yielding::{peer_key, Admission, Refusal, Yield};

#[cfg(test)]
mod conns_tests;
