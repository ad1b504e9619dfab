//! What makes a legacy session's SSE streams resumable
//! (`../shared/spec/2025-11-25/transports.mdx` §Resumability and
//! Redelivery, §Sending Messages to the Server item 6): the event IDs, the
//! replay buffer of one stream, and the fixed table of streams waiting for
//! their client to come back with `Last-Event-ID`.
//!
//! An event ID is `<stream>-<n>`: the stream's number (one counter for the
//! whole gateway, so unique across every stream of a session, as the spec
//! asks) and the event's place in its stream, which is all a resumption
//! needs to find the stream and the events after it.
//!
//! The 2026-07-28 revision has no resumable streams
//! (`../shared/spec/2026-07-28/transports-streamable-http.mdx` §Earlier
//! Streamable HTTP Revisions: a `Last-Event-ID` is ignored), so the
//! streams of modern callers carry no IDs.

use crate::session::SessionId;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

/// An event's ID: its stream and its place in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventId {
    /// The stream's number.
    pub stream: u64,
    /// The event's place in the stream (0: a priming event).
    pub n: u64,
}

impl EventId {
    /// Parses what [`EventId::line`] wrote (a `Last-Event-ID` value);
    /// `None` for anything else (another server's ID).
    pub fn parse(s: &str) -> Option<EventId> {
        let (stream, n) = s.trim().split_once('-')?;
        let digits =
            |t: &str| !t.is_empty() && t.len() <= 20 && t.bytes().all(|c| c.is_ascii_digit());
        if !digits(stream) || !digits(n) {
            return None;
        }
        Some(EventId {
            stream: stream.parse().ok()?,
            n: n.parse().ok()?,
        })
    }

    /// The `id:` line that begins the event.
    pub fn line(self) -> String {
        format!("id: {}-{}\n", self.stream, self.n)
    }
}

/// The priming event of stream `stream` (2025-11-25 transports.mdx
/// §Sending Messages item 6): its ID `<stream>-0`, the `retry` its client
/// waits before resuming it, empty data.
pub fn priming(stream: u64) -> Bytes {
    let ms = crate::limits::SSE_RETRY_ADVERTISED_MS;
    Bytes::from(format!("id: {stream}-0\nretry: {ms}\ndata: \n\n"))
}

/// The `retry` a stream sends before it is closed to be polled (item 6).
pub fn retry() -> Bytes {
    Bytes::from(format!(
        "retry: {}\n\n",
        crate::limits::SSE_RETRY_ADVERTISED_MS
    ))
}

/// One event as written: a relayed message in one piece (its `id:` line
/// included), or a response as its `id:` line and the pieces of its body
/// (written without joining them).
#[derive(Clone, Debug)]
pub enum Event {
    /// A relayed message (a notification or a request), whole.
    Message(Bytes),
    /// The call's response: its `id:` line, then its body's pieces.
    Response(Box<[Bytes; 4]>),
}

impl Event {
    /// Its pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        match self {
            Event::Message(b) => std::slice::from_ref(b),
            Event::Response(p) => &p[..],
        }
    }

    /// What it holds, its place in the buffer counted.
    fn size(&self) -> usize {
        let bytes: usize = self.pieces().iter().map(Bytes::len).sum();
        bytes + std::mem::size_of::<(u64, Event)>()
    }
}

/// The events of one stream kept for replay, oldest first: at most
/// `limits::SSE_REPLAY_BYTES` (their bytes and places), the oldest dropped
/// past it, the newest always kept (a response larger than the bound is
/// still replayed).
pub struct Replay {
    events: VecDeque<(u64, Event)>,
    bytes: usize,
    /// The place of the next event.
    next: u64,
    /// The place of the oldest event not dropped.
    oldest: u64,
}

impl Replay {
    /// An empty buffer whose first event takes place `first`.
    pub fn new(first: u64) -> Self {
        Replay {
            events: VecDeque::new(),
            bytes: 0,
            next: first,
            oldest: first,
        }
    }

    /// The place the next event takes.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Keeps the event at place [`Replay::next`] (`pieces` are shared, not
    /// copied), dropping the oldest past the bound.
    pub fn push(&mut self, event: Event) {
        self.bytes += event.size();
        self.events.push_back((self.next, event));
        self.next += 1;
        while self.bytes > crate::limits::SSE_REPLAY_BYTES && self.events.len() > 1 {
            let (n, old) = self.events.pop_front().expect("more than one");
            self.bytes -= old.size();
            self.oldest = n + 1;
        }
    }

