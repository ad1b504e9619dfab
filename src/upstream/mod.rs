//! Upstream MCP servers: one shared connection per configured upstream.
//!
//! An [`Upstream`] is the shared face of one configured server: callers use
//! [`Upstream::call`]; the supervisor's owner task connects, installs the live
//! [`Conn`] and replaces it after a failure. Transports: [`stdio`] (child
//! process, newline-delimited JSON-RPC), [`http`] (streamable HTTP client) and
//! [`builtin`] (the in-process `edge` tools). [`handshake`] decides the era.

pub mod builtin;
pub mod catalog;
mod clock;
mod conn;
pub mod era;
mod error;
pub mod handshake;
pub mod http;
pub mod inflight;
pub mod relay;
pub mod ring;
pub mod state;
pub mod stdio;
mod subscriptions;

use crate::config::UpstreamConfig;
use crate::protocol;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify};

pub use catalog::{Catalog, ListGens};
pub use conn::{Abandoned, Conn, Driver, OpenError, Opened};
pub use era::UpstreamEra;
pub use error::{CallError, SendError};
pub use handshake::Negotiated;
pub use state::Status;

struct Live {
    conn: Arc<Conn>,
    negotiated: Arc<Negotiated>,
    /// Its generation ([`Upstream::install`]).
    generation: u64,
}

/// The live connection, if any, and the generation of the last one installed.
#[derive(Default)]
struct Link {
    live: Option<Live>,
    /// Generation of the last connection installed (0: none yet).
    generation: u64,
}

/// The shared face of one configured upstream (cheap to share behind `Arc`).
pub struct Upstream {
    /// Identity in this process, part of relayed request ids: the config
    /// position at start; upstreams (re)started by a reload get fresh numbers,
    /// so a late answer meant for a replaced upstream never reaches its successor.
    pub id: usize,
    /// Its validated config.
    pub config: UpstreamConfig,
    live: RwLock<Link>,
    catalog: RwLock<Arc<Catalog>>,
    status: watch::Sender<Status>,
    /// Woken when traffic sees a transport error: the owner task reconnects.
    pub(crate) lost: Notify,
    /// Woken by `notifications/*/list_changed`: the owner task refreshes the catalog.
    pub(crate) list_changed: Arc<Notify>,
    reinit: tokio::sync::Mutex<()>,
    /// Server→client requests relayed to downstream clients, awaiting answers.
    pub(crate) pending: Arc<relay::Pending>,
    /// Moved on, per kind, whenever any upstream's catalog changes (shared by all upstreams).
    catalog_gen: Arc<watch::Sender<ListGens>>,
    /// The downstream resource subscriptions (shared by all upstreams).
    pub(crate) subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// The resource URIs this connection was asked to report
    /// (`resources/subscribe` sent and answered); emptied on every connect.
    pub(crate) subscribed: std::sync::Mutex<std::collections::BTreeSet<Box<str>>>,
    /// One subscription change at a time (a client's subscribe, or the
    /// owner's reconcile).
    subs_lock: tokio::sync::Mutex<()>,
    /// Why traffic last saw this upstream fail (read by the owner task).
    loss: std::sync::Mutex<Option<Loss>>,
    /// Calls are refused until then (the upstream's Retry-After).
    retry_floor: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Operator action: reconnect now (no failure counted).
    pub(crate) reconnect: Notify,
    /// A call asking for an early attempt (`connect_on_demand`).
    pub(crate) wake: Notify,
    /// The un-jittered end of the current backoff window (for `connect_on_demand`).
    pub(crate) earliest_retry: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Health probes sent, by outcome.
    pub(crate) probes_ok: std::sync::atomic::AtomicU64,
    pub(crate) probes_failed: std::sync::atomic::AtomicU64,
    /// Health monitors running (one per connected owner task; never more than 1).
    pub(crate) monitors: std::sync::atomic::AtomicUsize,
    /// Connect attempts started.
    pub(crate) attempts: std::sync::atomic::AtomicU64,
    /// When the current state was entered, and when the owner task last
    /// reported progress in it (the watchdog's progress clock).
    entered: std::sync::Mutex<tokio::time::Instant>,
    progress: std::sync::Mutex<tokio::time::Instant>,
    /// When it was last Ready (its creation time until it first is): the
    /// clock of `watchdog.required_grace`.
    last_ready: std::sync::Mutex<tokio::time::Instant>,
    /// Last 16 KiB of a stdio child's stderr.
    pub(crate) stderr_tail: Arc<std::sync::Mutex<ring::Ring>>,
    /// Calls being answered right now (a reload drains them before a stop).
    calls: crate::drain::Drain,
    /// When it was created (gateway start, or the reload that started it),
    /// and when its owner task started the first connect attempt: the clock
    /// of [`Upstream::first_attempt`].
    created: tokio::time::Instant,
    first_started: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// Why a connection was found dead by traffic.
#[derive(Debug, Clone)]
pub(crate) struct Loss {
    /// What failed.
    pub reason: String,
    /// 401/403: park instead of backing off.
    pub auth: bool,
    /// Which connection failed (its generation, [`Upstream::install`]): a
    /// late report about an old connection must not tear down its
    /// replacement (an address could be reused by the replacement; a
    /// generation never is).
    pub conn: u64,
}

impl Upstream {
    /// A not-yet-connected upstream whose table of relayed server→client
    /// requests holds `max_pending` entries (`server.max_pending_server_requests`).
    pub fn new(
        id: usize,
        config: UpstreamConfig,
        max_pending: usize,
        catalog_gen: Arc<watch::Sender<ListGens>>,
        subscriptions: Arc<crate::subscriptions::Subscriptions>,
    ) -> Arc<Self> {
        let initial = Status::initial(config.enabled);
        Arc::new(Upstream {
            id,
            config,
            live: RwLock::new(Link::default()),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            status: watch::channel(initial).0,
            lost: Notify::new(),
            list_changed: Arc::new(Notify::new()),
            reinit: tokio::sync::Mutex::new(()),
            pending: Arc::new(relay::Pending::new(max_pending)),
            catalog_gen,
            subscriptions,
            subscribed: std::sync::Mutex::new(Default::default()),
            subs_lock: tokio::sync::Mutex::new(()),
            loss: std::sync::Mutex::new(None),
            retry_floor: std::sync::Mutex::new(None),
            reconnect: Notify::new(),
            wake: Notify::new(),
            earliest_retry: std::sync::Mutex::new(None),
            probes_ok: 0.into(),
            probes_failed: 0.into(),
            monitors: 0.into(),
            attempts: 0.into(),
            entered: std::sync::Mutex::new(tokio::time::Instant::now()),
            progress: std::sync::Mutex::new(tokio::time::Instant::now()),
            last_ready: std::sync::Mutex::new(tokio::time::Instant::now()),
            stderr_tail: Arc::new(std::sync::Mutex::new(ring::Ring::new(
                crate::limits::STDERR_TAIL_BYTES,
            ))),
            calls: crate::drain::Drain::new(),
            created: tokio::time::Instant::now(),
            first_started: std::sync::Mutex::new(None),
        })
    }

