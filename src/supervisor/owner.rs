//! The owner task of one upstream: connect, monitor, reconnect — one loop.
//!
//! Health probing is a `select!` arm of the same loop that reads the
//! connection, so a reconnect can never start a second monitor. One retry
//! policy lives here: exponential backoff with lengthening jitter
//! ([`Backoff`]), reset only after `stable_period` in Ready; HTTP 401/403
//! parks the upstream until its credential file changes (mtime) or an
//! operator asks; `Retry-After` (429/503) is a floor for the next attempt.
//! Every wait also listens for shutdown.
//!
//! The task holds its upstream's [`Steward`], the owner's side made with
//! the handle: everything it writes about the upstream (connection, status,
//! catalog, progress, backoff window, counters) goes through it, and what
//! callers tell it (a loss, a reconnect, a wake) it waits for through it.

use super::persist::{unix_ms_after, Persist, Saved};
use crate::backoff::{jitter_unit, Backoff};
use crate::limits;
use crate::upstream::{
    era, handshake, Abandoned, Catalog, Conn, Driver, Negotiated, Opened, SendError, Steward,
    Upstream, UpstreamEra,
};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

/// How one connection ended.
enum End {
    /// Shutdown requested.
    Shutdown,
    /// Operator asked to reconnect: no failure counted.
    Reconnect,
    /// Failed, with what to do next.
    Failed(Failure),
}

struct Failure {
    reason: String,
    /// 401/403: park instead of backing off.
    auth: bool,
    /// The upstream's Retry-After.
    retry_after: Option<Duration>,
    /// It had been Ready for `stable_period`: the backoff starts over.
    was_stable: bool,
    /// Only an access token was missing (its authorization server failed,
    /// not the upstream): the next attempt follows the token requests'
    /// schedule (`limits::OAUTH_BACKOFF_CAP` at most), and a token that
    /// arrives meanwhile ends the wait.
    token_only: bool,
}

impl Failure {
    fn plain(reason: String) -> End {
        End::Failed(Failure {
            reason,
            auth: false,
            retry_after: None,
            was_stable: false,
            token_only: false,
        })
    }

    fn from_send(step: &str, e: &SendError) -> End {
        End::Failed(Failure {
            reason: format!("{step}: {e}"),
            auth: match e {
                SendError::Auth(_) => true,
                SendError::OAuth(o) => o.parks(),
                _ => false,
            },
            // A token endpoint's Retry-After, or the time until its next
            // token request, is the floor of the next connect attempt.
            retry_after: match e {
                SendError::RetryAfter { after, .. } => Some(*after),
                SendError::OAuth(o) => o.retry_after(),
                _ => None,
            },
            was_stable: false,
            token_only: matches!(e, SendError::OAuth(o) if !o.parks()),
        })
    }
}

/// Counts this upstream's live monitor while it exists.
struct MonitorGuard<'a>(&'a Steward);

impl<'a> MonitorGuard<'a> {
    fn new(owner: &'a Steward) -> Self {
        owner.count_monitor(true);
        metrics::gauge!(crate::metrics::MONITORS).increment(1.0);
        MonitorGuard(owner)
    }
}

impl Drop for MonitorGuard<'_> {
    fn drop(&mut self) {
        self.0.count_monitor(false);
        metrics::gauge!(crate::metrics::MONITORS).decrement(1.0);
    }
}

/// One probe: `ping` for a legacy upstream, `server/discover` for a modern
/// one (and `ping` in a dual-era one's legacy session) — never a list. Any
/// JSON-RPC answer, even an error, shows it is alive.
async fn probe(owner: &Steward, conn: &Conn, neg: &Negotiated) -> bool {
    let up = owner.upstream();
    let method = match neg.era {
        UpstreamEra::Modern => "server/discover",
        UpstreamEra::Legacy(_) => "ping",
    };
    let params = era::adapt_params(neg.era, None);
    let ok = matches!(
        conn.send(method, params, neg.era, up.config.probe_timeout, None, None)
            .await,
        Ok(_) | Err(SendError::Rpc(_))
    );
    owner.count_probe(ok);
    if ok && neg.legacy.is_some() {
        // A dual-era upstream's legacy session too: one the server ended
        // is opened again (its subscriptions asked anew), not left dead
        // until a legacy caller happens to find out.
        if let Err(e) = up.call_legacy("ping", None).await {
            tracing::debug!(upstream = %up.name(), "legacy session ping: {}", crate::logline::printable(&e.to_string()));
        }
    }
    let outcome = if ok { "ok" } else { "missed" };
    metrics::counter!(crate::metrics::UPSTREAM_PROBES, "upstream" => up.config.name.clone(), "outcome" => outcome).increment(1);
    ok
}

