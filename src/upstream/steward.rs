//! The owner's side of one upstream: [`Steward`], made together with its
//! [`Upstream`] handle by [`Upstream::new`] and given to the upstream's
//! owner task (`supervisor::owner`), and [`OwnerState`], what that task
//! writes and callers read.
//!
//! `OwnerState`'s fields are private to this file: the handle (every other
//! file of `upstream`, and everyone holding an `Arc<Upstream>`) reads them
//! through its accessors and writes only what a caller may (each such
//! method says so); everything else is written by the [`Steward`]'s methods
//! below. The catalog the owner installs is written in `pinning`
//! ([`Steward::set_catalog`]), the subscriptions it keeps in line in
//! `subscribing` ([`Steward::reconcile_subscriptions`]), the connection it
//! opens in `conn` ([`super::Conn::open`]): each takes a `&Steward`.

use super::{Conn, Negotiated, Status, Upstream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// The owner's side of one upstream: the only way to install and drop its
/// connection, change its status, publish its catalog, report progress,
/// set its backoff window, count its owner work and wait for what callers
/// tell the owner. One per upstream (not `Clone`), held by its owner task.
pub struct Steward {
    up: Arc<Upstream>,
}

/// What the owner task writes and callers read: the status on a `watch`,
/// the connection and clocks under one lock, the counters of its work, and
/// what callers tell it. Fields private to this file (module docs).
pub(super) struct OwnerState {
    /// Where it is in its life cycle ([`Steward::transition`]).
    status: watch::Sender<Status>,
    /// The connection state, the retry windows and the clocks.
    shared: RwLock<Shared>,
    /// Counters of the owner task's work.
    counters: Counters,
    /// What callers, transports and operators tell the owner task.
    signals: Signals,
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
    /// Its generation ([`Steward::install`]).
    generation: u64,
}

/// What others tell the owner task.
struct Signals {
    /// The last connection loss a call reported.
    loss: watch::Sender<Option<Loss>>,
    /// Woken by `notifications/*/list_changed`: the owner task refreshes the catalog.
    list_changed: Arc<Notify>,
    /// Operator action: reconnect now (no failure counted).
    reconnect: Notify,
    /// A call asking for an early attempt (`connect_on_demand`).
    wake: Notify,
}

/// Counters of the owner task's work.
#[derive(Default)]
struct Counters {
    /// Health probes sent, by outcome.
    probes_ok: AtomicU64,
    probes_failed: AtomicU64,
    /// Health monitors running (one per connected owner task; never more than 1).
    monitors: AtomicUsize,
    /// Connect attempts started.
    attempts: AtomicU64,
}

/// Why a connection was found dead by traffic.
#[derive(Debug, Clone)]
pub(crate) struct Loss {
    /// What failed.
    pub reason: String,
    /// 401/403: park instead of backing off.
    pub auth: bool,
    /// Which connection failed (its generation, [`Steward::install`]): a
    /// late report about an old connection must not tear down its
    /// replacement (an address could be reused by the replacement; a
    /// generation never is).
    pub conn: u64,
}

impl OwnerState {
    /// The state of a new upstream, `initial` since `now`.
    pub(super) fn new(initial: Status, now: Instant) -> Self {
        OwnerState {
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
            counters: Counters::default(),
            signals: Signals {
                loss: watch::channel(None).0,
                list_changed: Arc::new(Notify::new()),
                reconnect: Notify::new(),
                wake: Notify::new(),
            },
        }
    }

    /// The current status.
    pub(super) fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// `f` of the current status, without a copy.
    pub(super) fn status_is(&self, f: impl FnOnce(&Status) -> bool) -> bool {
        f(&self.status.borrow())
    }

    /// A receiver of status changes.
    pub(super) fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.shared.read().expect("shared lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Shared> {
        self.shared.write().expect("shared lock")
    }

    /// The live connection, what its handshake learnt, and its generation.
    pub(super) fn current(&self) -> Option<(Arc<Conn>, Arc<Negotiated>, u64)> {
        let shared = self.read();
        let live = shared.link.live.as_ref()?;
        Some((live.conn.clone(), live.negotiated.clone(), live.generation))
    }

    /// Generation of the live connection ([`Steward::install`]), if connected.
    pub(super) fn live_generation(&self) -> Option<u64> {
        self.read().link.live.as_ref().map(|l| l.generation)
    }

    /// What the handshake learnt, while connected.
    pub(super) fn negotiated(&self) -> Option<Arc<Negotiated>> {
        self.read().link.live.as_ref().map(|l| l.negotiated.clone())
    }

    /// Time left in the Retry-After window, if one is open.
    pub(super) fn retry_window(&self) -> Option<Duration> {
        let floor = self.read().retry_floor?;
        let left = floor.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// The un-jittered end of the current backoff window, if one was set.
    pub(super) fn earliest_retry(&self) -> Option<Instant> {
        self.read().earliest_retry
    }

    /// When the current state was entered, and when the owner task last
    /// reported progress in it.
    pub(super) fn entered_and_progress(&self) -> (Instant, Instant) {
        let shared = self.read();
        (shared.entered, shared.progress)
    }

    /// When it was last Ready (its creation time until it first is).
    pub(super) fn last_ready(&self) -> Instant {
        self.read().last_ready
    }

    /// When the owner task started the first connect attempt.
    pub(super) fn first_started(&self) -> Option<Instant> {
        self.read().first_started
    }

    /// Health probes sent so far: (answered, missed).
    pub(super) fn probes(&self) -> (u64, u64) {
        let c = &self.counters;
        (c.probes_ok.load(Relaxed), c.probes_failed.load(Relaxed))
    }

    /// Health monitors running (0 or 1).
    pub(super) fn monitors(&self) -> usize {
        self.counters.monitors.load(Relaxed)
    }

    /// Connect attempts started.
    pub(super) fn attempts(&self) -> u64 {
        self.counters.attempts.load(Relaxed)
    }

    /// A caller's write: a call that saw the upstream's Retry-After sets
    /// the floor for calls (capped by `cap`, `retry_after_cap`); the owner
    /// does the same after a failed attempt ([`Steward::set_retry_floor`]).
    pub(super) fn set_retry_floor(&self, after: Duration, cap: Duration) -> Duration {
        let after = after.min(cap);
        self.write().retry_floor = Some(Instant::now() + after);
        after
    }

    /// A caller's write: a call reports that its connection failed. A
    /// report about an older connection than the last one reported never
    /// replaces it, so a late report cannot hide the live connection's loss
    /// from the owner.
    pub(super) fn lose(&self, loss: Loss) {
        self.signals.loss.send_if_modified(|last| {
            if last.as_ref().is_some_and(|l| l.conn > loss.conn) {
                return false;
            }
            *last = Some(loss);
            true
        });
    }

    /// A caller's write: an operator asks the owner to reconnect now.
    pub(super) fn ask_reconnect(&self) {
        self.signals.reconnect.notify_one();
    }

    /// A caller's write: a `connect_on_demand` call asks the owner for an
    /// early attempt.
    pub(super) fn wake(&self) {
        self.signals.wake.notify_one();
    }

    /// What a transport notifies on an upstream's `list_changed` (given to
    /// each connection the owner opens).
    pub(super) fn list_changed(&self) -> Arc<Notify> {
        self.signals.list_changed.clone()
    }
}

impl Steward {
    /// The owner's side of `up`: made once, by [`Upstream::new`].
    pub(super) fn of(up: &Arc<Upstream>) -> Steward {
        Steward { up: up.clone() }
    }

    /// The handle (its config, its calls, what it publishes).
    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.up
    }

    fn state(&self) -> &OwnerState {
        &self.up.owned
    }

    /// Makes `conn` the live connection (after the handshake) and returns
    /// its generation: one more than the previous connection's, never
    /// reused, so a loss report names exactly one connection
    /// ([`Loss::conn`]). The new connection was asked for no resource
    /// updates yet.
    pub(crate) fn install(&self, conn: Arc<Conn>, negotiated: Negotiated) -> u64 {
        let generation = {
            let mut shared = self.state().write();
            let link = &mut shared.link;
            link.generation += 1;
            link.live = Some(Live {
                conn,
                negotiated: Arc::new(negotiated),
                generation: link.generation,
            });
            link.generation
        };
        self.up.forget_subscribed();
        generation
    }

    /// Drops the live connection (it ended) and empties the catalog.
    pub(crate) fn uninstall(&self) {
        self.state().write().link.live = None;
        self.clear_catalog();
    }

    /// Waits until traffic reports that the connection of generation `conn`
    /// failed; reports about other (older) connections are ignored, and one
    /// made before the wait began is seen at once.
    pub(crate) async fn loss_of(&self, conn: u64) -> Loss {
        let mut rx = self.state().signals.loss.subscribe();
        let found = rx
            .wait_for(|l| l.as_ref().is_some_and(|l| l.conn == conn))
            .await
            .ok()
            .and_then(|l| l.clone());
        match found {
            Some(loss) => loss,
            // The sender lives as long as the upstream: not reached.
            None => std::future::pending().await,
        }
    }

    /// After a failed attempt: the upstream's Retry-After is the floor for
    /// calls (capped by `retry_after_cap`).
    pub(crate) fn set_retry_floor(&self, after: Duration) -> Duration {
        (self.state()).set_retry_floor(after, self.up.config.retry_after_cap)
    }

    /// Entered a backoff window whose un-jittered end is `at` (a
    /// `connect_on_demand` call may wake the owner from then on).
    pub(crate) fn set_earliest_retry(&self, at: Instant) {
        self.state().write().earliest_retry = Some(at);
    }

    /// A connect attempt starts (counted in [`Upstream::attempts`]; the
    /// first one also starts the clock of [`Upstream::first_attempt`]).
    pub(crate) fn attempt_started(&self) {
        if self.state().counters.attempts.fetch_add(1, Relaxed) == 0 {
            self.state().write().first_started = Some(Instant::now());
        }
    }

    /// Moves to the state `f` derives from the current one (the only way to
    /// change state) and publishes `mcp_edge_upstream_state`.
    pub(crate) fn transition(&self, f: impl FnOnce(&Status) -> Status) {
        let state = self.state();
        let next = f(&state.status.borrow());
        publish_state(&self.up.config.name, &next);
        let now = Instant::now();
        let was_ready = state.status.borrow().is_ready();
        {
            let mut shared = state.write();
            if next.is_ready() || was_ready {
                shared.last_ready = now;
            }
            shared.entered = now;
            shared.progress = now;
        }
        state.status.send_replace(next);
    }

    /// "Still alive" while Ready: after each health probe, catalog refresh
    /// and subscription request (the watchdog's progress clock,
    /// [`Upstream::wedged`]).
    pub(crate) fn progressed(&self) {
        self.state().write().progress = Instant::now();
    }

    /// A health probe was answered (`true`) or missed.
    pub(crate) fn count_probe(&self, answered: bool) {
        let c = &self.state().counters;
        let counter = if answered {
            &c.probes_ok
        } else {
            &c.probes_failed
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A health monitor starts (`true`) or ends (`false`) on this upstream.
    pub(crate) fn count_monitor(&self, started: bool) {
        let monitors = &self.state().counters.monitors;
        if started {
            monitors.fetch_add(1, Relaxed);
        } else {
            monitors.fetch_sub(1, Relaxed);
        }
    }

    /// Ends when an operator asks for a reconnect ([`Upstream::force_reconnect`]).
    pub(crate) fn reconnect_asked(&self) -> Notified<'_> {
        self.state().signals.reconnect.notified()
    }

    /// Ends when a `connect_on_demand` call asks for an early attempt.
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.state().signals.wake.notified()
    }

    /// Ends when the upstream announces a list change.
    pub(crate) fn list_changed(&self) -> Notified<'_> {
        self.state().signals.list_changed.notified()
    }

    /// Moved on whenever the resource subscriptions clients hold may have
    /// changed (the table's `wanted`).
    pub(crate) fn wanted_subscriptions(&self) -> watch::Receiver<u64> {
        self.up.subscriptions.wanted.subscribe()
    }

    /// Ends when the upstream's OAuth client gets a token after failing;
    /// pending without `[upstream.oauth]`.
    pub(crate) async fn token_ready(&self) {
        match self.up.oauth.as_ref() {
            Some(o) => o.token_ready().await,
            None => std::future::pending().await,
        }
    }
}

/// `mcp_edge_upstream_ready`, `mcp_edge_upstream_state` and
/// `mcp_edge_upstream_backoff_seconds` of upstream `name` entering `next`.
fn publish_state(name: &str, next: &Status) {
    let name = name.to_owned();
    metrics::gauge!(crate::metrics::UPSTREAM_READY, "upstream" => name.clone())
        .set(if next.is_ready() { 1.0 } else { 0.0 });
    for st in Status::NAMES {
        metrics::gauge!(crate::metrics::UPSTREAM_STATE, "upstream" => name.clone(), "state" => st)
            .set(if st == next.name() { 1.0 } else { 0.0 });
    }
    let backoff = (next.retry_in(Instant::now()))
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    metrics::gauge!(crate::metrics::UPSTREAM_BACKOFF_SECONDS, "upstream" => name).set(backoff);
}
