//! The legacy sessions of the downstream face as one service: the fixed
//! [`Table`], its lock, the [`Notify`] its GET streams wait on and the
//! `mcp_edge_sessions_active` gauge, owned here and nowhere else
//! (`../shared/spec/2025-11-25/basic/transports.mdx` §Session Management).
//!
//! A session ends in five ways (DELETE, revocation at a reload, the idle
//! sweep, eviction by a new `initialize`, shutdown), and an expired one is
//! also ended when a request finds it. Every one of them leaves the table
//! through its single `release`, which records the ending; each call here
//! takes those records and finishes every ending the same way
//! ([`Sessions::finish`]): the gauge, the GET streams woken (they see the
//! session gone and end), the upstreams told to forget the session's
//! relayed requests, its resource subscriptions dropped.
//!
//! A legacy request held in its session is also registered for its
//! client's `notifications/cancelled` (2025-11-25
//! basic/utilities/cancellation.mdx) under (session, request id): the
//! request it names, if still being answered, is dropped, which tells the
//! upstream in turn (stdio: `notifications/cancelled` with the upstream's
//! own id; legacy HTTP: the same through the owner task; modern: the
//! stream closes), and answered with `-32800`. A modern client cancels by
//! closing its response stream (2026-07-28 patterns-cancellation.mdx),
//! which drops the call the same way. The registry holds one entry per
//! request being answered, removed with its hold.

use crate::protocol::{ClientCaps, ProtocolVersion};
use crate::router::Router;
use crate::session::{Removal, Session, SessionError, SessionId, Table};
use crate::share::Shares;
use crate::subscriptions::{Subscriber, Subscriptions};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// A legacy request being answered: its session and its id as JSON text.
type Running = (SessionId, String);

/// The session service (see the module docs).
pub struct Sessions {
    table: Mutex<Table>,
    /// Woken (all waiters) whenever sessions end.
    changed: Notify,
    router: Arc<Router>,
    subscriptions: Arc<Subscriptions>,
    /// Legacy requests being answered, by (session, request id as JSON
    /// text): the token of the hold that registered it and its trigger.
    running: Mutex<HashMap<Running, (u64, oneshot::Sender<()>)>>,
    next_token: AtomicU64,
}

impl Sessions {
    /// The service over `table`: endings are finished with `router`'s
    /// upstreams and `subscriptions`.
    pub fn new(table: Table, router: Arc<Router>, subscriptions: Arc<Subscriptions>) -> Self {
        Sessions {
            table: Mutex::new(table),
            changed: Notify::new(),
            router,
            subscriptions,
            running: Mutex::default(),
            next_token: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the table under its lock, then finishes whatever
    /// sessions it ended (outside the lock). Generic only in `f`: the rest
    /// is one copy ([`Sessions::settle`]), not one per call site.
    fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let mut t = self.table.lock().expect("sessions");
        let before = (t.len(), t.sse_len());
        let r = f(&mut t);
        self.settle(t, before);
        r
    }

    /// After a change of the table held by `t` (which held `before`
    /// sessions, of them so many of the HTTP+SSE transport): the gauge per
    /// transport, set under the lock (two calls cannot store their counts
    /// out of order) and only when a count moved (nothing registered per
    /// request); then, unlocked, the endings finished.
    #[inline(never)]
    fn settle(&self, mut t: std::sync::MutexGuard<'_, Table>, before: (usize, usize)) {
        // Collected only when something ended (rare): no allocation on the
        // request path.
        let ended: Vec<SessionId> = t.take_ended().map(|(id, _)| id).collect();
        if (t.len(), t.sse_len()) != before {
            let (all, sse) = (t.len(), t.sse_len());
            let gauge = |transport: &'static str, n: usize| {
                metrics::gauge!(crate::metrics::SESSIONS_ACTIVE, "transport" => transport)
                    .set(n as f64);
            };
            gauge("http", all - sse);
            gauge("sse", sse);
        }
        drop(t);
        if !ended.is_empty() {
            self.finish(&ended);
        }
    }

    /// The steps of every ending, whatever ended it.
    fn finish(&self, ended: &[SessionId]) {
        self.changed.notify_waiters();
        for id in ended {
            self.router.forget_session(&id.to_header());
            self.subscriptions
                .remove_subscriber(Subscriber::Session(*id));
        }
    }