    /// Generation of the live connection ([`Upstream::install`]), if connected.
    pub(crate) fn live_generation(&self) -> Option<u64> {
        self.live
            .read()
            .expect("live lock")
            .live
            .as_ref()
            .map(|l| l.generation)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver of status changes.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
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
    /// again now, without counting a failure.
    pub fn force_reconnect(&self) {
        self.reconnect.notify_one();
    }

    /// Health probes sent so far: (answered, missed).
    pub fn probes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.probes_ok.load(Relaxed),
            self.probes_failed.load(Relaxed),
        )
    }

    /// Health monitors running for this upstream (0 or 1).
    pub fn monitors(&self) -> usize {
        self.monitors.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connect attempts started since start-up.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last bytes (≤ 16 KiB) a stdio child wrote on stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .expect("stderr lock")
            .to_string_lossy()
    }

    /// Waits until traffic reports that the connection of generation `conn`
    /// failed; reports about other (older) connections are discarded.
    pub(crate) async fn loss_of(&self, conn: u64) -> Loss {
        loop {
            self.lost.notified().await;
            if let Some(l) = self.loss.lock().expect("loss lock").take() {
                if l.conn == conn {
                    return l;
                }
            }
        }
    }

    fn lose(&self, loss: Loss) {
        *self.loss.lock().expect("loss lock") = Some(loss);
        self.lost.notify_one();
    }

    /// Sets the Retry-After floor for calls (capped by `retry_after_cap`).
    pub(crate) fn set_retry_floor(&self, after: Duration) -> Duration {
        let after = after.min(self.config.retry_after_cap);
        *self.retry_floor.lock().expect("floor lock") = Some(tokio::time::Instant::now() + after);
        after
    }

