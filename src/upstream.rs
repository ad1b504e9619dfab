//! Upstream MCP servers: one shared connection per configured upstream.
//!
//! Each upstream is a pair made together by [`Upstream::new`]: the
//! [`Upstream`] handle callers share (calls, status, catalog, telling the
//! owner things) and the [`Steward`], the owner's side, held by the
//! supervisor's owner task alone, which connects, installs the live
//! [`Conn`], publishes the status and catalog and replaces the connection
//! after a failure. Transports: [`stdio`] (child process, newline-delimited
//! JSON-RPC), [`streamable`] (streamable HTTP client) and [`builtin`] (the
//! in-process `edge` tools). [`handshake`] decides the era.

pub mod builtin;
mod call_error;
pub mod catalog;
mod channel;
mod clock;
mod conn;
mod credentials;
pub mod era;
pub mod handshake;
pub mod inflight;
mod input_bridge;
mod pinning;
pub mod ring;
pub mod scopes;
pub mod state;
pub mod stdio;
mod steward;
pub mod streamable;
mod subscribing;

use crate::config::UpstreamConfig;
use crate::protocol::{self, Payload};
use crate::relay;
use crate::share::{self, Claimant, Counts, Decision};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::Instant;

pub use call_error::{CallError, SendError};
pub use catalog::{Catalog, ListGens};
pub use conn::{Abandoned, Conn, Driver, OpenError, Opened};
pub use era::{CallEra, UpstreamEra};
pub use handshake::Negotiated;
pub use pinning::ApproveError;
pub use state::Status;
use steward::Loss;
pub use steward::Steward;

/// The shared face of one configured upstream (cheap to share behind `Arc`):
/// the handle callers hold. They read what its owner publishes (status on a
/// `watch`, the catalog, the live connection), send calls on that
/// connection, cancel one by dropping it, and tell the owner things (a
/// lost connection, a Retry-After, a reconnect, an early attempt). What the
/// owner writes is its [`Steward`]'s to write: the handle has no method
/// that does, but for the few writes a caller makes, each saying so.
pub struct Upstream {
    /// Identity in this process, part of relayed request ids: the config
    /// position at start; upstreams (re)started by a reload get fresh numbers,
    /// so a late answer meant for a replaced upstream never reaches its successor.
    pub id: usize,
    /// Its validated config.
    pub config: UpstreamConfig,
    /// What the owner task writes (status, connection, clocks, counters)
    /// and what callers tell it; written through the [`Steward`] only.
    owned: steward::OwnerState,
    /// What it lists now, and which of its tools are withheld; replaced
    /// whole, under its lock, by the owner ([`Steward::set_catalog`]) and
    /// by an approval ([`Upstream::approve`]).
    catalog: pinning::CatalogSlot,
    /// The tool pins (shared by all upstreams; [`crate::pins`]).
    pins: Arc<crate::pins::Pins>,
    /// One legacy HTTP re-initialization at a time.
    reinit: tokio::sync::Mutex<()>,
    /// Server→client requests relayed to downstream clients, awaiting answers.
    pending: Arc<relay::Pending>,
    /// Moved on, per kind, whenever any upstream's catalog changes (shared by all upstreams).
    catalog_gen: Arc<watch::Sender<ListGens>>,
    /// The downstream resource subscriptions (shared by all upstreams).
    subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// The resource URIs this connection was asked to report
    /// (`resources/subscribe` sent and answered); emptied on every connect.
    subscribed: std::sync::Mutex<std::collections::BTreeSet<Box<str>>>,
    /// One subscription change at a time (a client's subscribe, or the
    /// owner's reconcile).
    subs_lock: tokio::sync::Mutex<()>,
    /// Last 16 KiB of a stdio child's stderr.
    stderr_tail: Arc<std::sync::Mutex<ring::Ring>>,
    /// The OAuth client of an HTTP upstream with `[upstream.oauth]`: its
    /// tokens and renewal state outlive each connection.
    oauth: Option<Arc<crate::oauth::OAuth>>,
    /// Calls being answered right now (a reload drains them before a stop).
    calls: crate::drain::Drain,
    /// Its `max_in_flight` places as clients hold them ([`Callers`]).
    callers: Arc<Callers>,
    /// The sets of client capabilities its scoped catalog was listed for
    /// ([`scopes`]).
    scopes: scopes::Scopes,
    /// When it was created (gateway start, or the reload that started it):
    /// the clock of [`Upstream::first_attempt`] until the owner task starts.
    created: Instant,
}

