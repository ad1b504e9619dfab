//! The SSE stream of a relayed call: the messages its upstream relays
//! during the call, then its response, then the end; a keep-alive comment
//! while nothing else goes (`../shared/spec/2025-11-25/transports.mdx`
//! §Sending Messages to the Server, item 6).
//!
//! A legacy session's stream is resumable ([`super::resume`],
//! §Resumability and Redelivery): every event has an ID and is kept for
//! replay, and a 2025-11-25 session's stream begins with a priming event
//! (an ID, `retry`, empty data). When the client goes before the response,
//! the stream is parked with its call still in flight (disconnection is
//! not cancellation, item 6) until the client resumes it with a GET and
//! `Last-Event-ID` ([`resumed`]) or `limits::SSE_RESUME_WINDOW` passes (the
//! call is then dropped, which cancels it upstream). A modern caller's
//! stream has no IDs: dropping it is its cancellation (2026-07-28
//! patterns-cancellation.mdx).

use super::resume::{self, Event, EventId, Key, LetGo, Parked, Replay, Unresumable};
use crate::protocol::{self, sse, Outgoing, RpcError};
use crate::relay::Relayed;
use crate::session::SessionId;
use bytes::Bytes;
use hyper::body::Frame;
use serde_json::Value;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

/// A call being answered, boxed (its state is not part of every
/// connection's future).
pub type CallFuture = Pin<Box<dyn Future<Output = Outgoing> + Send>>;

/// Where resumable streams wait for their clients.
pub type Home = Arc<Parked<Waiting>>;

/// A stream waiting for its client: a call's, or a session's GET stream.
pub enum Waiting {
    Call(Box<Core>),
    Get(Box<GetState>),
}

/// What a legacy session's GET stream keeps while its client is away
/// (its messages are notifications: nothing runs for it meanwhile).
pub struct GetState {
    /// Its number.
    pub stream: u64,
    /// Its events as written.
    pub replay: Replay,
    /// The list generations its client was last told of.
    pub seen: crate::router::ListGens,
    /// Until when it waits, parked.
    pub expires: Instant,
}

/// What makes a legacy session's call stream resumable.
pub struct Resumable {
    pub session: SessionId,
    /// The call's JSON-RPC id (answered with an error if its events are lost).
    pub request: Value,
    pub home: Home,
    /// Begin with a priming event (a 2025-11-25 session: earlier clients
    /// may not read an event without data).
    pub priming: bool,
    /// The relay's count of messages dropped, its queue full
    /// ([`crate::relay::Relay::dropped`]).
    pub dropped: Arc<AtomicU64>,
}

enum State {
    /// The call runs; its relayed messages come on the receiver (`None`
    /// once it closed: nothing more to relay).
    Running(CallFuture, Option<mpsc::Receiver<Relayed>>),
    /// The call answered; messages still queued go before its response.
    Draining(Outgoing, mpsc::Receiver<Relayed>),
    /// The response is queued (or written).
    Answered,
}

struct Ids {
    stream: u64,
    /// A 2025-11-25 session's (primed): closed to be polled when the
    /// upstream closes the call's own stream so.
    polled: bool,
    /// Asked by a resumption on another connection.
    let_go: Arc<LetGo>,
    replay: Replay,
    session: SessionId,
    request: Value,
    home: Home,
    /// The relay's dropped messages, and their count when it was parked.
    dropped: (Arc<AtomicU64>, u64),
    /// Until when it waits, parked.
    expires: Instant,
}

/// A call stream's state, owned by its response body while a client reads
/// it and by the [`Parked`] table while it waits for one.
pub struct Core {
    state: State,
    keepalive: Interval,
    /// Pieces to write before anything else: the priming event, events
    /// being written, events replayed.
    queued: VecDeque<Bytes>,
    ids: Option<Ids>,
    /// The response ends once `queued` is written (the stream goes on,
    /// parked, for its client to resume it).
    closing: bool,
}