/// Connects once and serves until the connection ends.
async fn connect_and_serve(owner: &Steward, shutdown: &mut watch::Receiver<bool>) -> End {
    owner.attempt_started();
    let Opened {
        conn,
        mut driver,
        mut abandoned,
    } = match Conn::open(owner) {
        Ok(x) => x,
        Err(e) => return Failure::plain(e.to_string()),
    };
    let conn = Arc::new(conn);
    match handshake(owner, &conn, &mut driver, &mut abandoned, shutdown).await {
        Ok(neg) => serve(owner, conn, neg, driver, abandoned, shutdown).await,
        Err(end) => end,
    }
}

/// The era handshake within `startup_timeout`, polled with the driver (a
/// child that dies during it ends it) and the cancellation of calls given
/// up on (an era probe that timed out); the connection is closed on failure.
async fn handshake(
    owner: &Steward,
    conn: &Conn,
    driver: &mut Driver,
    abandoned: &mut Abandoned,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Negotiated, End> {
    let up = owner.upstream();
    let hs = tokio::select! {
        r = tokio::time::timeout(up.config.startup_timeout, handshake::open(conn, up.config.era)) => r,
        reason = &mut *driver => Ok(Err(handshake::HandshakeError::Incompatible(reason))),
        never = cancel_abandoned(up, conn, abandoned) => match never {},
        _ = shutdown.changed() => { conn.close().await; return Err(End::Shutdown); }
        _ = owner.reconnect_asked() => { conn.close().await; return Err(End::Reconnect); }
    };
    let end = match hs {
        Ok(Ok(n)) => return Ok(n),
        Err(_) => Failure::plain(format!(
            "no handshake within startup_timeout ({:?})",
            up.config.startup_timeout
        )),
        Ok(Err(handshake::HandshakeError::Send { step, source })) => {
            if let SendError::Transport(_) = source {
                // A child that died during the handshake: its exit status and
                // last stderr line (from the driver) say more than "broken pipe".
                if let Ok(reason) = tokio::time::timeout(limits::HANDSHAKE_EXIT_WAIT, driver).await
                {
                    return Err(Failure::plain(format!("{step}: {reason}")));
                }
            }
            Failure::from_send(step, &source)
        }
        Ok(Err(e)) => Failure::plain(e.to_string()),
    };
    conn.close().await;
    Err(end)
}

/// Serves a connection that completed its handshake until it ends: its
/// driver, the [`Monitor`], a call's loss report about it, an operator's
/// reconnect or shutdown.
async fn serve(
    owner: &Steward,
    conn: Arc<Conn>,
    neg: Negotiated,
    mut driver: Driver,
    mut abandoned: Abandoned,
    shutdown: &mut watch::Receiver<bool>,
) -> End {
    let up = owner.upstream();
    metrics::counter!(crate::metrics::UPSTREAM_CONNECTS, "upstream" => up.name().to_string(), "outcome" => "ok").increment(1);
    tracing::info!(upstream = %up.name(), eras = ?neg.versions(), "connected");
    // Also forgets what the previous connection was asked to report.
    let generation = owner.install(conn.clone(), neg.clone());
    let since = Instant::now();
    let _monitor = MonitorGuard::new(owner);
    let end = tokio::select! {
        reason = &mut driver => Failure::plain(reason),
        reason = Monitor::new(owner, &conn, &neg).run(since) => Failure::plain(reason),
        never = cancel_abandoned(up, &conn, &mut abandoned) => match never {},
        loss = owner.loss_of(generation) => End::Failed(Failure {
            reason: loss.reason,
            auth: loss.auth,
            retry_after: None,
            was_stable: false,
            token_only: false,
        }),
        _ = owner.reconnect_asked() => End::Reconnect,
        _ = shutdown.changed() => End::Shutdown,
    };
    owner.uninstall();
    conn.close().await;
    // Only a connection with a stop sequence has a driver that ends after
    // close; the others never do, so don't wait on them.
    if matches!(end, End::Shutdown) && conn.has_stop_sequence() {
        let _ = tokio::time::timeout(limits::CHILD_STOP_GRACE * 3, driver).await;
    }
    match end {
        End::Failed(mut f) => {
            f.was_stable = since.elapsed() >= up.config.stable_period;
            End::Failed(f)
        }
        other => other,
    }
}

/// The monitor of one connection: catalog (now and on list_changed),
/// health probes, resource subscriptions and the notification stream,
/// polled together with the driver so answers keep
/// flowing while it waits. Returns why the connection must go.
struct Monitor<'a> {
    owner: &'a Steward,
    conn: &'a Conn,
    neg: &'a Negotiated,
    /// Health probes unanswered in a row.
    misses: u32,
}