impl Upstream {
    /// A not-yet-connected upstream and its owner's side, made together
    /// (the only way to get either): the handle to share, the [`Steward`]
    /// for its owner task. Its table of relayed server→client requests
    /// holds `max_pending` entries (`server.max_pending_server_requests`);
    /// its tools are reviewed against `pins`.
    pub fn new(
        id: usize,
        config: UpstreamConfig,
        max_pending: usize,
        catalog_gen: Arc<watch::Sender<ListGens>>,
        subscriptions: Arc<crate::subscriptions::Subscriptions>,
        pins: Arc<crate::pins::Pins>,
        oauth: Option<Arc<crate::oauth::OAuth>>,
    ) -> (Arc<Self>, Steward) {
        let initial = Status::initial(config.enabled);
        let now = Instant::now();
        let callers = Callers::new(config.max_in_flight);
        let up = Arc::new(Upstream {
            id,
            config,
            owned: steward::OwnerState::new(initial, now),
            catalog: pinning::CatalogSlot::default(),
            pins,
            reinit: tokio::sync::Mutex::new(()),
            pending: Arc::new(relay::Pending::new(max_pending)),
            catalog_gen,
            subscriptions,
            subscribed: std::sync::Mutex::new(Default::default()),
            subs_lock: tokio::sync::Mutex::new(()),
            stderr_tail: Arc::new(std::sync::Mutex::new(ring::Ring::new(
                crate::limits::STDERR_TAIL_BYTES,
            ))),
            calls: crate::drain::Drain::new(),
            callers,
            created: now,
            scopes: Default::default(),
            oauth,
        });
        let owner = Steward::of(&up);
        (up, owner)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.owned.status()
    }