    /// A new session for an `initialize` of `owner` (may end an idle one to
    /// make room: the least recently used, or under `shares` the furthest-
    /// over client's, [`crate::share`]).
    pub fn open(
        &self,
        version: ProtocolVersion,
        owner: u64,
        caps: ClientCaps,
        shares: &Shares,
    ) -> Result<SessionId, SessionError> {
        // What was ended to make room is finished like any ending.
        self.with(|t| t.insert(version, owner, caps, shares, Instant::now()))
            .map(|inserted| inserted.id)
    }

    /// A new session of the HTTP+SSE transport for a `GET /sse` of `owner`
    /// ([`Sessions::open`], marked [`Session::sse`]), with the newest
    /// legacy version until its `initialize` says which
    /// ([`Sessions::initialize_sse`]), and its stream counted on it. Its
    /// stream is its connection: it never expires idle while it is in the
    /// table, and ends with its stream (the stream's owner ends it).
    pub fn open_sse(
        self: &Arc<Self>,
        owner: u64,
        shares: &Shares,
    ) -> Result<StreamHeld, SessionError> {
        let version = ProtocolVersion::LATEST_LEGACY;
        let id = self.with(|t| {
            let id = t
                .insert(version, owner, ClientCaps::NONE, shares, Instant::now())?
                .id;
            t.set_sse(&id);
            t.open_stream(&id, Instant::now(), 1).map(|_| id)
        })?;
        Ok(StreamHeld {
            sessions: self.clone(),
            id,
        })
    }

    /// The `initialize` of `owner` in its HTTP+SSE session `id`
    /// ([`Table::initialize`]).
    pub fn initialize_sse(
        &self,
        id: &SessionId,
        owner: u64,
        agreed: (ProtocolVersion, ClientCaps),
    ) -> Result<(), SessionError> {
        self.with(|t| t.initialize(id, owner, agreed, Instant::now()))
    }

    /// A request of `owner` in session `id` begins: the session as it was
    /// found, held busy (not idle, not evictable) until the hold drops. A
    /// session of another owner is [`SessionError::NotFound`]. With its
    /// JSON-RPC `request` id, the hold also carries its cancellation
    /// ([`Held::cancelled`]; a second request reusing an id still in
    /// flight is not cancellable: the first keeps the entry).
    pub fn enter(
        self: &Arc<Self>,
        id: SessionId,
        owner: u64,
        request: Option<&Value>,
    ) -> Result<Held, SessionError> {
        let seen = self.with(|t| t.enter(&id, owner, Instant::now()))?;
        let mut held = Held {
            sessions: self.clone(),
            id,
            seen,
            registered: None,
            cancelled: None,
        };
        if let Some(request) = request {
            let key = (id, request.to_string());
            let (tx, rx) = oneshot::channel();
            let token = self.next_token.fetch_add(1, Relaxed);
            let mut running = self.running.lock().expect("cancels");
            if !running.contains_key(&key) {
                running.insert(key.clone(), (token, tx));
                held.registered = Some((key.1, token));
                held.cancelled = Some(rx);
            }
        }
        Ok(held)
    }

    /// The client of `sid` cancelled `request`: true if it was running.
    pub fn cancel(&self, sid: SessionId, request: &Value) -> bool {
        let key = (sid, request.to_string());
        let tx = self.running.lock().expect("cancels").remove(&key);
        tx.is_some_and(|(_, tx)| tx.send(()).is_ok())
    }

    /// Legacy requests registered for cancellation now.
    pub fn cancellable(&self) -> usize {
        self.running.lock().expect("cancels").len()
    }

    /// Opens a GET stream of `owner` on session `id` (at most `max` per
    /// session): a hold that gives the stream's place back when dropped.
    pub fn open_stream(
        self: &Arc<Self>,
        id: SessionId,
        owner: u64,
        max: u8,
    ) -> Result<StreamHeld, SessionError> {
        self.with(|t| {
            if t.owner(&id) != Some(owner) {
                return Err(SessionError::NotFound);
            }
            t.open_stream(&id, Instant::now(), max).map(|_| ())
        })?;
        Ok(StreamHeld {
            sessions: self.clone(),
            id,
        })
    }

    /// Whether session `id` is still in its table and not expired.
    pub fn is_live(&self, id: &SessionId) -> bool {
        self.with(|t| t.peek(id, Instant::now()).is_some())
    }

