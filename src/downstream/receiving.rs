//! A request's way through its connection's place in the table
//! ([`super::conns`]): the connection layer of the downstream pipeline.
//!
//! On the way down, one step ([`receive`]): the request begins on its
//! connection and, once its head names a client, counts as one of that
//! client's places ([`Tracker::enter`]: 503 naming `connection_share` when
//! the client holds its share); its body is read whole within
//! `server.max_body_bytes` and its deadline. The connection is *idle*
//! while the body arrives (a slow body costs an idle place, which the table
//! may close) and *busy* once it has. On the way up, the response holds the
//! connection busy until hyper has taken all of it ([`Busy::hold`]). A
//! request with no body to read (GET, DELETE, a refused head) takes only
//! [`Tracker::enter`].
//!
//! It writes the state the table shares with it: a slot's bits and owner
//! mark, the table's per-client counts (under the table's lock) and its
//! idle signal; the table never calls it. Its timers (the body's deadline,
//! given by the caller, and the bounded discard of a refused body) are the
//! request's, not the table's: the table never reads the clock.

use super::conns::{Conns, Place, Slot, CLOSED, RECEIVING, UNNAMED, UNSTAMPED};
use crate::share::{self, Decision, Shares};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A request being answered on a connection: while it lives (until the
/// response body is dropped) the connection is busy — once its body has
/// arrived ([`receive`], [`Busy::received`]).
#[derive(Debug)]
pub struct Busy {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Busy {
    /// The request is answered whatever is left of its body: busy from now
    /// (unless the table closed the connection meanwhile).
    fn received(&self) {
        let _ = (self.slot.state).fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v & CLOSED == 0).then_some(v & !RECEIVING)
        });
    }

    /// `body`, the response: the request is answered whatever is left of
    /// its body ([`Busy::received`]), and its mark is held until `body` is
    /// dropped.
    pub fn hold<B>(self, body: B) -> Marked<B> {
        self.received();
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

/// Marks the requests of one connection ([`Tracker::begin`]), and hears
/// when the table closes it ([`Tracker::closed`]).
#[derive(Debug, Clone)]
pub struct Tracker {
    slot: Arc<Slot>,
    conns: Arc<Conns>,
}

impl Tracker {
    /// The tracker of the connection holding `place`: what its task marks
    /// requests with.
    pub fn of<P>(place: &Place<P>) -> Tracker {
        Tracker {
            slot: place.slot.clone(),
            conns: place.conns.clone(),
        }
    }

    /// Marks a request begun, its body still to come when `receiving` (the
    /// connection stays idle until the body has arrived); `None` if the
    /// connection was told to close just as this head arrived.
    fn begin(&self, receiving: bool) -> Option<Busy> {
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
    fn claim(&self, shares: &Shares, owner: u64) -> Result<(), ShareRefusal> {
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

#[cfg(test)]
mod receiving_tests;