    /// A receiver of status changes.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.owned.subscribe()
    }

    /// Calls being answered right now.
    pub fn active_calls(&self) -> usize {
        self.calls.active()
    }

    /// Resolves once no call is being answered (at once if none is). A
    /// reload awaits this, with a deadline, before stopping an upstream it
    /// replaces or removes: new calls already go elsewhere.
    pub async fn drained(&self) {
        self.calls.drained().await
    }

    /// Operator action: drop the connection (or end the wait) and connect
    /// again now, without counting a failure. A caller's write: it signals
    /// the owner, which alone reconnects.
    pub fn force_reconnect(&self) {
        self.owned.ask_reconnect();
    }

    /// Health probes sent so far: (answered, missed).
    pub fn probes(&self) -> (u64, u64) {
        self.owned.probes()
    }

    /// Health monitors running for this upstream (0 or 1).
    pub fn monitors(&self) -> usize {
        self.owned.monitors()
    }

    /// Connect attempts started since start-up.
    pub fn attempts(&self) -> u64 {
        self.owned.attempts()
    }

    /// What the handshake learnt, while connected.
    pub fn negotiated(&self) -> Option<Arc<Negotiated>> {
        self.owned.negotiated()
    }

    /// The last bytes (≤ 16 KiB) a stdio child wrote on stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .expect("stderr lock")
            .to_string_lossy()
    }

    /// The current catalog (empty while not connected).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.get()
    }

    /// Calls `method` on this upstream with the caller's `params` (adapted to
    /// the upstream's era by [`era::adapt_params`]) and returns the
    /// `result`. Errors name the upstream ([`CallError`]); a transport error
    /// also wakes the owner task to reconnect.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, CallError> {
        (self.call_relayed(method, params, None).await).map(Payload::into_value)
    }

    /// [`Upstream::call`] whose request-scoped notifications and server→client
    /// requests are relayed to the caller through `relay` ([`relay`]); a
    /// modern upstream's `InputRequiredResult` for a legacy session's call
    /// is answered by asking that caller ([`input_bridge`]).
    pub async fn call_relayed(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
    ) -> Result<Payload, CallError> {
        self.call_as(method, params, relay, Claimant::NOBODY, CallEra::Own)
            .await
    }

    /// Whether it offers the tasks extension now: a modern connection
    /// whose discovered capabilities name it (ext-tasks §Capability
    /// Negotiation).
    pub fn offers_tasks(&self) -> bool {
        self.negotiated().is_some_and(|n| {
            n.era == UpstreamEra::Modern && crate::tasks::in_capabilities(Some(&n.capabilities))
        })
    }

    /// [`Upstream::call_relayed`] for a downstream client `who`: the call
    /// takes one of the upstream's in-flight places within the client's
    /// share ([`Callers`]: [`CallError::Share`] otherwise). A dual-era
    /// upstream is spoken to in the caller's era (`call`): a legacy
    /// caller's call goes to its legacy session, where its server requests
    /// come as requests, not as an `InputRequiredResult`
    /// ([`Negotiated::era_for`]).
    pub async fn call_as(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
        who: Claimant<'_>,
        call: CallEra,
    ) -> Result<Payload, CallError> {
        if let Some(retry_in) = self.owned.retry_window() {
            return Err(CallError::RetryLater {
                name: self.config.name.clone(),
                retry_in,
            });
        }
        let (conn, neg, generation) = self.owned.current().ok_or_else(|| self.unavailable())?;
        let claim = (self.callers).claim(who, &self.config.name, || conn.reclaim_stale())?;
        let _active = self.calls.enter();
        let t0 = Instant::now();
        // A tool that runs only as a task is called in the modern era (its
        // task followed), even for a legacy caller of a dual-era upstream:
        // its legacy session would refuse it.
        let call = match call {
            CallEra::Legacy if neg.legacy.is_some() && self.task_required(method, &params) => {
                CallEra::Own
            }
            other => other,
        };
        let spoken = neg.era_for(call);
        let mut params = era::adapt_params(spoken, params);
        if let (UpstreamEra::Modern, Some(floor)) = (spoken, legacy_log_floor(relay.as_ref())) {
            era::ask_log_level(&mut params, floor);
        }
        // Kept only when the bridge may need them (no copy otherwise).
        let bridge = era::may_bridge(spoken, method, relay.as_ref())
            .then(|| (params.clone(), relay.clone()));
        let sent = (spoken, generation);
        let first = (self.send_once(&conn, sent, method, params, relay, claim.clone())).await?;
        match bridge {
            Some((params, Some(relay))) if first.is_input_required() => {
                let call = input_bridge::Bridged {
                    conn,
                    generation,
                    method,
                    params,
                    relay,
                    deadline: t0 + self.config.call_timeout,
                    claim,
                };
                self.bridge(call, first).await
            }
            _ => Ok(first),
        }
    }

    /// One request on `conn`; a legacy HTTP session that ended upstream
    /// gets one re-initialize and one retry (2025-11-25 transports.mdx
    /// §Session Management, item 4).
    async fn send_once(
        &self,
        conn: &Conn,
        (era, generation): (UpstreamEra, u64),
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
        claim: Option<Claim>,
    ) -> Result<Payload, CallError> {
        let timeout = self.config.call_timeout;
        // Only a legacy HTTP session can end under a call (then it is sent
        // again): the params are copied for that case only.
        let again = conn
            .may_expire(era)
            .then(|| (params.clone(), relay.clone()));
        let first = conn
            .send(method, params, era, timeout, relay, claim.clone())
            .await;
        let outcome = match (first, again) {
            (Err(SendError::SessionExpired), Some((params, relay))) => {
                let _g = self.reinit.lock().await;
                conn.reinitialize(era)
                    .await
                    .map_err(|e| self.name_send_error(e, generation))?;
                // The new upstream session has no resource subscriptions.
                self.forget_subscribed();
                conn.send(method, params, era, timeout, relay, claim).await
            }
            (other, _) => other,
        };
        outcome.map_err(|e| self.name_send_error(e, generation))
    }

    /// Passes a downstream client's answer to a relayed server→client request
    /// (slot and generation parsed from its id by [`relay::parse_downstream_id`])
    /// back to the upstream. `false` when no such request awaits `session`'s answer.
    pub async fn answer_relayed(
        &self,
        slot: usize,
        generation: u32,
        session: &str,
        outcome: Result<Value, crate::protocol::RpcError>,
    ) -> bool {
        let (upstream_id, lane) = match self.pending.take(slot, generation, session) {
            None => return false,
            Some(relay::Target::Waiter(w)) => return w.send(outcome).is_ok(),
            Some(relay::Target::Upstream(id, lane)) => (id, lane),
        };
        let Some((conn, _, _)) = self.owned.current() else {
            return false;
        };
        let msg = match outcome {
            Ok(r) => protocol::result_response(upstream_id, r),
            Err(e) => protocol::error_response(upstream_id, &e),
        };
        conn.respond(&msg, lane).await.is_ok()
    }

    /// Forgets the relayed requests awaiting `session`'s answer (session ended).
    pub fn forget_session(&self, session: &str) {
        self.pending.forget_session(session);
    }

    /// What a transport needs to relay this upstream's server→client requests.
    pub(crate) fn relay_ctx(&self) -> relay::RelayCtx {
        relay::RelayCtx {
            id: self.id,
            pending: self.pending.clone(),
            max_age: self.config.call_timeout,
            subscriptions: self.subscriptions.clone(),
        }
    }

    /// The error for a call while not connected; with `connect_on_demand`,
    /// wakes the owner for one early attempt once the un-jittered backoff
    /// window has passed (never sooner, so calls cannot cause a storm): a
    /// caller's write, a signal to the owner.
    pub fn unavailable(&self) -> CallError {
        let now = tokio::time::Instant::now();
        let status = self.status();
        if self.config.connect_on_demand {
            let earliest = self.owned.earliest_retry();
            if matches!(status, Status::Backoff { .. }) && earliest.is_some_and(|e| now >= e) {
                self.owned.wake();
            }
        }
        CallError::Unavailable {
            name: self.config.name.clone(),
            state: status.describe(now),
            retry_in_secs: status.retry_in(now).map(|d| d.as_secs_f64().ceil() as u64),
        }
    }

    /// `e`, seen by a call on the connection of `generation`, as the
    /// caller's error naming the upstream. A caller's writes: a
    /// Retry-After sets the floor for calls, and a failure that counts
    /// against the upstream is reported to the owner as that connection's
    /// loss (docs/architecture.md, *Which errors count against an upstream*).
    fn name_send_error(&self, e: SendError, generation: u64) -> CallError {
        let name = self.config.name.clone();
        match e {
            // An HTTP answer carrying a JSON-RPC error, whatever its status,
            // is this caller's error: code, message and data kept.
            SendError::Rpc(r) | SendError::Http { rpc: Some(r), .. } => CallError::Rpc(r),
            // A 4xx without one refuses this request only (401/403 are
            // `Auth`, an expired session `SessionExpired`: both below).
            SendError::Http {
                status: status @ 400..=499,
                rpc: None,
            } => CallError::Refused { name, status },
            // A body this request's answer came in that cannot be read is
            // this request's failure: the connection is fine.
            SendError::Malformed(reason) => CallError::Malformed { name, reason },
            SendError::StreamCut(reason) => CallError::StreamCut { name, reason },
            SendError::Timeout => CallError::Timeout {
                name,
                after: self.config.call_timeout,
            },
            SendError::Busy => {
                crate::metrics::refused("in_flight");
                CallError::Busy {
                    name,
                    capacity: self.config.max_in_flight,
                }
            }
            SendError::TooLarge => {
                crate::metrics::refused("result_bytes");
                CallError::TooLarge {
                    name,
                    limit: self.config.max_result_bytes,
                }
            }
            SendError::RetryAfter { after, .. } => {
                let cap = self.config.retry_after_cap;
                let retry_in = self.owned.set_retry_floor(after, cap);
                CallError::RetryLater { name, retry_in }
            }
            // The connection is fine; only its token is missing. Parked
            // kinds (refused client, refused grant, no login) take the
            // upstream down as a 401 does; the others fail this call only,
            // so calls succeed again as soon as a token can be had.
            SendError::OAuth(e) => {
                if e.parks() {
                    self.owned.lose(Loss {
                        reason: e.to_string(),
                        auth: true,
                        conn: generation,
                    });
                }
                CallError::NoToken {
                    name,
                    reason: e.to_string(),
                }
            }
            other => {
                let auth = matches!(other, SendError::Auth(_));
                self.owned.lose(Loss {
                    reason: other.to_string(),
                    auth,
                    conn: generation,
                });
                CallError::Transport {
                    name,
                    reason: other.to_string(),
                }
            }
        }
    }
}