impl Core {
    /// The stream of `call` while it runs, relaying `rx`.
    pub fn running(
        call: CallFuture,
        rx: mpsc::Receiver<Relayed>,
        keepalive: Duration,
        resumable: Option<Resumable>,
    ) -> Core {
        Core::new(State::Running(call, Some(rx)), keepalive, resumable)
    }

    /// The stream of a call that answered `response` with messages still
    /// to relay on `rx`.
    pub fn answered(
        response: Outgoing,
        rx: mpsc::Receiver<Relayed>,
        keepalive: Duration,
        resumable: Option<Resumable>,
    ) -> Core {
        Core::new(State::Draining(response, rx), keepalive, resumable)
    }

    fn new(state: State, keepalive: Duration, resumable: Option<Resumable>) -> Core {
        let mut keepalive = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut queued = VecDeque::new();
        let ids = resumable.map(|r| {
            let stream = r.home.stream();
            if r.priming {
                queued.push_back(resume::priming(stream));
            }
            Ids {
                stream,
                polled: r.priming,
                let_go: r.home.attach(r.session, stream),
                replay: Replay::new(u64::from(r.priming)),
                session: r.session,
                request: r.request,
                home: r.home,
                dropped: (r.dropped, 0),
                expires: Instant::now(),
            }
        });
        Core {
            state,
            keepalive,
            queued,
            ids,
            closing: false,
        }
    }

    /// Takes what the relay carried: a message is queued; the upstream
    /// closing the call's stream to be polled closes this one too, when
    /// its client polls (a 2025-11-25 session's); the upstream's stream
    /// made resumable changes nothing (this one already is, or cannot be).
    pub fn relayed(&mut self, r: Relayed) {
        match r {
            Relayed::Message(v) => self.message(&v),
            Relayed::Polled if self.ids.as_ref().is_some_and(|ids| ids.polled) => {
                // `retry` before the close (item 6), as in the priming event.
                self.queued.push_back(resume::retry());
                self.closing = true;
            }
            Relayed::Polled => {}
            Relayed::Resumable => {}
        }
    }

    /// Queues one relayed message as an event.
    pub fn message(&mut self, v: &Value) {
        let json = v.to_string();
        let line = self.next_id().map(EventId::line).unwrap_or_default();
        self.event(Event::Message(sse::event_after(&line, &json)));
    }

    /// Queues the response as the last event.
    fn respond(&mut self, response: Outgoing) {
        let line = self.next_id().map(EventId::line).unwrap_or_default();
        let [a, b, c] = response.chunks(true);
        self.event(Event::Response(Box::new([Bytes::from(line), a, b, c])));
        self.state = State::Answered;
        self.closing = false; // the response goes out first
    }

    /// The ID the next event takes, when resumable.
    fn next_id(&self) -> Option<EventId> {
        let ids = self.ids.as_ref()?;
        let n = ids.replay.next();
        Some(EventId {
            stream: ids.stream,
            n,
        })
    }

    /// Queues an event, kept for replay when resumable.
    fn event(&mut self, event: Event) {
        let pieces = event.pieces().iter().filter(|b| !b.is_empty()).cloned();
        self.queued.extend(pieces);
        if let Some(ids) = &mut self.ids {
            ids.replay.push(event);
        }
    }

