//! The GET stream of a legacy session
//! (`../shared/spec/2025-11-25/transports.mdx` §Listening for Messages from
//! the Server, §Resumability and Redelivery): keep-alive comments every
//! `server.keepalive`, `list_changed` and `resources/updated`
//! notifications, each event with an ID (`<stream>-<n>`,
//! [`super::resume`]) and kept for replay. It ends as soon as the session
//! is deleted, evicted or expires, its place goes to a client under its
//! share, or the gateway shuts down. When its client goes instead, what it
//! sent is parked ([`Waiting::Get`]; nothing runs for it meanwhile), and a
//! GET with `Last-Event-ID` goes on from there: the events after that ID,
//! then the lists changed since. The stream never touches the session's
//! idle clock.

use super::app::{App, Body};
use super::call_stream::{GetState, Waiting};
use super::resume::{Event, EventId, Key, LetGo, Replay};
use super::sessions::StreamHeld;
use super::streams::StreamPlace;
use crate::protocol::sse;
use crate::router::ListGens;
use crate::session::SessionId;
use crate::subscriptions::Subscriber;
use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::watch;
use tokio::time::{Instant, Interval};

/// How a GET stream begins.
pub enum Start {
    /// A new stream.
    Fresh,
    /// A parked one resumed, with its events after the client's last
    /// (`None`: some were dropped, so every list is announced changed).
    Resumed(Box<GetState>, Option<VecDeque<Bytes>>),
}

/// The GET stream of session `held`, holding `place` in the stream pool.
/// A 2025-11-25 session's (`priming`) new stream begins with a priming
/// event (an ID, `retry`, no data), so that even a stream that has sent
/// nothing yet can be resumed and miss no list change.
pub fn session_stream(
    app: Arc<App>,
    held: StreamHeld,
    place: StreamPlace,
    start: Start,
    priming: bool,
) -> Response<Body> {
    let stream = GetStream::new(app, (held, place), start, priming);
    let frames = futures_util::stream::unfold(stream, |mut s| async move {
        let b = s.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(b)), s))
    });
    let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
    super::reply::sse_headers(&mut r);
    r
}

pub(super) struct GetStream {
    app: Arc<App>,
    id: SessionId,
    keepalive: Interval,
    /// Its places in the session and in the pool, given back first when
    /// it ends (a resumption it wakes by parking may need them).
    held: Option<StreamHeld>,
    place: Option<StreamPlace>,
    lists: watch::Receiver<ListGens>,
    /// The list generations its client was last told of.
    seen: ListGens,
    stopping: watch::Receiver<bool>,
    stream: u64,
    replay: Replay,
    let_go: Arc<LetGo>,
    /// Events to write before anything else.
    queued: VecDeque<Bytes>,
    /// Ended by mcp-edge (not by its client): not parked.
    ended: bool,
    /// Events get IDs and are kept for replay (not on the HTTP+SSE
    /// transport: [`GetStream::plain`]).
    resumable: bool,
}

impl GetStream {
    fn new(
        app: Arc<App>,
        places: (StreamHeld, StreamPlace),
        start: Start,
        priming: bool,
    ) -> GetStream {
        let (held, place) = places;
        let period = app.server.keepalive;
        let mut keepalive = tokio::time::interval_at(Instant::now() + period, period);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lists = app.catalog_gen.subscribe();
        let now = *lists.borrow_and_update();
        let id = held.id();
        let (stream, replay, seen, queued) = match start {
            Start::Fresh => (
                app.resumes.stream(),
                Replay::new(u64::from(priming)),
                now,
                None,
            ),
            Start::Resumed(state, queued) => (state.stream, state.replay, state.seen, Some(queued)),
        };
        let mut s = GetStream {
            let_go: app.resumes.attach(id, stream),
            stopping: app.stopping.subscribe(),
            app,
            id,
            keepalive,
            held: Some(held),
            place: Some(place),
            lists,
            seen: now,
            stream,
            replay,
            queued: VecDeque::new(),
            ended: false,
            resumable: true,
        };
        match queued {
            None if priming => s.queued.push_back(super::resume::priming(s.stream)),
            None => {}
            Some(Some(replayed)) => {
                s.queued = replayed;
                s.events(super::reply::list_changed_messages(
                    now.changed_since(&seen),
                    [true; 3],
                    None,
                ));
            }
            Some(None) => s.events(super::reply::list_changed_messages(
                [true; 3], [true; 3], None,
            )),
        }
        s
    }

