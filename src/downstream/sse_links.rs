//! The fixed table of open HTTP+SSE streams (the 2024-11-05 transport,
//! [`super::sse_transport`]): for each, the way its `POST /messages`
//! reach it. A POSTed request is handed to its stream as the events of its
//! answer ([`Answering`]), which the stream's body polls and writes: no
//! task per request, and the answer goes where the client reads it.
//!
//! Each entry belongs to a stream holding a place in the stream pool
//! ([`super::streams`]) and sits at that place's index: the table has as
//! many entries as the pool has places, and a place the pool gives to a
//! new stream (its old one evicted for a client under its share) gives it
//! the entry too. A stream's entry goes when its body is dropped; while it
//! only finishes what it was answering, it takes no new request, but its
//! client may still answer relayed requests and cancel.

use crate::session::SessionId;
use crate::share::{self, Counts, Decision, Shares};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// One whole SSE event, in the pieces it is written in.
pub type Event = Vec<Bytes>;

/// The events answering one POSTed request, in order, then its end.
pub type Answering = futures_util::stream::BoxStream<'static, Event>;

/// The table (see the module docs).
pub struct SseLinks {
    slots: Mutex<Box<[Option<Link>]>>,
    /// Requests in flight on every stream together: each stands for the
    /// connection a `/mcp` POST would hold while answered
    /// (`server.max_connections` places), shared among `[[client]]`s as
    /// connections are ([`crate::share`]).
    calls: Arc<Mutex<Calls>>,
    call_capacity: usize,
}

/// The requests in flight on every stream, and whose.
struct Calls {
    open: usize,
    counts: Counts,
}

struct Link {
    id: SessionId,
    owner: u64,
    /// `None` once its stream only finishes what it answers.
    tx: Option<mpsc::Sender<Answering>>,
    /// Its requests in flight ([`crate::limits::SSE_CALLS_PER_SESSION`]).
    calls: Arc<Semaphore>,
}

/// Why a request was not handed to its stream ([`SseLinks::hand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotHanded {
    /// No stream of this client's that takes requests has that session
    /// (HTTP 404).
    #[error("no open SSE stream of this client has that session")]
    NoStream,
    /// The session has [`crate::limits::SSE_CALLS_PER_SESSION`] requests
    /// in flight (429, `sse_session_calls`).
    #[error("this session already has {0} requests in flight; wait for an answer")]
    SessionBusy(usize),
    /// Every stream together has `server.max_connections` requests in
    /// flight (`sse_calls`).
    #[error("the HTTP+SSE transport already has {0} requests in flight; retry")]
    Full(usize),
    /// The client holds its share of them, the rest kept for clients
    /// under theirs (`sse_call_share`).
    #[error(
        "this client holds {held} of the HTTP+SSE transport's {capacity} requests in flight, \
             its share is {share}, and the places left are kept for other clients; retry"
    )]
    Share {
        /// Its requests in flight.
        held: usize,
        /// Its share of them, in whole requests.
        share: usize,
        /// The transport's bound (`server.max_connections`).
        capacity: usize,
    },
    /// The stream has not taken what was handed to it (its client does
    /// not read): nothing more is queued (HTTP 429, `sse_session_calls`).
    #[error("this session's stream is not being read; nothing more is queued for it")]
    Backlog,
}

impl NotHanded {
    /// Its `mcp_edge_refused_total` label (`None`: not a limit).
    pub fn limit(self) -> Option<&'static str> {
        match self {
            NotHanded::NoStream => None,
            NotHanded::SessionBusy(_) | NotHanded::Backlog => Some("sse_session_calls"),
            NotHanded::Full(_) => Some("sse_calls"),
            NotHanded::Share { .. } => Some("sse_call_share"),
        }
    }
}

/// A request's places while it is answered: given back when its events
/// have all been written (or its stream went).
pub struct CallPlaces {
    _session: OwnedSemaphorePermit,
    all: Arc<Mutex<Calls>>,
    owner: u64,
}

impl Drop for CallPlaces {
    fn drop(&mut self) {
        let mut calls = self.all.lock().expect("sse calls");
        calls.open -= 1;
        calls.counts.remove(self.owner);
    }
}