    /// The events after place `n`, in order; or why there are none to
    /// give: some of them were dropped, or `n` is no event of this stream
    /// yet.
    pub fn after(&self, n: u64) -> Result<impl Iterator<Item = &Event>, Unresumable> {
        match n.checked_add(1) {
            Some(m) if m > self.next => Err(Unresumable::NoSuchEvent),
            Some(m) if m < self.oldest => Err(Unresumable::Dropped),
            None => Err(Unresumable::NoSuchEvent),
            Some(_) => Ok(self
                .events
                .iter()
                .filter(move |(m, _)| *m > n)
                .map(|(_, e)| e)),
        }
    }
}

/// Why a stream cannot go on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresumable {
    /// Events after it were dropped from the replay buffer.
    Dropped,
    /// The stream has no such event (yet).
    NoSuchEvent,
}

/// Where a parked stream belongs: its session, its number, and the
/// request it answers (JSON text of its id; a `notifications/cancelled`
/// naming it ends it).
#[derive(Debug, Clone)]
pub struct Key {
    /// The session it belongs to.
    pub session: SessionId,
    /// Its stream number.
    pub stream: u64,
    /// The JSON text of the id of the request it answers.
    pub request: String,
}

/// Streams waiting for their client to resume them: a fixed table of
/// `limits::SSE_PARKED_STREAMS` places; the one expiring soonest makes
/// room. It takes `now` from its caller. What it gives back (made room
/// for, expired, of an ended session) its caller drops outside the lock.
///
/// It also knows the resumable streams still being written: a client
/// whose connection died without a word (a site uplink gone) comes back
/// on a new one while the old one still looks open here; its resumption
/// tells the old stream to let go ([`LetGo`]) and waits for it to park.
pub struct Parked<T> {
    places: Mutex<Box<[Option<Entry<T>>]>>,
    next_stream: AtomicU64,
    /// Set at shutdown: nothing is parked any more.
    closed: AtomicBool,
    /// The streams being written: one per legacy call answered as a
    /// stream now and per legacy GET stream, so bounded by the calls in
    /// flight and the stream pool.
    attached: Mutex<Vec<(SessionId, u64, Arc<LetGo>)>>,
    /// Woken whenever a stream is parked.
    arrived: Notify,
    /// Streams taken out by a resumption ([`Parked::take_or_let_go`]).
    resumed: AtomicU64,
}

/// Tells a stream being written to end its response (and so be parked)
/// because its client resumed it elsewhere.
#[derive(Default)]
pub struct LetGo {
    asked: AtomicBool,
    waker: AtomicWaker,
}

impl LetGo {
    /// Whether the stream was asked to let go; `cx` is woken when it is.
    pub fn asked(&self, cx: &std::task::Context<'_>) -> bool {
        self.waker.register(cx.waker());
        self.asked.load(Relaxed)
    }
}

struct Entry<T> {
    key: Key,
    expires: Instant,
    value: T,
}

impl<T> Parked<T> {
    /// A table of `capacity` places.
    pub fn new(capacity: usize) -> Self {
        Parked {
            places: Mutex::new((0..capacity).map(|_| None).collect()),
            next_stream: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            attached: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            resumed: AtomicU64::new(0),
        }
    }

    /// A new stream's number, never given before.
    pub fn stream(&self) -> u64 {
        self.next_stream.fetch_add(1, Relaxed)
    }

    /// Parks `value` under `key` until `expires`; gives back what had to
    /// go (counted as `sse_parked`): the session's own entry expiring
    /// soonest when it holds `limits::SSE_PARKED_PER_SESSION` already, else,
    /// every place taken, the soonest of the session holding the most (one
    /// client's disconnections cannot end everyone's calls); or `value`
    /// itself after shutdown.
    pub fn park(&self, key: Key, value: T, expires: Instant) -> Option<T> {
        let mut places = self.places.lock().expect("parked streams");
        // Checked under the lock: `close` empties the table under it.
        if self.closed.load(Relaxed) {
            return Some(value);
        }
        let session = key.session;
        let entry = Entry {
            key,
            expires,
            value,
        };
        let held = |s: &SessionId| {
            places
                .iter()
                .flatten()
                .filter(|e| e.key.session == *s)
                .count()
        };
        let crowded = if held(&session) >= crate::limits::SSE_PARKED_PER_SESSION {
            Some(session)
        } else if places.iter().all(Option::is_some) {
            places
                .iter()
                .flatten()
                .map(|e| e.key.session)
                .max_by_key(|s| held(s))
        } else {
            None
        };
        let place = match crowded {
            None => places.iter_mut().find(|p| p.is_none()),
            Some(s) => {
                crate::metrics::refused("sse_parked");
                let theirs = places
                    .iter_mut()
                    .filter(|p| p.as_ref().is_some_and(|e| e.key.session == s));
                theirs.min_by_key(|p| p.as_ref().map(|e| e.expires))
            }
        };
        let gone = place.expect("a place").replace(entry).map(|e| e.value);
        drop(places);
        self.arrived.notify_waiters();
        gone
    }