    /// The next piece to write; `None` once the response is written.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.ids.as_ref().is_some_and(|ids| ids.let_go.asked(cx)) {
            // Resumed on another connection: this response ends, the
            // stream is parked (its drop) and taken from there.
            return Poll::Ready(None);
        }
        loop {
            if let Some(b) = self.queued.pop_front() {
                return Poll::Ready(Some(b));
            }
            if self.closing {
                // Closed to be polled: the drop parks it.
                return Poll::Ready(None);
            }
            match std::mem::replace(&mut self.state, State::Answered) {
                State::Running(mut call, mut rx) => {
                    if let Some(r) = rx.as_mut() {
                        match r.poll_recv(cx) {
                            // Taken: look again (a cue queues nothing, and
                            // the receiver's waker is registered only by a
                            // poll that finds it empty).
                            Poll::Ready(Some(r)) => {
                                self.relayed(r);
                                self.state = State::Running(call, rx);
                                continue;
                            }
                            Poll::Ready(None) => rx = None,
                            Poll::Pending => {}
                        }
                    }
                    match (call.as_mut().poll(cx), rx) {
                        (Poll::Ready(fin), Some(rx)) => self.state = State::Draining(fin, rx),
                        (Poll::Ready(fin), None) => self.respond(fin),
                        (Poll::Pending, rx) => {
                            self.state = State::Running(call, rx);
                            if self.keepalive.poll_tick(cx).is_pending() {
                                return Poll::Pending;
                            }
                            return Poll::Ready(Some(sse::keepalive()));
                        }
                    }
                }
                State::Draining(fin, mut rx) => match rx.try_recv() {
                    Ok(r) => {
                        self.relayed(r);
                        self.state = State::Draining(fin, rx);
                    }
                    Err(_) => self.respond(fin),
                },
                State::Answered => return Poll::Ready(None),
            }
        }
    }

    /// Whether everything was written.
    fn finished(&self) -> bool {
        matches!(self.state, State::Answered) && self.queued.is_empty()
    }

    /// The client went before the end: a resumable stream waits for it in
    /// its home (parked, then no longer attached: a resumption always
    /// finds it one way or the other); any other is dropped (its call with
    /// it). A stream its client cannot name (no event ID sent yet: not
    /// primed) is not parked.
    fn park(mut self: Box<Self>) {
        let finished = self.finished();
        let Some(ids) = self.ids.as_mut() else { return };
        let (home, let_go) = (ids.home.clone(), ids.let_go.clone());
        if finished || (!ids.polled && ids.replay.next() == 0) {
            home.detach(&let_go);
            return;
        }
        ids.dropped.1 = ids.dropped.0.load(Relaxed);
        ids.expires = Instant::now() + crate::limits::SSE_RESUME_WINDOW;
        let expires = ids.expires;
        let key = Key {
            session: ids.session,
            stream: ids.stream,
            request: ids.request.to_string(),
        };
        self.queued.clear(); // a resumption writes from the replay buffer
                             // What had to go is dropped here, outside the table's lock.
        drop(home.park(key, Waiting::Call(self), expires));
        home.detach(&let_go);
    }
}

/// A call stream as a response body; a resumable one is parked when it
/// is dropped before its end.
pub struct CallStream(Option<Box<Core>>);

impl CallStream {
    pub fn new(core: Core) -> Self {
        CallStream(Some(Box::new(core)))
    }
}

impl hyper::body::Body for CallStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.as_mut() {
            None => Poll::Ready(None),
            Some(core) => core.poll_next(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }
}

impl Drop for CallStream {
    fn drop(&mut self) {
        if let Some(core) = self.0.take() {
            core.park();
        }
    }
}

/// What a `Last-Event-ID` of session `session` resumes.
pub enum Resumed {
    /// The call stream: the events after that ID, then the rest as it comes.
    Stream(CallStream),
    /// The GET stream, and its events after that ID (`None`: some were
    /// dropped from its replay buffer, counted as `sse_replay`).
    Get(Box<GetState>, Option<VecDeque<Bytes>>),
    /// Events after that ID were dropped (from the replay buffer, or from
    /// the relay's queue while nobody read it): the call's error response,
    /// as an event (its call is cancelled).
    Lost(Bytes),
    /// No stream of the session waits under that ID's stream number (it
    /// ended, or its client did not come back in time).
    Unknown,
    /// The stream has no such event: it stays parked as it was.
    NoSuchEvent,
}