impl<'a> Monitor<'a> {
    fn new(owner: &'a Steward, conn: &'a Conn, neg: &'a Negotiated) -> Self {
        Monitor {
            owner,
            conn,
            neg,
            misses: 0,
        }
    }

    async fn run(mut self, since: Instant) -> String {
        let (owner, up) = (self.owner, &**self.owner.upstream());
        let name = up.name();
        let c = Catalog::fetch(up, self.neg).await;
        tracing::info!(upstream = %name, tools = c.tools.len(), prompts = c.prompts.len(), resources = c.resources.len(), "catalog loaded");
        owner.set_catalog(c).await;
        owner.transition(|s| s.ready(self.neg.era, since));
        let every = up.config.health_interval;
        let mut tick = tokio::time::interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A modern child announces list changes only to a listener.
        if let Err(e) = self.conn.listen(self.neg.era).await {
            tracing::debug!(upstream = %name, "subscriptions/listen not sent: {}", crate::logline::printable(&e.to_string()));
        }
        // An HTTP upstream's notification stream: one more arm.
        let notifications = self.conn.notifications(name, up.config.health_interval);
        tokio::pin!(notifications);
        // Resource subscriptions clients hold on this upstream: asked for
        // again on this connection, then kept in line with the table.
        let mut wanted = owner.wanted_subscriptions();
        wanted.mark_unchanged();
        owner.reconcile_subscriptions().await;
        loop {
            tokio::select! {
                biased;
                _ = tick.tick() => if let Some(reason) = self.on_tick().await {
                    return reason;
                },
                _ = owner.list_changed() => self.refresh().await,
                Ok(()) = wanted.changed() => {
                    wanted.mark_unchanged();
                    owner.reconcile_subscriptions().await;
                }
                _ = &mut notifications => {}
            }
        }
    }

    /// A health tick: one probe; after an answer, a catalog that was left
    /// incomplete is listed again and subscriptions are reconciled.
    /// `Some(reason)` after `probe_misses` unanswered probes in a row.
    async fn on_tick(&mut self) -> Option<String> {
        let (owner, up) = (self.owner, &**self.owner.upstream());
        if crate::fault::active(crate::fault::Fault::StallOwners) {
            tracing::warn!(upstream = %up.name(), "test fault: the owner task hangs in its probe");
            std::future::pending::<()>().await;
        }
        let answered = probe(owner, self.conn, self.neg).await;
        owner.progressed();
        if answered {
            if up.catalog().incomplete {
                // A listing failed last time: try again now.
                self.refresh().await;
            }
            owner.reconcile_subscriptions().await;
            self.misses = 0;
            return None;
        }
        self.misses += 1;
        (self.misses >= up.config.probe_misses)
            .then(|| format!("{} health probe(s) in a row unanswered", self.misses))
    }

    /// Lists the catalog again.
    async fn refresh(&self) {
        let owner = self.owner;
        (owner.set_catalog(Catalog::fetch(owner.upstream(), self.neg).await)).await;
        owner.progressed();
    }
}