    /// Stream `stream` of `session` is being written: what tells it to let go.
    pub fn attach(&self, session: SessionId, stream: u64) -> Arc<LetGo> {
        let let_go = Arc::new(LetGo::default());
        let mut attached = self.attached.lock().expect("attached streams");
        attached.push((session, stream, let_go.clone()));
        let_go
    }

    /// The stream `let_go` was given to is no longer being written (a
    /// resumption may already have attached it again, with another).
    pub fn detach(&self, let_go: &Arc<LetGo>) {
        let mut attached = self.attached.lock().expect("attached streams");
        attached.retain(|(_, _, l)| !Arc::ptr_eq(l, let_go));
    }

    /// Stream `stream` of `session`, taken out; one still being written is
    /// told to let go first and waited for, until `deadline`.
    pub async fn take_or_let_go(
        &self,
        session: &SessionId,
        stream: u64,
        deadline: Instant,
    ) -> Option<T> {
        loop {
            let arrived = self.arrived.notified();
            if let Some(v) = self.take(session, stream) {
                self.resumed.fetch_add(1, Relaxed);
                return Some(v);
            }
            if !self.let_go(session, stream) {
                return None;
            }
            tokio::time::timeout_at(deadline, arrived).await.ok()?;
        }
    }

    /// Asks stream `stream` of `session`, if being written, to let go.
    fn let_go(&self, session: &SessionId, stream: u64) -> bool {
        let attached = self.attached.lock().expect("attached streams");
        let mut asked = false;
        for (_, _, l) in attached
            .iter()
            .filter(|(s, n, _)| s == session && *n == stream)
        {
            l.asked.store(true, Relaxed);
            l.waker.wake();
            asked = true;
        }
        asked
    }

    /// Streams taken out by a resumption so far.
    pub fn resumed(&self) -> u64 {
        self.resumed.load(Relaxed)
    }

    /// The stream `stream` of `session`, taken out.
    pub fn take(&self, session: &SessionId, stream: u64) -> Option<T> {
        let mut taken = self.take_where(|k| k.stream == stream && k.session == *session);
        taken.pop()
    }

    /// The stream of `session` answering `request` (JSON text of its id),
    /// taken out: its client cancelled it.
    pub fn cancelled(&self, session: &SessionId, request: &str) -> Option<T> {
        let mut taken = self.take_where(|k| k.session == *session && k.request == request);
        taken.pop()
    }

    /// Takes out the streams expired at `now` and those whose session is
    /// not `live`.
    pub fn sweep(&self, now: Instant, live: impl Fn(&SessionId) -> bool) -> Vec<T> {
        let mut places = self.places.lock().expect("parked streams");
        let gone = places.iter_mut().filter(|p| {
            p.as_ref()
                .is_some_and(|e| e.expires <= now || !live(&e.key.session))
        });
        gone.filter_map(|p| p.take().map(|e| e.value)).collect()
    }

    /// Takes out every stream of `session` (it ended).
    pub fn of_session(&self, session: &SessionId) -> Vec<T> {
        self.take_where(|k| k.session == *session)
    }

    /// Shutdown: takes out every stream and parks none from now on.
    pub fn close(&self) -> Vec<T> {
        let mut places = self.places.lock().expect("parked streams");
        self.closed.store(true, Relaxed);
        places
            .iter_mut()
            .filter_map(|p| p.take().map(|e| e.value))
            .collect()
    }

    /// Streams parked now.
    pub fn len(&self) -> usize {
        let places = self.places.lock().expect("parked streams");
        places.iter().filter(|p| p.is_some()).count()
    }