/// Takes stream `id.stream` of `session` out of `home` (one still being
/// written lets go of it first, `limits::SSE_TAKEOVER_WAIT`), to go on
/// after event `id.n`; a stream that cannot is counted as `sse_replay`.
pub async fn resumed(home: &Home, session: &SessionId, id: EventId) -> Resumed {
    let until = Instant::now() + crate::limits::SSE_TAKEOVER_WAIT;
    let resumed = match home.take_or_let_go(session, id.stream, until).await {
        None => Resumed::Unknown,
        Some(Waiting::Call(core)) => resumed_call(home, session, id, core),
        Some(Waiting::Get(state)) => resumed_get(home, session, id, state),
    };
    let kind = match resumed {
        Resumed::Stream(_) => "call",
        Resumed::Get(..) => "get",
        _ => return resumed,
    };
    metrics::counter!(crate::metrics::SSE_RESUMED, "kind" => kind).increment(1);
    resumed
}

/// The events after `n`, as pieces to write.
fn replayed(replay: &Replay, n: u64) -> Result<VecDeque<Bytes>, Unresumable> {
    replay.after(n).map(|events| {
        let pieces = events.flat_map(|e| e.pieces().iter().filter(|b| !b.is_empty()).cloned());
        pieces.collect()
    })
}

fn resumed_get(home: &Home, session: &SessionId, id: EventId, state: Box<GetState>) -> Resumed {
    match replayed(&state.replay, id.n) {
        Ok(queued) => Resumed::Get(state, Some(queued)),
        Err(Unresumable::Dropped) => {
            crate::metrics::refused("sse_replay");
            Resumed::Get(state, None)
        }
        Err(Unresumable::NoSuchEvent) => {
            let key = Key {
                session: *session,
                stream: id.stream,
                request: String::new(),
            };
            let expires = state.expires;
            drop(home.park(key, Waiting::Get(state), expires));
            Resumed::NoSuchEvent
        }
    }
}

fn resumed_call(home: &Home, session: &SessionId, id: EventId, mut core: Box<Core>) -> Resumed {
    let ids = core
        .ids
        .as_ref()
        .expect("only resumable streams are parked");
    let lost_parked = ids.dropped.0.load(Relaxed) > ids.dropped.1;
    match replayed(&ids.replay, id.n) {
        Ok(queued) if !lost_parked => {
            core.queued = queued;
            core.closing = false;
            if let Some(ids) = core.ids.as_mut() {
                ids.let_go = home.attach(*session, id.stream);
            }
            Resumed::Stream(CallStream(Some(core)))
        }
        Err(Unresumable::NoSuchEvent) => {
            // Put back with the deadline it had: a client naming events
            // that do not exist cannot keep a call parked.
            let key = Key {
                session: *session,
                stream: id.stream,
                request: ids.request.to_string(),
            };
            let expires = ids.expires;
            drop(home.park(key, Waiting::Call(core), expires));
            Resumed::NoSuchEvent
        }
        Ok(_) | Err(Unresumable::Dropped) => Resumed::Lost(lost(id, &ids.request, lost_parked)),
    }
}

/// The error event of a call whose events after `id` were lost, counted.
fn lost(id: EventId, request: &Value, while_parked: bool) -> Bytes {
    crate::metrics::refused("sse_replay");
    let why = match while_parked {
        true => "messages of the call were dropped while its stream waited to be resumed \
                 (its queue, server.sse_queue_depth, was full)"
            .to_string(),
        false => format!(
            "events after it were dropped from its replay buffer ({} bytes)",
            crate::limits::SSE_REPLAY_BYTES
        ),
    };
    let message = format!(
        "the stream cannot be resumed after event {}-{}: {why}; the call was cancelled",
        id.stream, id.n
    );
    let e = RpcError::new(protocol::INTERNAL_ERROR, message);
    sse::event(&protocol::error_response(request.clone(), &e).to_string())
}

#[cfg(test)]
mod call_stream_tests;