/// Calls given up on (timeout, caller gone) on this connection, cancelled
/// upstream as they come, one at a time, each bounded by `probe_timeout`
/// ([`Conn::cancel`]: stdio always, HTTP in the legacy era). Polled beside
/// the handshake and the monitor, so a busy probe or catalog refresh never
/// holds a cancellation back. Never ends.
async fn cancel_abandoned(
    up: &Upstream,
    conn: &Conn,
    abandoned: &mut Abandoned,
) -> std::convert::Infallible {
    let name = up.name();
    loop {
        let Some((id, lane)) = abandoned.next().await else {
            return std::future::pending().await;
        };
        match tokio::time::timeout(up.config.probe_timeout, conn.cancel(id, lane)).await {
            Ok(Ok(())) => tracing::debug!(upstream = %name, id, "call cancelled upstream"),
            Ok(Err(e)) => {
                tracing::debug!(upstream = %name, id, "notifications/cancelled failed: {}", crate::logline::printable(&e.to_string()))
            }
            Err(_) => tracing::debug!(upstream = %name, id, "notifications/cancelled timed out"),
        }
    }
}

/// Parked: wait for the credential file to change (checked by mtime every
/// [`limits::CREDENTIAL_CHECK_PERIOD`]), an operator, or shutdown. True to try again.
async fn await_credentials(owner: &Steward, shutdown: &mut watch::Receiver<bool>) -> bool {
    let up = owner.upstream();
    let seen = up.credential_mtimes();
    let mut tick = tokio::time::interval(limits::CREDENTIAL_CHECK_PERIOD);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if up.credential_mtimes() != seen {
                    tracing::info!(upstream = %up.name(), "credential file changed; trying again");
                    return true;
                }
            }
            _ = owner.reconnect_asked() => return true,
            _ = shutdown.changed() => return false,
        }
    }
}

/// Counts live owner tasks (`mcp_edge_upstream_owner_tasks`); dropped with
/// the task's future, also when the task is aborted.
struct OwnerGauge;

impl OwnerGauge {
    fn new() -> Self {
        metrics::gauge!(crate::metrics::OWNER_TASKS).increment(1.0);
        OwnerGauge
    }
}

impl Drop for OwnerGauge {
    fn drop(&mut self) {
        metrics::gauge!(crate::metrics::OWNER_TASKS).decrement(1.0);
    }
}

/// The owner loop of one upstream, holding its owner's side (`owner`).
/// `persist` remembers backoff across restarts.
pub(crate) async fn run(
    owner: Steward,
    mut shutdown: watch::Receiver<bool>,
    persist: Option<Arc<Persist>>,
) {
    let _gauge = OwnerGauge::new();
    let up = owner.upstream();
    let cfg = &up.config;
    let policy = match Backoff::new(cfg.backoff_initial, cfg.backoff_factor, cfg.backoff_cap) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(upstream = %up.name(), "invalid backoff policy: {e}");
            return;
        }
    };
    let mut owner = Owner {
        steward: owner,
        policy,
        persist,
        failures: 0,
    };
    if owner.resume(&mut shutdown).await {
        while owner.once(&mut shutdown).await {}
    }
    owner.steward.transition(|s| s.stop());
}

/// The retry state of one owner task.
struct Owner {
    /// The owner's side of its upstream.
    steward: Steward,
    policy: Backoff,
    persist: Option<Arc<Persist>>,
    /// Failed attempts in a row.
    failures: u32,
}

impl Owner {
    fn up(&self) -> &Upstream {
        self.steward.upstream()
    }

    fn save(&self, s: Option<Saved>) {
        if let Some(p) = &self.persist {
            p.put(self.up().name(), s);
        }
    }