    fn retry_window(&self) -> Option<Duration> {
        let floor = (*self.retry_floor.lock().expect("floor lock"))?;
        let left = floor.saturating_duration_since(tokio::time::Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// The current catalog (empty while not connected).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().expect("catalog lock").clone()
    }

    pub(crate) fn set_catalog(&self, c: Catalog) {
        if let Some(live) = self.live.read().expect("live lock").live.as_ref() {
            live.conn.set_param_headers(&c.tools);
        }
        let changed = {
            let mut cur = self.catalog.write().expect("catalog lock");
            let changed = cur.differs(&c);
            *cur = Arc::new(c);
            changed
        };
        // Only the kinds that really changed are announced (a refresh that
        // found the same lists announces nothing).
        if changed.contains(&true) {
            self.catalog_gen.send_modify(|g| g.bump(changed));
        }
    }

    /// What the handshake learnt, while connected.
    pub fn negotiated(&self) -> Option<Arc<Negotiated>> {
        self.live
            .read()
            .expect("live lock")
            .live
            .as_ref()
            .map(|l| l.negotiated.clone())
    }

    /// Makes `conn` the live connection (the owner task, after the
    /// handshake) and returns its generation: one more than the previous
    /// connection's, never reused, so a loss report names exactly one
    /// connection ([`Loss::conn`]).
    pub(crate) fn install(&self, conn: Arc<Conn>, negotiated: Negotiated) -> u64 {
        let mut link = self.live.write().expect("live lock");
        link.generation += 1;
        let generation = link.generation;
        link.live = Some(Live {
            conn,
            negotiated: Arc::new(negotiated),
            generation,
        });
        generation
    }

    pub(crate) fn uninstall(&self) {
        self.live.write().expect("live lock").live = None;
        self.set_catalog(Catalog::default());
    }

    /// The live connection, what its handshake learnt, and its generation.
    fn current(&self) -> Option<(Arc<Conn>, Arc<Negotiated>, u64)> {
        self.live
            .read()
            .expect("live lock")
            .live
            .as_ref()
            .map(|l| (l.conn.clone(), l.negotiated.clone(), l.generation))
    }

    /// Calls `method` on this upstream with the caller's `params` (adapted to
    /// the upstream's era by [`era::adapt_params`]) and returns the
    /// `result`. Errors name the upstream ([`CallError`]); a transport error
    /// also wakes the owner task to reconnect.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, CallError> {
        self.call_relayed(method, params, None).await
    }

    /// [`Upstream::call`] whose request-scoped notifications and server→client
    /// requests are relayed to the caller through `relay` ([`relay`]).
    pub async fn call_relayed(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
    ) -> Result<Value, CallError> {
        if let Some(retry_in) = self.retry_window() {
            return Err(CallError::RetryLater {
                name: self.config.name.clone(),
                retry_in,
            });
        }
        let (conn, neg, generation) = self.current().ok_or_else(|| self.unavailable())?;
        let _active = self.calls.enter();
        let params = era::adapt_params(neg.era, params);
        let timeout = self.config.call_timeout;
        let first = conn
            .send(method, params.clone(), neg.era, timeout, relay.clone())
            .await;
        let outcome = match first {
            Err(SendError::SessionExpired) => {
                // Legacy HTTP session ended upstream: one re-initialize, one retry
                // (2025-11-25 transports.mdx §Session Management, item 4).
                let _g = self.reinit.lock().await;
                conn.reinitialize(neg.era)
                    .await
                    .map_err(|e| self.name_send_error(e, generation))?;
                // The new upstream session has no resource subscriptions.
                self.forget_subscribed();
                conn.send(method, params, neg.era, timeout, relay).await
            }
            other => other,
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
        let Some(upstream_id) = self.pending.take(slot, generation, session) else {
            return false;
        };
        let Some((conn, _, _)) = self.current() else {
            return false;
        };
        let msg = match outcome {
            Ok(r) => protocol::result_response(upstream_id, r),
            Err(e) => protocol::error_response(upstream_id, &e),
        };
        conn.respond(&msg).await.is_ok()
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
    /// window has passed (never sooner, so calls cannot cause a storm).
    pub fn unavailable(&self) -> CallError {
        let now = tokio::time::Instant::now();
        let status = self.status();
        if self.config.connect_on_demand {
            let earliest = *self.earliest_retry.lock().expect("earliest lock");
            if matches!(status, Status::Backoff { .. }) && earliest.is_some_and(|e| now >= e) {
                self.wake.notify_one();
            }
        }
        CallError::Unavailable {
            name: self.config.name.clone(),
            state: status.describe(now),
            retry_in_secs: status.retry_in(now).map(|d| d.as_secs_f64().ceil() as u64),
        }
    }

    fn name_send_error(&self, e: SendError, generation: u64) -> CallError {
        let name = self.config.name.clone();
        match e {
            SendError::Rpc(r) => CallError::Rpc(r),
            SendError::Timeout => CallError::Timeout {
                name,
                after: self.config.call_timeout,
            },
            SendError::Busy => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "in_flight").increment(1);
                CallError::Busy {
                    name,
                    capacity: self.config.max_in_flight,
                }
            }
            SendError::TooLarge => {
                metrics::counter!(crate::metrics::REFUSED, "limit" => "result_bytes").increment(1);
                CallError::TooLarge {
                    name,
                    limit: self.config.max_result_bytes,
                }
            }
            SendError::RetryAfter { after, .. } => {
                let retry_in = self.set_retry_floor(after);
                CallError::RetryLater { name, retry_in }
            }
            other => {
                let auth = matches!(other, SendError::Auth(_));
                self.lose(Loss {
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

#[cfg(test)]
mod tests;