    /// The negotiated version of live session `id`.
    pub fn version(&self, id: &SessionId) -> Option<ProtocolVersion> {
        self.with(|t| t.peek(id, Instant::now()).map(|s| s.version))
    }

    /// The owner mark of session `id` while its slot holds it (expired but
    /// not yet swept counts: its calls may still run).
    pub fn owner(&self, id: &SessionId) -> Option<u64> {
        self.with(|t| t.owner(id))
    }

    /// Records `notifications/initialized`.
    pub fn mark_initialized(&self, id: &SessionId) {
        self.with(|t| t.mark_initialized(id));
    }

    /// Records the session's `logging/setLevel` rank.
    pub fn set_log_floor(&self, id: &SessionId, rank: u8) -> bool {
        self.with(|t| t.set_log_floor(id, rank))
    }

    /// Ends session `id` for `why`; false if it was unknown.
    pub fn end(&self, id: &SessionId, why: Removal) -> bool {
        self.with(|t| t.remove(id, why))
    }

    /// Ends every session whose owner `keep` refuses, for `why`
    /// (revocation at a reload; shutdown with `|_| false`).
    pub fn end_where(&self, keep: impl Fn(u64) -> bool, why: Removal) -> usize {
        self.with(|t| t.revoke(keep, why))
    }

    /// Tells every session open now to initialize again
    /// ([`Table::drain`]); how many ended at once.
    pub fn drain(&self) -> usize {
        self.with(Table::drain)
    }

    /// Ends every session idle past its timeout (the sweep); how many.
    pub fn sweep(&self) -> usize {
        self.with(|t| t.expire(Instant::now()))
    }

    /// A future that completes when sessions next end (GET streams wait on it).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Sessions held now, and the fixed capacity.
    pub fn count(&self) -> (usize, usize) {
        let t = self.table.lock().expect("sessions");
        (t.len(), t.capacity())
    }

    /// Bytes the table occupies (fixed at construction).
    pub fn footprint_bytes(&self) -> usize {
        self.table.lock().expect("sessions").footprint_bytes()
    }
}

/// A legacy request's hold on its session (issue 13 part 6,
/// [`Table::begin_request`]): made by [`Sessions::enter`], dropped when the
/// request's answer is done (for a relayed call, when its stream's last
/// message is written); its idle clock starts again then.
pub struct Held {
    sessions: Arc<Sessions>,
    id: SessionId,
    /// The session as the request found it (its version, declared
    /// capabilities and log floor).
    pub seen: Session,
    /// The request id's text and token under which it is registered for
    /// cancellation, if it is.
    registered: Option<(String, u64)>,
    /// Fires when the client cancels the request: taken by whoever runs
    /// the call (which then answers `-32800`).
    pub cancelled: Option<oneshot::Receiver<()>>,
}

impl Held {
    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.id
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((request, token)) = self.registered.take() {
            let mut running = self.sessions.running.lock().expect("cancels");
            let key = (self.id, request);
            // Only its own entry: a later request may reuse the id once
            // this one was cancelled.
            if running.get(&key).is_some_and(|(t, _)| *t == token) {
                running.remove(&key);
            }
        }
        (self.sessions).with(|t| t.end_request(&self.id, Instant::now()));
    }
}

/// An open GET stream's place in its session ([`Sessions::open_stream`]).
pub struct StreamHeld {
    sessions: Arc<Sessions>,
    id: SessionId,
}

impl StreamHeld {
    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The service (the stream watches its session end).
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }
}

impl Drop for StreamHeld {
    fn drop(&mut self) {
        (self.sessions).with(|t| t.close_stream(&self.id));
    }
}

#[cfg(test)]
mod tests {
    //! Issue 24 part 3: each way a session ends forgets its upstream state
    //! (requests relayed to it) and its subscriptions.
    use super::*;
    use crate::config::Config;
    use crate::upstream::{ListGens, Upstream};
    use std::time::Duration;
    use tokio::sync::watch;

    const V: ProtocolVersion = ProtocolVersion::V2025_11_25;

    fn service(capacity: usize) -> (Arc<Sessions>, Arc<Upstream>, Arc<Subscriptions>) {
        let subscriptions = Arc::new(Subscriptions::new(8));
        let config = Config::embedded_default().upstreams.remove(0);
        let (up, _owner) = Upstream::new(
            0,
            config,
            1,
            Arc::new(watch::channel(ListGens::default()).0),
            subscriptions.clone(),
            Arc::new(crate::pins::Pins::in_memory()),
            None,
        );
        let router = Router::new(
            vec![up.clone()],
            crate::config::ToolNameRule::Strict,
            "__".into(),
            crate::instance::InstanceId::DEFAULT,
        );
        let s = Duration::from_secs;
        let table = Table::new(capacity, s(60), s(10));
        let sessions = Sessions::new(table, Arc::new(router), subscriptions.clone());
        (Arc::new(sessions), up, subscriptions)
    }