    /// A restart does not reset politeness: resumes the saved schedule
    /// (parked, or waiting until the saved next attempt). False on shutdown.
    async fn resume(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let (owner, up) = (&self.steward, self.steward.upstream());
        let Some(saved) = self.persist.as_ref().and_then(|p| p.get(up.name())) else {
            return true;
        };
        self.failures = saved.failures;
        if saved.parked {
            owner.transition(|s| s.park(Instant::now(), saved.reason.clone()));
            return await_credentials(owner, shutdown).await;
        }
        let wait = saved.wait_from(SystemTime::now());
        if wait.is_zero() {
            return true;
        }
        let until = Instant::now() + wait;
        tracing::info!(upstream = %up.name(), ?wait, "resuming the backoff saved before the restart");
        let reason = format!("(before restart) {}", saved.reason);
        owner.transition(|s| s.back_off(self.failures, until, reason));
        tokio::select! {
            _ = sleep_until(until) => true,
            _ = owner.reconnect_asked() => true,
            _ = shutdown.changed() => false,
        }
    }

    /// One connect attempt, its connection's life, and what follows it
    /// (parking or backing off). False on shutdown.
    async fn once(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let failures = self.failures;
        self.steward.transition(|s| s.connect(failures + 1));
        match connect_and_serve(&self.steward, shutdown).await {
            End::Shutdown => false,
            End::Reconnect => {
                self.failures = 0;
                self.save(None);
                true
            }
            End::Failed(f) => {
                metrics::counter!(crate::metrics::UPSTREAM_CONNECTS, "upstream" => self.up().name().to_string(), "outcome" => "error").increment(1);
                if f.was_stable {
                    self.failures = 0;
                }
                if f.auth {
                    self.park(f, shutdown).await
                } else {
                    self.back_off(f, shutdown).await
                }
            }
        }
    }

    /// 401/403: parked until the credential file changes, an operator
    /// asks, or shutdown (false).
    async fn park(&self, f: Failure, shutdown: &mut watch::Receiver<bool>) -> bool {
        let owner = &self.steward;
        tracing::warn!(upstream = %self.up().name(), "credentials refused ({}); parked until they change", crate::logline::printable(&f.reason));
        owner.transition(|s| s.park(Instant::now(), f.reason.clone()));
        self.save(Some(Saved {
            failures: self.failures,
            next_attempt_unix_ms: 0,
            parked: true,
            reason: f.reason,
        }));
        if !await_credentials(owner, shutdown).await {
            return false;
        }
        self.save(None);
        true
    }

    /// Waits out the backoff delay (at least the upstream's Retry-After),
    /// persisted; ended early by an operator, a `connect_on_demand` call
    /// once the un-jittered window passed, or shutdown (false).
    async fn back_off(&mut self, f: Failure, shutdown: &mut watch::Receiver<bool>) -> bool {
        self.failures = self.failures.saturating_add(1);
        let failures = self.failures;
        let (owner, up) = (&self.steward, self.steward.upstream());
        let base = self.policy.base_delay(failures);
        let mut delay = self.policy.delay(failures, jitter_unit());
        if f.token_only {
            delay = (f.retry_after.unwrap_or(limits::OAUTH_BACKOFF_INITIAL))
                .clamp(limits::OAUTH_BACKOFF_INITIAL, limits::OAUTH_BACKOFF_CAP);
        } else if let Some(ra) = f.retry_after {
            delay = delay.max(owner.set_retry_floor(ra));
        }
        let now = Instant::now();
        let until = now + delay;
        owner.set_earliest_retry(now + base);
        tracing::warn!(upstream = %up.name(), attempt = failures, retry_in = ?delay, "upstream down: {}", crate::logline::printable(&f.reason));
        owner.transition(|s| s.back_off(failures, until, f.reason.clone()));
        self.save(Some(Saved {
            failures,
            next_attempt_unix_ms: unix_ms_after(delay),
            parked: false,
            reason: f.reason,
        }));
        // An operator's reconnect starts the count over.
        let reset = tokio::select! {
            _ = sleep_until(until) => false,
            _ = owner.woken(), if up.config.connect_on_demand => {
                tracing::info!(upstream = %up.name(), "early attempt requested by a call (connect_on_demand)");
                false
            }
            _ = owner.reconnect_asked() => true,
            _ = owner.token_ready() => {
                tracing::info!(upstream = %up.name(), "an access token arrived; trying again");
                false
            }
            _ = shutdown.changed() => return false,
        };
        if reset {
            self.failures = 0;
        }
        true
    }
}
