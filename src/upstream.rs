//! Upstream MCP servers: one shared connection per configured upstream.
//!
//! An [`Upstream`] is the shared face of one configured server: callers use
//! [`Upstream::call`]; the supervisor's owner task connects, installs the live
//! [`Conn`] and replaces it after a failure. Transports: [`stdio`] (child
//! process, newline-delimited JSON-RPC), [`http`] (streamable HTTP client) and
//! [`builtin`] (the in-process `edge` tools). [`handshake`] decides the era.

pub mod builtin;
mod call_error;
pub mod catalog;
mod clock;
mod conn;
pub mod era;
pub mod handshake;
pub mod inflight;
mod input_bridge;
mod link;
mod pinning;
pub mod ring;
pub mod state;
pub mod stdio;
pub mod streamable;
mod subscribing;

use crate::config::UpstreamConfig;
use crate::protocol::{self, Payload};
use crate::relay;
use crate::share::Claimant;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

pub use call_error::{CallError, SendError};
pub use catalog::{Catalog, ListGens};
pub use conn::{Abandoned, Conn, Driver, OpenError, Opened};
pub use era::UpstreamEra;
pub use handshake::Negotiated;
pub use input_bridge::input_required;
pub use pinning::ApproveError;
pub use state::Status;

/// The shared face of one configured upstream (cheap to share behind `Arc`):
/// the handle callers hold. Its owner task (`supervisor::owner`) alone opens,
/// installs and drops connections and changes the status; callers read what
/// it publishes (status on a `watch`, the catalog `Arc`, the live connection
/// in [`Shared`]), send calls on that connection, cancel one by dropping it,
/// and tell the owner things through [`Signals`].
pub struct Upstream {
    /// Identity in this process, part of relayed request ids: the config
    /// position at start; upstreams (re)started by a reload get fresh numbers,
    /// so a late answer meant for a replaced upstream never reaches its successor.
    pub id: usize,
    /// Its validated config.
    pub config: UpstreamConfig,
    /// Where it is in its life cycle (changed only by the owner task).
    status: watch::Sender<Status>,
    /// Everything else the owner task publishes, behind one lock.
    shared: RwLock<Shared>,
    /// What it lists now, and which of its tools are withheld; replaced
    /// whole, under this lock, by the owner task ([`Upstream::set_catalog`])
    /// and by an approval ([`Upstream::approve`]).
    catalog: RwLock<Arc<Catalog>>,
    /// The tool pins (shared by all upstreams; [`crate::pins`]).
    pins: Arc<crate::pins::Pins>,
    /// What callers, transports and operators tell the owner task.
    pub(crate) signals: Signals,
    /// Counters of the owner task's work.
    pub(crate) counters: Counters,
    /// One legacy HTTP re-initialization at a time.
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
    /// Last 16 KiB of a stdio child's stderr.
    pub(crate) stderr_tail: Arc<std::sync::Mutex<ring::Ring>>,
    /// The OAuth client of an HTTP upstream with `[upstream.oauth]`: its
    /// tokens and renewal state outlive each connection.
    pub(crate) oauth: Option<Arc<crate::oauth::OAuth>>,
    /// Calls being answered right now (a reload drains them before a stop).
    calls: crate::drain::Drain,
    /// Its `max_in_flight` places as clients hold them ([`inflight::Callers`]).
    callers: Arc<inflight::Callers>,
    /// When it was created (gateway start, or the reload that started it):
    /// the clock of [`Upstream::first_attempt`] until the owner task starts.
    created: Instant,
}

/// What the owner task publishes besides the status, read by callers under
/// one lock: the connection state, the retry windows, and the clocks.
struct Shared {
    /// The live connection, if any.
    link: Link,
    /// Calls are refused until then (the upstream's Retry-After; set by
    /// the call that saw it, or by the owner after a failed attempt).
    retry_floor: Option<Instant>,
    /// The un-jittered end of the current backoff window (for `connect_on_demand`).
    earliest_retry: Option<Instant>,
    /// When the current state was entered, and when the owner task last
    /// reported progress in it (the watchdog's progress clock).
    entered: Instant,
    progress: Instant,
    /// When it was last Ready (its creation time until it first is): the
    /// clock of `watchdog.required_grace`.
    last_ready: Instant,
    /// When the owner task started the first connect attempt.
    first_started: Option<Instant>,
}