    /// A session with a relayed request waiting for its answer and a
    /// subscription: what its ending must take away.
    fn holding(
        sessions: &Sessions,
        up: &Upstream,
        subs: &Subscriptions,
        owner: u64,
    ) -> (SessionId, crate::relay::Answer) {
        let id = sessions
            .open(V, owner, ClientCaps::NONE, &Shares::default())
            .unwrap();
        let ctx = up.relay_ctx();
        let (_, _, answer) = (ctx.pending)
            .insert_waiter(id.to_header(), Instant::now(), Duration::from_secs(600))
            .unwrap();
        assert_eq!(
            subs.subscribe(Subscriber::Session(id), 0, "file:///a"),
            Ok(true)
        );
        (id, answer)
    }

    /// The relayed request was dropped (its waiter sees the sender gone)
    /// and the session has no subscription left.
    fn forgotten(subs: &Subscriptions, id: SessionId, mut answer: crate::relay::Answer, how: &str) {
        assert!(
            matches!(
                answer.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Closed)
            ),
            "{how}: the relayed request is still waiting"
        );
        assert_eq!(
            subs.remove_subscriber(Subscriber::Session(id)),
            0,
            "{how}: a subscription is left"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_ending_forgets_upstream_state_and_subscriptions() {
        let (sessions, up, subs) = service(2);
        // DELETE.
        let (a, answer) = holding(&sessions, &up, &subs, 1);
        assert!(sessions.end(&a, Removal::Deleted));
        forgotten(&subs, a, answer, "DELETE");
        // Revocation at a reload.
        let (b, answer) = holding(&sessions, &up, &subs, 2);
        assert_eq!(sessions.end_where(|o| o != 2, Removal::Revoked), 1);
        forgotten(&subs, b, answer, "revocation");
        // The idle sweep.
        let (c, answer) = holding(&sessions, &up, &subs, 1);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(sessions.sweep(), 1);
        forgotten(&subs, c, answer, "idle sweep");
        // Eviction by `initialize` (full, the LRU one idle past the minimum).
        let (d, answer) = holding(&sessions, &up, &subs, 1);
        let _e = sessions
            .open(V, 1, ClientCaps::NONE, &Shares::default())
            .unwrap();
        tokio::time::advance(Duration::from_secs(11)).await;
        let _f = sessions
            .open(V, 1, ClientCaps::NONE, &Shares::default())
            .unwrap();
        assert!(!sessions.is_live(&d), "d was evicted");
        forgotten(&subs, d, answer, "eviction");
        // An expired session found by its own next request.
        let (g, answer) = holding(&sessions, &up, &subs, 1);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(matches!(
            sessions.enter(g, 1, None),
            Err(SessionError::NotFound)
        ));
        forgotten(&subs, g, answer, "expiry on lookup");
        // Shutdown.
        let (h, answer) = holding(&sessions, &up, &subs, 1);
        assert!(sessions.end_where(|_| false, Removal::Shutdown) >= 1);
        forgotten(&subs, h, answer, "shutdown");
        assert_eq!(sessions.count().0, 0);
    }

    /// A request's hold keeps its session from eviction; another owner's
    /// request does not find it.
    #[tokio::test(start_paused = true)]
    async fn a_held_session_is_never_evicted_and_owners_are_kept_apart() {
        let (sessions, _up, _subs) = service(1);
        let a = sessions
            .open(V, 1, ClientCaps::NONE, &Shares::default())
            .unwrap();
        assert!(matches!(
            sessions.enter(a, 2, None),
            Err(SessionError::NotFound)
        ));
        let held = sessions.enter(a, 1, None).unwrap();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(matches!(
            sessions.open(V, 1, ClientCaps::NONE, &Shares::default()),
            Err(SessionError::Full { .. })
        ));
        drop(held);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(sessions
            .open(V, 1, ClientCaps::NONE, &Shares::default())
            .is_ok());
        assert!(!sessions.is_live(&a));
    }
}
