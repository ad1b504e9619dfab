//! Applying a reloaded config in place (`SIGHUP`, `systemctl reload`).
//!
//! The new config has already been validated whole (an invalid one never
//! gets here: the running one stays). Upstreams are matched by name and
//! compared by their resolved config ([`crate::config::UpstreamConfig`]'s
//! equality): unchanged ones keep their owner task, connection and child
//! process; changed ones are stopped, then started again under the new
//! config (agentgateway's rule: stop the old task before starting its
//! replacement) once the calls already running on them finished (up to
//! 10 s; new calls go to the new set at once); added ones are started;
//! removed ones are stopped the same way.
//! Downstream sessions are never touched. `[server]` keys (listen address,
//! capacities) size tables that live for the whole process, so changes to
//! them are reported and wait for a restart; `[watchdog]` applies at once.

use super::Gateway;
use crate::config::Config;
use crate::upstream::Upstream;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long one stopping owner task gets before it is aborted.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long calls already running on a replaced or removed upstream may take
/// to finish before it is stopped (as shutdown's grace).
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// The outcome of the last reload, kept for `STATUS=` and `/status` (the
/// watchdog refreshes `STATUS=`, so a one-off message would vanish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReload {
    /// The config file was rejected; the running config stays.
    pub rejected: bool,
    /// `[server]` changed and waits for a restart.
    pub server_pending: bool,
    /// The one-line report or the rejection reason.
    pub message: String,
    /// When, in seconds since the Unix epoch.
    pub at_unix: u64,
}

impl LastReload {
    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    /// A reload that was applied (`server_pending`: `[server]` changed).
    pub fn applied(message: &str, server_pending: bool) -> Self {
        LastReload {
            rejected: false,
            server_pending,
            message: message.to_string(),
            at_unix: Self::now(),
        }
    }

    /// A rejected reload and why.
    pub fn rejected(message: String) -> Self {
        LastReload {
            rejected: true,
            server_pending: false,
            message,
            at_unix: Self::now(),
        }
    }
}

/// What a reload did, by upstream name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// New upstreams, started.
    pub started: Vec<String>,
    /// Upstreams whose config changed: stopped, then started again.
    pub restarted: Vec<String>,
    /// Upstreams no longer in the config: stopped.
    pub stopped: Vec<String>,
    /// Upstreams left running as they were.
    pub unchanged: Vec<String>,
    /// The `[server]` section changed: applies at the next restart.
    pub server_changed: bool,
}

impl ReloadReport {
    /// True when nothing changed.
    pub fn is_noop(&self) -> bool {
        self.started.is_empty()
            && self.restarted.is_empty()
            && self.stopped.is_empty()
            && !self.server_changed
    }
}

impl fmt::Display for ReloadReport {
    /// One line, e.g. `reload applied: restarted b; started -; stopped -; 1 unchanged`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        };
        write!(
            f,
            "reload applied: restarted {}; started {}; stopped {}; {} unchanged",
            list(&self.restarted),
            list(&self.started),
            list(&self.stopped),
            self.unchanged.len()
        )?;
        if self.server_changed {
            write!(f, "; [server] changes apply at the next restart")?;
        }
        Ok(())
    }
}

impl Gateway {
    /// Applies `new` in place (see the module docs) and returns what changed.
    /// Stops take up to 5 s each; new upstreams are started, not awaited
    /// (use [`Gateway::wait_upstreams`] for that).
    pub async fn reload(&mut self, new: Config) -> ReloadReport {
        let app = self.app.clone();
        let old: Vec<Arc<Upstream>> = app.router.upstreams().to_vec();
        let mut report = ReloadReport {
            server_changed: new.server != app.config.server,
            ..ReloadReport::default()
        };
        let mut set = Vec::with_capacity(new.upstreams.len());
        let mut fresh = Vec::new();
        for c in &new.upstreams {
            match old.iter().find(|o| o.name() == c.name) {
                Some(o) if o.config == *c => {
                    report.unchanged.push(c.name.clone());
                    set.push(o.clone());
                }
                found => {
                    if found.is_some() {
                        report.restarted.push(c.name.clone());
                    } else {
                        report.started.push(c.name.clone());
                    }
                    let up = Upstream::new(
                        self.next_id,
                        c.clone(),
                        app.config.server.max_pending_server_requests,
                        app.catalog_gen.clone(),
                        app.resources.clone(),
                    );
                    self.next_id += 1;
                    set.push(up.clone());
                    fresh.push(up);
                }
            }
        }
        for o in &old {
            if !new.upstreams.iter().any(|c| c.name == o.name()) {
                report.stopped.push(o.name().to_string());
            }
        }
        // Resource subscriptions follow a restarted upstream to its
        // successor (which asks for them once connected); a removed one's go.
        for o in &old {
            if set.iter().any(|u| Arc::ptr_eq(u, o)) {
                continue;
            }
            let successor = set.iter().find(|u| u.name() == o.name()).map(|u| u.id);
            app.resources.rekey(o.id, successor);
        }
        // Route to the new set at once: a removed upstream's tools are gone,
        // a changed one answers "connecting" until its new owner is Ready.
        app.router.set_upstreams(set);
        // Calls already running there finish first (up to DRAIN_GRACE), then stop.
        let deadline = tokio::time::Instant::now() + DRAIN_GRACE;
        for name in report.restarted.iter().chain(&report.stopped) {
            if let Some(o) = old.iter().find(|o| o.name() == name) {
                if tokio::time::timeout_at(deadline, o.drained())
                    .await
                    .is_err()
                {
                    tracing::warn!(upstream = %name, calls = o.active_calls(), "reload: calls still running after {DRAIN_GRACE:?}; stopping anyway");
                }
            }
            self.supervisor.stop_one(name, STOP_GRACE).await;
        }
        for up in fresh {
            self.supervisor.start_one(up);
        }
        *app.watchdog.lock().expect("watchdog lock") = new.watchdog.clone();
        if !report.is_noop() {
            // GET streams tell their clients the lists changed.
            app.catalog_gen.send_modify(|g| g.bump([true; 3]));
        }
        tracing::info!("{report}");
        report
    }
}