/// The connection state: down, or up with a live connection; and the
/// generation of the last connection installed (0: none yet).
#[derive(Default)]
struct Link {
    live: Option<Live>,
    generation: u64,
}

struct Live {
    conn: Arc<Conn>,
    negotiated: Arc<Negotiated>,
    /// Its generation ([`Upstream::install`]).
    generation: u64,
}

/// What others tell the owner task.
pub(crate) struct Signals {
    /// The last connection loss a call reported.
    loss: watch::Sender<Option<Loss>>,
    /// Woken by `notifications/*/list_changed`: the owner task refreshes the catalog.
    pub(crate) list_changed: Arc<Notify>,
    /// Operator action: reconnect now (no failure counted).
    pub(crate) reconnect: Notify,
    /// A call asking for an early attempt (`connect_on_demand`).
    pub(crate) wake: Notify,
}

/// Counters of the owner task's work.
#[derive(Default)]
pub(crate) struct Counters {
    /// Health probes sent, by outcome.
    pub(crate) probes_ok: AtomicU64,
    pub(crate) probes_failed: AtomicU64,
    /// Health monitors running (one per connected owner task; never more than 1).
    pub(crate) monitors: AtomicUsize,
    /// Connect attempts started.
    pub(crate) attempts: AtomicU64,
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
    /// requests holds `max_pending` entries (`server.max_pending_server_requests`),
    /// reviewing its tools against `pins`.
    pub fn new(
        id: usize,
        config: UpstreamConfig,
        max_pending: usize,
        catalog_gen: Arc<watch::Sender<ListGens>>,
        subscriptions: Arc<crate::subscriptions::Subscriptions>,
        pins: Arc<crate::pins::Pins>,
        oauth: Option<Arc<crate::oauth::OAuth>>,
    ) -> Arc<Self> {
        let initial = Status::initial(config.enabled);
        let now = Instant::now();
        let callers = inflight::Callers::new(config.max_in_flight);
        Arc::new(Upstream {
            id,
            config,
            status: watch::channel(initial).0,
            shared: RwLock::new(Shared {
                link: Link::default(),
                retry_floor: None,
                earliest_retry: None,
                entered: now,
                progress: now,
                last_ready: now,
                first_started: None,
            }),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            pins,
            signals: Signals {
                loss: watch::channel(None).0,
                list_changed: Arc::new(Notify::new()),
                reconnect: Notify::new(),
                wake: Notify::new(),
            },
            counters: Counters::default(),
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
            oauth,
        })
    }

    /// When each credential file it depends on was last modified
    /// (`bearer_token_file`; `[upstream.oauth]`'s secret or key file and its
    /// token file, which `mcp-edge login` writes): a parked upstream tries
    /// again when one changes.
    pub fn credential_mtimes(&self) -> Vec<Option<std::time::SystemTime>> {
        let mtime = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let crate::config::Transport::Http {
            bearer_token_file,
            oauth,
            ..
        } = &self.config.transport
        else {
            return Vec::new();
        };
        let mut files: Vec<&std::path::Path> =
            bearer_token_file.iter().map(|p| p.as_path()).collect();
        if let Some(o) = oauth {
            if let crate::config::ClientAuth::Secret(p) | crate::config::ClientAuth::PrivateKey(p) =
                &o.auth
            {
                files.push(p);
            }
        }
        if let Some(p) = self.oauth.as_ref().and_then(|o| o.store_path()) {
            files.push(p);
        }
        files.into_iter().map(mtime).collect()
    }

    /// Its OAuth client, for an upstream of config `c` that replaces it:
    /// kept when the URL and `[upstream.oauth]` are the same (its tokens,
    /// its renewal lock and its failure schedule go on).
    pub fn oauth_for(&self, c: &UpstreamConfig) -> Option<Arc<crate::oauth::OAuth>> {
        use crate::config::Transport::Http;
        match (&self.config.transport, &c.transport) {
            (
                Http {
                    url: a,
                    oauth: Some(x),
                    ..
                },
                Http {
                    url: b,
                    oauth: Some(y),
                    ..
                },
            ) if a == b && x == y && self.config.retry_after_cap == c.retry_after_cap => {
                self.oauth.clone()
            }
            _ => None,
        }
    }