    /// Whether no stream is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take_where(&self, mut gone: impl FnMut(&Key) -> bool) -> Vec<T> {
        let mut places = self.places.lock().expect("parked streams");
        let taken = places
            .iter_mut()
            .filter(|p| p.as_ref().is_some_and(|e| gone(&e.key)));
        taken.filter_map(|p| p.take().map(|e| e.value)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: usize) -> Event {
        Event::Message(Bytes::from(vec![b'x'; n]))
    }

    #[test]
    fn ids_read_back_what_they_wrote_and_nothing_else() {
        let id = EventId { stream: 7, n: 12 };
        assert_eq!(id.line(), "id: 7-12\n");
        assert_eq!(EventId::parse("7-12"), Some(id));
        for other in [
            "",
            "7",
            "-1",
            "7-",
            "+7-1",
            "a-1",
            "7-1-2",
            "99999999999999999999999-1",
        ] {
            assert_eq!(EventId::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn replay_gives_the_events_after_an_id_until_some_were_dropped() {
        let mut r = Replay::new(1);
        let big = crate::limits::SSE_REPLAY_BYTES / 3 - 64;
        for _ in 0..3 {
            r.push(event(big));
        }
        assert_eq!(r.after(0).unwrap().count(), 3, "after the priming event");
        assert_eq!(r.after(2).unwrap().count(), 1);
        assert_eq!(r.after(3).unwrap().count(), 0, "nothing after the newest");
        assert_eq!(r.after(4).err(), Some(Unresumable::NoSuchEvent));
        assert_eq!(r.after(u64::MAX).err(), Some(Unresumable::NoSuchEvent));
        r.push(event(big)); // past the bound: event 1 dropped
        assert_eq!(
            r.after(0).err(),
            Some(Unresumable::Dropped),
            "event 1 is gone"
        );
        assert_eq!(r.after(1).unwrap().count(), 3);
        r.push(event(2 * crate::limits::SSE_REPLAY_BYTES)); // the newest is kept
        assert_eq!(r.after(4).unwrap().count(), 1);
        assert_eq!(r.after(3).err(), Some(Unresumable::Dropped));
    }

    #[test]
    fn a_full_table_gives_up_the_most_crowded_sessions_soonest_and_sweeps() {
        let t0 = Instant::now();
        let sec = std::time::Duration::from_secs(1);
        let id = |n: u32| SessionId::parse(&format!("edge.{n:036x}")).unwrap();
        let (a, b, c) = (id(1), id(2), id(3));
        let key = |session, stream| Key {
            session,
            stream,
            request: format!("{stream}"),
        };
        let parked = Parked::new(3);
        assert!(parked.park(key(a, 1), "a1", t0 + 3 * sec).is_none());
        assert!(parked.park(key(a, 2), "a2", t0 + 4 * sec).is_none());
        assert!(parked.park(key(b, 3), "b3", t0 + sec).is_none());
        // Full: c takes the place of a's soonest (a holds the most), not b's.
        assert_eq!(parked.park(key(c, 4), "c4", t0 + 5 * sec), Some("a1"));
        assert_eq!(parked.take(&b, 2), None, "another session's stream");
        assert_eq!(
            parked.cancelled(&a, "2"),
            Some("a2"),
            "its client cancelled it"
        );
        assert_eq!(parked.take(&b, 3), Some("b3"));
        assert!(parked.park(key(a, 5), "a5", t0 + 5 * sec).is_none());
        let mut swept = parked.sweep(t0 + 5 * sec, |s| *s != c); // a5 expired, c ended
        swept.sort();
        assert_eq!(swept, ["a5", "c4"]);
        assert!(parked.is_empty());
        // One session past its own bound gives up its own soonest.
        let per = crate::limits::SSE_PARKED_PER_SESSION as u64;
        let parked = Parked::new(2 * per as usize);
        for n in 0..per {
            assert!(parked
                .park(key(a, n), "a", t0 + sec * (n as u32 + 1))
                .is_none());
        }
        assert!(parked.park(key(b, 99), "b", t0).is_none());
        assert_eq!(parked.park(key(a, per), "a-last", t0 + 9 * sec), Some("a"));
        assert_eq!(parked.take(&b, 99), Some("b"), "the other session's stayed");
        assert_eq!(parked.len(), per as usize);
        assert_eq!(parked.close().len(), per as usize);
        assert_eq!(
            parked.park(key(a, 7), "late", t0 + sec),
            Some("late"),
            "closed"
        );
        assert!(parked.is_empty());
    }
}