impl SseLinks {
    /// A table of `capacity` streams whose requests in flight are at most
    /// `calls` together.
    pub fn new(capacity: usize, calls: usize) -> Self {
        SseLinks {
            slots: Mutex::new((0..capacity).map(|_| None).collect()),
            calls: Arc::new(Mutex::new(Calls {
                open: 0,
                counts: Counts::new(),
            })),
            call_capacity: calls,
        }
    }

    /// Registers the stream of session `id` of `owner`, holding the stream
    /// pool's place `index`: the receiver of what its POSTs hand it. An
    /// entry still there is an evicted stream's: it goes (its sender
    /// dropped, that stream takes nothing more).
    pub fn insert(&self, index: usize, id: SessionId, owner: u64) -> mpsc::Receiver<Answering> {
        let per_session = crate::limits::SSE_CALLS_PER_SESSION;
        // Room for every request in flight (each holds a place) and as many
        // refusals; full only while the stream is not read.
        let (tx, rx) = mpsc::channel(2 * per_session);
        let mut slots = self.slots.lock().expect("sse links");
        slots[index] = Some(Link {
            id,
            owner,
            tx: Some(tx),
            calls: Arc::new(Semaphore::new(per_session)),
        });
        rx
    }

    /// The stream of session `id` only finishes what it answers: no new
    /// request is handed to it.
    pub fn draining(&self, id: &SessionId) {
        let mut slots = self.slots.lock().expect("sse links");
        if let Some(link) = slots.iter_mut().flatten().find(|l| l.id == *id) {
            link.tx = None;
        }
    }

    /// The stream of session `id` ended: its entry goes.
    pub fn remove(&self, id: &SessionId) {
        let mut slots = self.slots.lock().expect("sse links");
        let mine = |s: &&mut Option<Link>| s.as_ref().is_some_and(|l| l.id == *id);
        if let Some(s) = slots.iter_mut().find(mine) {
            *s = None;
        }
    }

    /// Whether session `id` of `owner` has a stream (taking requests, or
    /// finishing what it answers). The scans here are over at most the
    /// stream pool's places.
    pub fn is_open(&self, id: &SessionId, owner: u64) -> bool {
        let slots = self.slots.lock().expect("sse links");
        let mut links = slots.iter().flatten();
        links.any(|l| l.id == *id && l.owner == owner)
    }

    /// Whether a request of `owner` may be handed to the stream of
    /// session `id` now: its places (the session's, then the transport's
    /// under `shares`), or why not.
    pub fn places(
        &self,
        id: &SessionId,
        owner: u64,
        shares: &Shares,
    ) -> Result<CallPlaces, NotHanded> {
        let session = {
            let slots = self.slots.lock().expect("sse links");
            let mut links = slots.iter().flatten();
            let link = links.find(|l| l.id == *id && l.owner == owner && l.tx.is_some());
            link.ok_or(NotHanded::NoStream)?.calls.clone()
        };
        let mine = session
            .try_acquire_owned()
            .map_err(|_| NotHanded::SessionBusy(crate::limits::SSE_CALLS_PER_SESSION))?;
        let capacity = self.call_capacity;
        let mut calls = self.calls.lock().expect("sse calls");
        let c = &mut *calls;
        // Nothing in flight is given up for another: only take or refuse.
        match share::decide(shares, capacity, c.open, &c.counts, owner, |_| false) {
            Decision::Take | Decision::TakeFrom(_) => {}
            Decision::Refuse(share::Refusal::Full) => return Err(NotHanded::Full(capacity)),
            Decision::Refuse(share::Refusal::Share) => {
                let held = c.counts.get(owner) as usize;
                let share = shares.share_of(owner, capacity);
                return Err(NotHanded::Share {
                    held,
                    share,
                    capacity,
                });
            }
        }
        c.open += 1;
        c.counts.add(owner);
        drop(calls);
        Ok(CallPlaces {
            _session: mine,
            all: self.calls.clone(),
            owner,
        })
    }