    /// Its OAuth client's state for `/status` (grant, token state, valid
    /// until, last token request); `null` without `[upstream.oauth]`.
    pub fn oauth_status(&self) -> serde_json::Value {
        self.oauth
            .as_ref()
            .map_or(serde_json::Value::Null, |o| o.status())
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
        self.signals.reconnect.notify_one();
    }

    /// Health probes sent so far: (answered, missed).
    pub fn probes(&self) -> (u64, u64) {
        (
            self.counters.probes_ok.load(Relaxed),
            self.counters.probes_failed.load(Relaxed),
        )
    }

    /// Health monitors running for this upstream (0 or 1).
    pub fn monitors(&self) -> usize {
        self.counters.monitors.load(Relaxed)
    }

    /// Connect attempts started since start-up.
    pub fn attempts(&self) -> u64 {
        self.counters.attempts.load(Relaxed)
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
        self.catalog.read().expect("catalog lock").clone()
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
        self.call_as(method, params, relay, Claimant::NOBODY).await
    }

    /// [`Upstream::call_relayed`] for a downstream client `who`: the call
    /// takes one of the upstream's in-flight places within the client's
    /// share ([`inflight::Callers`]: [`CallError::Share`] otherwise).
    pub async fn call_as(
        &self,
        method: &str,
        params: Option<Value>,
        relay: Option<relay::Relay>,
        who: Claimant<'_>,
    ) -> Result<Payload, CallError> {
        if let Some(retry_in) = self.retry_window() {
            return Err(CallError::RetryLater {
                name: self.config.name.clone(),
                retry_in,
            });
        }
        let (conn, neg, generation) = self.current().ok_or_else(|| self.unavailable())?;
        let claim = (self.callers).claim(who, &self.config.name, || conn.reclaim_stale())?;
        let _active = self.calls.enter();
        let t0 = Instant::now();
        let mut params = era::adapt_params(neg.era, params);
        if let (UpstreamEra::Modern, Some(floor)) = (neg.era, legacy_log_floor(relay.as_ref())) {
            era::ask_log_level(&mut params, floor);
        }
        // Kept only when the bridge may need them (no copy otherwise).
        let bridge = input_bridge::may_bridge(neg.era, method, relay.as_ref())
            .then(|| (params.clone(), relay.clone()));
        let sent = (neg.era, generation);
        let first = (self.send_once(&conn, sent, method, params, relay, claim.clone())).await?;
        match bridge {
            Some((params, Some(relay))) if input_bridge::input_required(&first) => {
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
        claim: Option<inflight::Claim>,
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
        let Some((conn, _, _)) = self.current() else {
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
    /// window has passed (never sooner, so calls cannot cause a storm).
    pub fn unavailable(&self) -> CallError {
        let now = tokio::time::Instant::now();
        let status = self.status();
        if self.config.connect_on_demand {
            let earliest = self.shared.read().expect("shared lock").earliest_retry;
            if matches!(status, Status::Backoff { .. }) && earliest.is_some_and(|e| now >= e) {
                self.signals.wake.notify_one();
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
            // An HTTP answer carrying a JSON-RPC error, whatever its status,
            // is this caller's error: code, message and data kept.
            SendError::Rpc(r) | SendError::Http { rpc: Some(r), .. } => CallError::Rpc(r),
            // A 4xx without one refuses this request only (401/403 are
            // `Auth`, an expired session `SessionExpired`: both below).
            SendError::Http {
                status: status @ 400..=499,
                rpc: None,
            } => CallError::Refused { name, status },
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
                let retry_in = self.set_retry_floor(after);
                CallError::RetryLater { name, retry_in }
            }
            // The connection is fine; only its token is missing. Parked
            // kinds (refused client, refused grant, no login) take the
            // upstream down as a 401 does; the others fail this call only,
            // so calls succeed again as soon as a token can be had.
            SendError::OAuth(e) => {
                if e.parks() {
                    self.lose(Loss {
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
