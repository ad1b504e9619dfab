//! Relaying messages an upstream sends *during* a call back to the downstream
//! caller: request-scoped notifications (`notifications/progress`,
//! `notifications/message`) and, for legacy sessions, server→client requests
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`), whose
//! answers the client POSTs back (`../shared/spec/2025-11-25/transports.mdx`
//! §Sending Messages to the Server, items 5–6; §Multiple Connections).
//!
//! Attribution: progress notifications carry a token the gateway rewrote per
//! call, so they always reach the right caller. A stdio upstream's other
//! notifications and requests carry no request id; they are relayed only
//! when exactly one call with a relay is in flight on that upstream (otherwise
//! dropped, or refused for requests), so one client never sees another's
//! messages. HTTP upstreams send them on the call's own SSE stream.
//!
//! Below both faces (it uses only `protocol`, `metrics` and
//! `subscriptions`): the upstream transports fill it, the downstream face
//! drains it and parses the ids of relayed requests, and neither face
//! reaches into the other to do so.

use crate::protocol::{Payload, RpcError};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Where a call's relayed messages go: the downstream SSE response of that
/// call (bounded queue) and, for a legacy caller, its session id (needed to
/// accept the client's answers to relayed requests).
#[derive(Clone, Debug)]
pub struct Relay {
    /// Queue feeding the downstream SSE stream (`server.sse_queue_depth`).
    pub tx: mpsc::Sender<Relayed>,
    /// Who answers this call's server→client requests: the caller's legacy
    /// session (`Mcp-Session-Id`), or for a modern caller's `tools/call`,
    /// `prompts/get`, `resources/read` the key of its parked call
    /// (`mrtr:<n>`, `http::mrtr`: the requests become MRTR rounds);
    /// `None` when nobody can be asked (they are refused).
    pub session: Option<String>,
    /// The least severe `notifications/message` the caller wants, as a rank
    /// of [`LOG_LEVELS`]; `None` = none at all. Legacy callers take every
    /// one; a modern caller only those at or above the
    /// `io.modelcontextprotocol/logLevel` of its request, and none without
    /// it (2026-07-28 changelog.mdx: servers MUST NOT emit
    /// `notifications/message` for requests without that field).
    pub log_floor: Option<usize>,
    /// What a legacy caller declared at `initialize`: an upstream's request
    /// it has no capability for is not relayed (the upstream gets an
    /// error). `Some` exactly for a legacy session's call
    /// ([`Relay::is_legacy_caller`]); `None` for a modern caller's, whose
    /// requests are checked where they become an `InputRequiredResult`
    /// (and whose `session` is the parked-call key, not a session).
    pub caps: Option<crate::protocol::ClientCaps>,
    /// What the caller declared, either era (`None`: not known). A legacy
    /// HTTP upstream is called in a session of its own that declares the
    /// same ([`Lane`]), so a server that checks its client's capabilities
    /// sees this caller's.
    pub declared: Option<crate::protocol::ClientCaps>,
    /// Messages dropped so far, the queue full ([`Relay::forward`]): a
    /// stream resumed after some were dropped while nobody read it lost
    /// them.
    pub dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Which of a transport's upstream sessions a message belongs to. A legacy
/// HTTP upstream has a main session (mcp-edge's own: catalog, probes,
/// subscriptions, callers that declared what it declares) and one per other
/// set of client capabilities its callers declared
/// (`limits::UPSTREAM_CAPABILITY_SESSIONS`); every other transport has one.
/// An answer to the upstream's request, or a cancellation, goes to the
/// session the request came on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lane(pub u8);

impl Lane {
    /// The main session (the only one of a stdio or modern upstream).
    pub const MAIN: Lane = Lane(0);
    /// No session: a streamable-HTTP upstream's 2026-07-28 request (a
    /// modern upstream's, or a dual-era one's beside its legacy sessions);
    /// what it brings is answered in that era, without a session id.
    pub const STATELESS: Lane = Lane(u8::MAX);
}

/// `LoggingLevel` values, least severe first (RFC 5424 severities;
/// 2025-11-25 schema.json `LoggingLevel`).
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of `level` in [`LOG_LEVELS`].
pub fn log_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

impl Relay {
    /// A relay queueing at most `depth` messages (`server.sse_queue_depth`)
    /// and the receiver its SSE stream reads.
    pub fn new(session: Option<String>, depth: usize) -> (Relay, mpsc::Receiver<Relayed>) {
        let (tx, rx) = mpsc::channel(depth.max(1));
        (
            Relay {
                tx,
                session,
                log_floor: Some(0),
                caps: None,
                declared: None,
                dropped: Default::default(),
            },
            rx,
        )
    }

    /// Sets what the caller declared ([`Relay::caps`]).
    pub fn with_caps(mut self, caps: Option<crate::protocol::ClientCaps>) -> Self {
        self.caps = caps;
        self.declared = caps;
        self
    }

    /// Sets what a modern caller declared in its request's `_meta`
    /// ([`Relay::declared`]; its requests are checked elsewhere).
    pub fn with_declared(mut self, caps: crate::protocol::ClientCaps) -> Self {
        self.declared = Some(caps);
        self
    }

    /// Whether this relays a legacy session's call (not a modern caller's
    /// parked-call key): only then does mcp-edge itself play the MRTR
    /// client for a modern upstream, or ask it for log messages.
    pub fn is_legacy_caller(&self) -> bool {
        self.caps.is_some()
    }

    /// Whether the caller may be sent `method` (a capability it declared,
    /// or not checked here).
    fn allows(&self, method: &str, params: Option<&Value>) -> bool {
        let (Some(caps), Some(needed)) = (
            self.caps,
            crate::protocol::ClientCaps::needed(method, params),
        ) else {
            return true;
        };
        caps.lacking(needed).is_empty()
    }

    /// Sets the least severe log message forwarded ([`Relay::log_floor`]).
    pub fn with_log_floor(mut self, floor: Option<usize>) -> Self {
        self.log_floor = floor;
        self
    }

    /// Queues a message; a full queue drops it (counted as `relay_queue`).
    /// A `notifications/message` below the caller's log floor is dropped
    /// silently (true: nothing went wrong).
    pub fn forward(&self, msg: Value) -> bool {
        if msg.get("method").and_then(Value::as_str) == Some("notifications/message") {
            let rank = msg
                .get("params")
                .and_then(|p| p.get("level"))
                .and_then(Value::as_str)
                .and_then(log_rank)
                .unwrap_or(LOG_LEVELS.len() - 1);
            if self.log_floor.is_none_or(|floor| rank < floor) {
                return true;
            }
        }
        let ok = self.tx.try_send(Relayed::Message(msg)).is_ok();
        if !ok {
            crate::metrics::refused("relay_queue");
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        ok
    }

    /// Tells the caller's stream what became of the upstream's
    /// ([`Relayed::Resumable`], [`Relayed::Polled`]); a full queue drops
    /// it (the caller's stream is then streaming anyway).
    pub fn cue(&self, cue: Relayed) {
        let _ = self.tx.try_send(cue);
    }
}

/// What a call's relay carries to the caller's stream: the upstream's
/// messages, and what the upstream did with the call's own SSE stream
/// (2025-11-25 transports.mdx §Sending Messages to the Server, item 6),
/// so that a legacy caller's stream does the same.
#[derive(Debug)]
pub enum Relayed {
    /// A message of the upstream's for the caller.
    Message(Value),
    /// The upstream made the call's stream resumable (an event ID: its
    /// priming event): the caller's stream begins now, resumable in turn.
    Resumable,
    /// The upstream closed the call's stream to be polled (mcp-edge
    /// resumes it): the caller's stream is closed in turn, to be resumed
    /// by its client.
    Polled,
}

/// Who gets the client's answer to a relayed request.
#[derive(Debug)]
pub enum Target {
    /// The upstream that sent it, under this id, on this session (a legacy
    /// upstream's server→client request).
    Upstream(Value, Lane),
    /// A call of mcp-edge's own waiting for it (an input request of a
    /// modern upstream's `InputRequiredResult`, asked of a legacy caller by
    /// `upstream::mrtr`).
    Waiter(Waiter),
}

/// Completes a [`Target::Waiter`] with the client's answer.
pub type Waiter = tokio::sync::oneshot::Sender<Result<Value, crate::protocol::RpcError>>;

/// Receives the client's answer to a [`Target::Waiter`]; closed when the
/// entry is dropped unanswered (expired, or its session ended).
pub type Answer = tokio::sync::oneshot::Receiver<Result<Value, crate::protocol::RpcError>>;

struct Entry {
    target: Target,
    session: String,
    created: Instant,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// Fixed table of server→client requests awaiting the client's answer:
/// a legacy upstream's, or an input request of a modern upstream asked by
/// mcp-edge ([`Target`]). One capacity, expiry and refusal count for both.
pub struct Pending {
    slots: Mutex<Box<[Slot]>>,
}

/// Prefix of the ids mcp-edge gives relayed requests: `mcp-edge:<upstream>:<slot>:<generation>`.
const ID_PREFIX: &str = "mcp-edge:";

/// The downstream id of a relayed request (a string, never colliding with client ids' meaning).
pub fn downstream_id(upstream: usize, slot: usize, generation: u32) -> Value {
    Value::String(format!("{ID_PREFIX}{upstream}:{slot}:{generation}"))
}

/// Parses a downstream id minted by [`downstream_id`].
pub fn parse_downstream_id(id: &Value) -> Option<(usize, usize, u32)> {
    let mut it = id.as_str()?.strip_prefix(ID_PREFIX)?.split(':');
    let up = it.next()?.parse().ok()?;
    let slot = it.next()?.parse().ok()?;
    let generation = it.next()?.parse().ok()?;
    it.next().is_none().then_some((up, slot, generation))
}

impl Pending {
    /// A table with `capacity` slots, allocated now.
    pub fn new(capacity: usize) -> Self {
        let slots = (0..capacity.max(1))
            .map(|_| Slot {
                generation: 0,
                entry: None,
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Pending {
            slots: Mutex::new(slots),
        }
    }

    /// Records a request the upstream sent with id `upstream_id`, to be answered
    /// by `session`. Entries older than `max_age` are reclaimed first. Returns
    /// `(slot, generation)`, or `None` when the table is full.
    pub fn insert(
        &self,
        upstream_id: Value,
        lane: Lane,
        session: String,
        now: Instant,
        max_age: Duration,
    ) -> Option<(usize, u32)> {
        self.insert_target(Target::Upstream(upstream_id, lane), session, now, max_age)
    }

    /// [`Pending::insert`] of a request mcp-edge itself asks `session`:
    /// the answer goes to the returned [`Answer`].
    pub fn insert_waiter(
        &self,
        session: String,
        now: Instant,
        max_age: Duration,
    ) -> Option<(usize, u32, Answer)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (slot, generation) = self.insert_target(Target::Waiter(tx), session, now, max_age)?;
        Some((slot, generation, rx))
    }

    fn insert_target(
        &self,
        target: Target,
        session: String,
        now: Instant,
        max_age: Duration,
    ) -> Option<(usize, u32)> {
        let mut g = self.slots.lock().expect("pending lock");
        for s in g.iter_mut() {
            if s.entry
                .as_ref()
                .is_some_and(|e| now.saturating_duration_since(e.created) >= max_age)
            {
                s.entry = None;
                s.generation = s.generation.wrapping_add(1);
            }
        }
        let (i, s) = g.iter_mut().enumerate().find(|(_, s)| s.entry.is_none())?;
        s.entry = Some(Entry {
            target,
            session,
            created: now,
        });
        Some((i, s.generation))
    }

    /// Drops every request awaiting `session`'s answer (the session ended);
    /// returns how many.
    pub fn forget_session(&self, session: &str) -> usize {
        let mut g = self.slots.lock().expect("pending lock");
        let mut n = 0;
        for s in g.iter_mut() {
            if s.entry.as_ref().is_some_and(|e| e.session == session) {
                s.entry = None;
                s.generation = s.generation.wrapping_add(1);
                n += 1;
            }
        }
        n
    }

    /// Takes the entry for an answer from `session`; `None` if unknown, already
    /// answered, reclaimed, or owned by another session.
    pub fn take(&self, slot: usize, generation: u32, session: &str) -> Option<Target> {
        let mut g = self.slots.lock().expect("pending lock");
        let s = g.get_mut(slot)?;
        if s.generation != generation || s.entry.as_ref()?.session != session {
            return None;
        }
        s.generation = s.generation.wrapping_add(1);
        s.entry.take().map(|e| e.target)
    }

    /// Frees an entry whose answer is no longer wanted (its call ended);
    /// a later answer finds nothing.
    pub fn release(&self, slot: usize, generation: u32) {
        let mut g = self.slots.lock().expect("pending lock");
        if let Some(s) = g.get_mut(slot).filter(|s| s.generation == generation) {
            s.entry = None;
            s.generation = s.generation.wrapping_add(1);
        }
    }
}

/// What a transport needs to relay one upstream's server→client requests.
#[derive(Clone)]
pub struct RelayCtx {
    /// The upstream's id (`upstream::Upstream::id`, part of relayed ids).
    pub id: usize,
    /// Its pending server→client requests.
    pub pending: std::sync::Arc<Pending>,
    /// How long a relayed request may wait for the client (the call timeout).
    pub max_age: Duration,
    /// Where `notifications/resources/updated` goes: the subscription table,
    /// never a caller's stream.
    pub subscriptions: std::sync::Arc<crate::subscriptions::Subscriptions>,
}

impl RelayCtx {
    /// The upstream said `params.uri` changed: marks the subscriptions to it.
    pub fn resource_updated(&self, params: Option<&serde_json::Value>) {
        if let Some(uri) = params.and_then(|p| p.get("uri")).and_then(|u| u.as_str()) {
            self.subscriptions.updated(self.id, uri);
        }
    }
}

/// Relays a server→client request to the caller behind `relay` (a legacy
/// session, or a modern caller's parked call); `Some(())` when it was queued.
pub(crate) fn relay_request(
    ctx: &RelayCtx,
    relay: Option<Relay>,
    (id, lane): (&Value, Lane),
    method: &str,
    params: Option<Value>,
) -> Option<()> {
    let relay = relay?;
    let session = relay.session.clone()?;
    if !relay.allows(method, params.as_ref()) {
        crate::metrics::refused("client_capability");
        return None;
    }
    let (slot, generation) = ctx
        .pending
        .insert(
            id.clone(),
            lane,
            session,
            tokio::time::Instant::now(),
            ctx.max_age,
        )
        .or_else(|| {
            crate::metrics::refused("pending_server_requests");
            None
        })?;
    let msg = crate::protocol::request(downstream_id(ctx.id, slot, generation), method, params);
    relay.forward(msg).then_some(())
}

/// The call of a round: one upstream call, boxed so it can be parked.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Payload, RpcError>> + Send>>;

/// A running upstream call of a modern caller and what its upstream relays.
pub struct Running {
    /// The call.
    pub call: CallFuture,
    /// Its relayed messages (notifications, server→client requests).
    pub rx: mpsc::Receiver<Relayed>,
    /// Its outcome, once known, while queued messages are still handed out.
    pub done: Option<Result<Payload, RpcError>>,
    /// The key its upstream's requests wait under in the upstream's table of
    /// relayed requests ([`crate::relay::Pending`]); `None` when
    /// this call cannot be asked anything (not an MRTR method).
    pub key: Option<String>,
    /// When the call began: however often it is parked again, it stays
    /// parked no later than this plus the table's TTL, so a caller that
    /// keeps retrying without answers cannot hold its place for ever.
    pub started: Instant,
    /// Its audit record if it expires parked (`[audit]` only).
    pub audit: Option<Box<crate::audit::Expiry>>,
}

/// What [`Running::next`] saw.
pub enum Event {
    /// A notification to relay (when the caller takes a stream).
    Note(Value),
    /// A server→client request: `id`, `method`, `params`.
    Asks(Value),
    /// The call ended.
    Done(Result<Payload, RpcError>),
}

impl Running {
    /// The next thing the call produced. Cancel-safe: the call and the queue
    /// stay in `self` whatever happens to this future.
    pub async fn next(&mut self) -> Event {
        loop {
            if let Some(done) = self.done.take() {
                match self.rx.try_recv() {
                    Ok(Relayed::Message(m)) => {
                        self.done = Some(done);
                        return classify(m);
                    }
                    // A modern caller's stream is not resumable.
                    Ok(_) => self.done = Some(done),
                    Err(_) => return Event::Done(done),
                }
                continue;
            }
            tokio::select! {
                biased;
                m = self.rx.recv() => match m {
                    Some(Relayed::Message(m)) => return classify(m),
                    Some(_) => {}
                    None => self.done = Some((&mut self.call).await),
                },
                out = &mut self.call => self.done = Some(out),
            }
        }
    }
}

fn classify(m: Value) -> Event {
    if m.get("method").is_some() && m.get("id").is_some() {
        Event::Asks(m)
    } else {
        Event::Note(m)
    }
}

#[cfg(test)]
mod relay_tests;