    /// Hands `answering` (holding its places) to the stream of session
    /// `id`.
    pub fn hand(&self, id: &SessionId, answering: Answering) -> Result<(), NotHanded> {
        let slots = self.slots.lock().expect("sse links");
        let link = slots.iter().flatten().find(|l| l.id == *id);
        let tx = link
            .and_then(|l| l.tx.as_ref())
            .ok_or(NotHanded::NoStream)?;
        tx.try_send(answering).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => NotHanded::Backlog,
            mpsc::error::TrySendError::Closed(_) => NotHanded::NoStream,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn id(n: u8) -> SessionId {
        SessionId::parse(&format!("edge.{n:032x}{n:04x}")).unwrap()
    }

    #[test]
    fn a_place_given_to_a_new_stream_takes_its_entry_and_a_finishing_one_takes_no_request() {
        let links = SseLinks::new(2, 3);
        let (a, b) = (id(1), id(2));
        let mut old = links.insert(0, a, 7);
        assert!(
            links.is_open(&a, 7) && !links.is_open(&a, 8),
            "another owner's is not open"
        );
        // The pool gave place 0 to b's stream: a's takes nothing more.
        let _new = links.insert(0, b, 8);
        assert!(old.try_recv().is_err() && !links.is_open(&a, 7));
        assert!(matches!(
            links.places(&a, 7, &Shares::default()),
            Err(NotHanded::NoStream)
        ));
        // Finishing: no request, but still open for answers and cancellations.
        let held = links.places(&b, 8, &Shares::default()).expect("places");
        links.draining(&b);
        assert!(links.is_open(&b, 8));
        assert!(matches!(
            links.places(&b, 8, &Shares::default()),
            Err(NotHanded::NoStream)
        ));
        let answering = futures_util::stream::empty().boxed();
        assert_eq!(links.hand(&b, answering).err(), Some(NotHanded::NoStream));
        drop(held);
        links.remove(&b);
        assert!(!links.is_open(&b, 8));
    }

    #[test]
    fn requests_in_flight_are_bounded_per_session_and_together() {
        let links = SseLinks::new(4, 3);
        let (a, b) = (id(1), id(2));
        let _ra = links.insert(0, a, 7);
        let _rb = links.insert(1, b, 7);
        let per = crate::limits::SSE_CALLS_PER_SESSION;
        let mine: Vec<CallPlaces> = (0..3)
            .map(|_| links.places(&a, 7, &Shares::default()).unwrap())
            .collect();
        assert_eq!(
            links.places(&b, 7, &Shares::default()).err(),
            Some(NotHanded::Full(3))
        );
        drop(mine);
        let links = SseLinks::new(1, per + 1);
        let _r = links.insert(0, a, 7);
        let held: Vec<CallPlaces> = (0..per)
            .map(|_| links.places(&a, 7, &Shares::default()).unwrap())
            .collect();
        assert_eq!(
            links.places(&a, 7, &Shares::default()).err(),
            Some(NotHanded::SessionBusy(per))
        );
        assert_eq!(held.len(), per);
    }

    #[test]
    fn the_transports_requests_in_flight_are_shared_among_clients() {
        let (a, b) = (id(1), id(2));
        let shares = Shares::new([(7, 1), (8, 1)]);
        let links = SseLinks::new(2, 4);
        let _ra = links.insert(0, a, 7);
        let _rb = links.insert(1, b, 8);
        // a takes what it may: then the place left is kept for b.
        let mut mine = Vec::new();
        let refused = loop {
            match links.places(&a, 7, &shares) {
                Ok(p) => mine.push(p),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(refused, NotHanded::Share { capacity: 4, .. }),
            "{refused:?}"
        );
        assert_eq!(refused.limit(), Some("sse_call_share"));
        assert!(mine.len() < 4);
        let theirs = links.places(&b, 8, &shares).expect("the place kept for b");
        drop((mine, theirs));
        assert!(links.places(&a, 7, &shares).is_ok(), "places given back");
    }

    #[test]
    fn a_stream_that_is_not_read_takes_no_more_than_its_queue() {
        let links = SseLinks::new(1, 64);
        let a = id(1);
        let _unread = links.insert(0, a, 7);
        let room = 2 * crate::limits::SSE_CALLS_PER_SESSION;
        for _ in 0..room {
            assert_eq!(
                links.hand(&a, futures_util::stream::empty().boxed()),
                Ok(())
            );
        }
        let full = links.hand(&a, futures_util::stream::empty().boxed());
        assert_eq!(full, Err(NotHanded::Backlog));
        assert_eq!(NotHanded::Backlog.limit(), Some("sse_session_calls"));
    }
}
