//! The fixed table of open HTTP+SSE streams (the 2024-11-05 transport,
//! [`super::sse_transport`]): for each, the way its `POST /messages`
//! reach it. A POSTed request is handed to its stream as the events of its
//! answer ([`Answering`]), which the stream's body polls and writes: no
//! task per request, and the answer goes where the client reads it.
//!
//! Each entry belongs to a stream holding a place in the stream pool
//! ([`super::streams`]), so the table has as many places as the pool; a
//! stream's entry goes when its body is dropped.

use crate::session::SessionId;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// The events answering one POSTed request, in order, then its end.
pub type Answering = futures_util::stream::BoxStream<'static, Bytes>;

/// The table (see the module docs).
pub struct SseLinks {
    slots: Mutex<Box<[Option<Link>]>>,
    /// Requests in flight on every stream together: each stands for the
    /// connection a `/mcp` POST would hold while answered
    /// (`server.max_connections` places).
    calls: Arc<Semaphore>,
    call_capacity: usize,
}

struct Link {
    id: SessionId,
    owner: u64,
    tx: mpsc::Sender<Answering>,
    /// Its requests in flight ([`crate::limits::SSE_CALLS_PER_SESSION`]).
    calls: Arc<Semaphore>,
}

/// Why a request was not handed to its stream ([`SseLinks::hand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotHanded {
    /// No open stream of this client's has that session (HTTP 404).
    #[error("no open SSE stream of this client has that session")]
    NoStream,
    /// The session has [`crate::limits::SSE_CALLS_PER_SESSION`] requests
    /// in flight (429, `sse_session_calls`).
    #[error("this session already has {0} requests in flight; wait for an answer")]
    SessionBusy(usize),
    /// Every stream together has `server.max_connections` requests in
    /// flight (429, `sse_calls`).
    #[error("the HTTP+SSE transport already has {0} requests in flight; retry")]
    Full(usize),
}

impl NotHanded {
    /// Its `mcp_edge_refused_total` label (`None`: not a limit).
    pub fn limit(self) -> Option<&'static str> {
        match self {
            NotHanded::NoStream => None,
            NotHanded::SessionBusy(_) => Some("sse_session_calls"),
            NotHanded::Full(_) => Some("sse_calls"),
        }
    }
}

/// A request's places while it is answered: given back when its events
/// have all been written (or its stream went).
pub struct CallPlaces {
    _session: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl SseLinks {
    /// A table of `capacity` streams whose requests in flight are at most
    /// `calls` together.
    pub fn new(capacity: usize, calls: usize) -> Self {
        SseLinks {
            slots: Mutex::new((0..capacity).map(|_| None).collect()),
            calls: Arc::new(Semaphore::new(calls)),
            call_capacity: calls,
        }
    }

    /// Registers the stream of session `id` of `owner`: the receiver of
    /// what its POSTs hand it, or `None` when every entry is taken.
    pub fn insert(&self, id: SessionId, owner: u64) -> Option<mpsc::Receiver<Answering>> {
        let per_session = crate::limits::SSE_CALLS_PER_SESSION;
        // Never full: a sender holds a place for each request it sends.
        let (tx, rx) = mpsc::channel(per_session);
        let mut slots = self.slots.lock().expect("sse links");
        let free = slots.iter_mut().find(|s| s.is_none())?;
        *free = Some(Link {
            id,
            owner,
            tx,
            calls: Arc::new(Semaphore::new(per_session)),
        });
        Some(rx)
    }

    /// The stream of session `id` ended: its entry goes.
    pub fn remove(&self, id: &SessionId) {
        let mut slots = self.slots.lock().expect("sse links");
        if let Some(s) = slots
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|l| l.id == *id))
        {
            *s = None;
        }
    }

    /// Whether session `id` of `owner` has an open stream.
    pub fn is_open(&self, id: &SessionId, owner: u64) -> bool {
        let slots = self.slots.lock().expect("sse links");
        let mut links = slots.iter().flatten();
        links.any(|l| l.id == *id && l.owner == owner)
    }

    /// Whether a request of `owner` may be handed to the stream of
    /// session `id` now: its places (the session's, then the transport's),
    /// or why not. The scan is over at most the stream pool's places.
    pub fn places(&self, id: &SessionId, owner: u64) -> Result<CallPlaces, NotHanded> {
        let session = {
            let slots = self.slots.lock().expect("sse links");
            let link = slots
                .iter()
                .flatten()
                .find(|l| l.id == *id && l.owner == owner);
            link.ok_or(NotHanded::NoStream)?.calls.clone()
        };
        let mine = session
            .try_acquire_owned()
            .map_err(|_| NotHanded::SessionBusy(crate::limits::SSE_CALLS_PER_SESSION))?;
        let all = (self.calls.clone())
            .try_acquire_owned()
            .map_err(|_| NotHanded::Full(self.call_capacity))?;
        Ok(CallPlaces {
            _session: mine,
            _all: all,
        })
    }

    /// Hands `answering` (holding `places`) to the stream of session `id`.
    pub fn hand(&self, id: &SessionId, answering: Answering) -> Result<(), NotHanded> {
        let slots = self.slots.lock().expect("sse links");
        let link = slots.iter().flatten().find(|l| l.id == *id);
        let tx = link.ok_or(NotHanded::NoStream)?;
        tx.tx.try_send(answering).map_err(|_| NotHanded::NoStream)
    }
}