/// The in-flight places of one upstream as its callers' clients hold them
/// (`max_in_flight` of them), taken by [`Upstream::call_as`] before a call
/// goes to any transport, in front of the transport's own table. With
/// `[[client]]`s they are shared fairly ([`crate::share`]): a client at or
/// over its share does not take one of the last places while other clients
/// are under theirs (a call in flight is never given up for another, so
/// the rule is only to keep room). A stdio call's slot keeps its place
/// until the slot is freed ([`inflight`]).
pub struct Callers {
    capacity: usize,
    counts: Mutex<Counts>,
}

/// One call's place in [`Callers`]: given back when the last clone is
/// dropped (the call, and the stdio slot it took, which may outlive it).
#[derive(Clone)]
pub struct Claim(#[allow(dead_code)] Arc<Held>);

struct Held {
    callers: Arc<Callers>,
    owner: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        (self.callers.counts.lock().expect("callers")).remove(self.owner);
    }
}

impl Callers {
    /// `capacity` places (the upstream's `max_in_flight`).
    pub fn new(capacity: usize) -> Arc<Callers> {
        Arc::new(Callers {
            capacity,
            counts: Mutex::new(Counts::new()),
        })
    }

    /// A place for one call of `who` to upstream `name`, or the error to
    /// answer: [`CallError::Share`] when its client holds its share and the
    /// places left are kept for others (counted as `upstream_share`),
    /// [`CallError::Busy`] when every place is taken (`in_flight`). `None`
    /// when no share applies (the transport's own bound is the only one).
    /// Before refusing, `reclaim` frees the places of calls abandoned past
    /// their timeout (a stdio slot keeps its client's place until then) and
    /// the decision is taken again.
    pub fn claim(
        self: &Arc<Self>,
        who: Claimant<'_>,
        name: &str,
        reclaim: impl FnOnce() -> usize,
    ) -> Result<Option<Claim>, CallError> {
        if !who.shares.applies() {
            return Ok(None);
        }
        let refusal = match self.try_claim(who) {
            Ok(claim) => return Ok(Some(claim)),
            Err(_) if reclaim() > 0 => match self.try_claim(who) {
                Ok(claim) => return Ok(Some(claim)),
                Err(r) => r,
            },
            Err(r) => r,
        };
        let counts = self.counts.lock().expect("callers");
        match refusal {
            share::Refusal::Share => {
                crate::metrics::refused("upstream_share");
                Err(CallError::Share {
                    name: name.to_owned(),
                    held: counts.get(who.owner) as usize,
                    share: who.shares.share_of(who.owner, self.capacity),
                    capacity: self.capacity,
                })
            }
            share::Refusal::Full => {
                crate::metrics::refused("in_flight");
                Err(CallError::Busy {
                    name: name.to_owned(),
                    capacity: self.capacity,
                })
            }
        }
    }

    /// One decision under the lock: the place taken, or why not.
    fn try_claim(self: &Arc<Self>, who: Claimant<'_>) -> Result<Claim, share::Refusal> {
        let mut counts = self.counts.lock().expect("callers");
        let used = counts.total();
        match share::decide(who.shares, self.capacity, used, &counts, who.owner, |_| {
            false
        }) {
            Decision::Take | Decision::TakeFrom(_) => {
                counts.add(who.owner);
                let held = Held {
                    callers: self.clone(),
                    owner: who.owner,
                };
                Ok(Claim(Arc::new(held)))
            }
            Decision::Refuse(r) => Err(r),
        }
    }
}

/// The log floor of a legacy caller's relayed call: a modern upstream
/// must be told it (`io.modelcontextprotocol/logLevel`), or it sends no log
/// messages at all (2026-07-28 changelog.mdx §Major changes 5), where a
/// legacy session gets every one from its `logging/setLevel` floor up.
fn legacy_log_floor(relay: Option<&relay::Relay>) -> Option<usize> {
    let relay = relay?;
    relay.is_legacy_caller().then_some(relay.log_floor)?
}

#[cfg(test)]
mod upstream_tests;