    /// The notifications of an HTTP+SSE session (`held`), in `place`: the
    /// events of a GET stream without IDs, nothing kept for replay, never
    /// parked (that transport cannot resume a stream).
    pub(super) fn plain(app: Arc<App>, held: StreamHeld, place: StreamPlace) -> GetStream {
        let mut s = GetStream::new(app, (held, place), Start::Fresh, false);
        s.resumable = false;
        s
    }

    /// The next piece to write; `None` when the stream ends.
    pub(super) async fn next(&mut self) -> Option<Bytes> {
        let who = Subscriber::Session(self.id);
        let subscriptions = self.app.subscriptions.clone();
        loop {
            if let Some(b) = self.queued.pop_front() {
                return Some(b);
            }
            // Registered before the check, so no update is missed between.
            let updated = subscriptions.changed.notified();
            let updates = super::reply::resource_update_messages(&self.app, who, None);
            if !updates.is_empty() {
                self.events(updates);
                continue;
            }
            let let_go = std::future::poll_fn(|cx| match self.let_go.asked(cx) {
                true => Poll::Ready(()),
                false => Poll::Pending,
            });
            let messages = tokio::select! {
                // The gateway is shutting down: the stream ends (the
                // client reconnects to whatever runs next).
                _ = self.stopping.wait_for(|s| *s) => {
                    self.ended = true;
                    return None;
                }
                // Its place went to a client under its share: the stream
                // ends cleanly (the session stays).
                _ = evicted(&self.place) => {
                    self.ended = true;
                    return None;
                }
                // Resumed on another connection: parked by its drop.
                () = let_go => return None,
                _ = self.keepalive.tick() => None,
                _ = updated => Some(super::reply::resource_update_messages(&self.app, who, None)),
                _ = self.app.sessions.changed() => Some(Vec::new()),
                Ok(()) = self.lists.changed() => {
                    let now = *self.lists.borrow_and_update();
                    let changed = now.changed_since(&self.seen);
                    self.seen = now;
                    Some(super::reply::list_changed_messages(changed, [true; 3], None))
                }
            };
            // Whatever woke it, a session that ended ends its stream.
            if !self.app.sessions.is_live(&self.id) {
                return self.end();
            }
            match messages {
                None => return Some(sse::keepalive()),
                Some(messages) => self.events(messages),
            }
        }
    }

    /// Queues `messages` as events, each with its ID and kept for replay.
    fn events(&mut self, messages: Vec<Value>) {
        if !self.resumable {
            let events = messages.iter().map(|m| sse::event(&m.to_string()));
            self.queued.extend(events);
            return;
        }
        for m in messages {
            let line = EventId {
                stream: self.stream,
                n: self.replay.next(),
            }
            .line();
            let event = sse::event_after(&line, &m.to_string());
            self.queued.push_back(event.clone());
            self.replay.push(Event::Message(event));
        }
    }

    fn end(&mut self) -> Option<Bytes> {
        self.ended = true;
        None
    }
}

/// Parks `state` again (a resumption refused a place), with its deadline.
pub fn park_again(home: &super::call_stream::Home, session: SessionId, state: Box<GetState>) {
    let key = Key {
        session,
        stream: state.stream,
        request: String::new(),
    };
    let expires = state.expires;
    drop(home.park(key, Waiting::Get(state), expires));
}

/// Resolves once `place` is given to a client under its share.
async fn evicted(place: &Option<StreamPlace>) {
    match place {
        Some(p) => p.evicted().await,
        None => std::future::pending().await,
    }
}

impl Drop for GetStream {
    /// Its client went (not mcp-edge's ending): parked, when it sent an
    /// event its client can name.
    fn drop(&mut self) {
        drop((self.place.take(), self.held.take()));
        let home = self.app.resumes.clone();
        if !self.ended && self.replay.next() > 0 {
            let expires = Instant::now() + crate::limits::SSE_RESUME_WINDOW;
            let state = GetState {
                stream: self.stream,
                replay: std::mem::replace(&mut self.replay, Replay::new(0)),
                seen: self.seen,
                expires,
            };
            let key = Key {
                session: self.id,
                stream: self.stream,
                request: String::new(),
            };
            drop(home.park(key, Waiting::Get(Box::new(state)), expires));
        }
        home.detach(&self.let_go);
    }
}
