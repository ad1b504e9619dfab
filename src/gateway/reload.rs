//! Applying a reloaded config in place (`SIGHUP`, `systemctl reload`).
//!
//! The new config has already been validated whole (an invalid one never
//! gets here: the running one stays). Upstreams are matched by name and
//! compared by their resolved config ([`crate::config::UpstreamConfig`]'s
//! equality): unchanged ones keep their owner task, connection and child
//! process; changed ones are stopped, then started again under the new
//! config (agentgateway's rule: stop the old task before starting its
//! replacement) once the calls already running on them finished (up to
//! [`crate::limits::RELOAD_DRAIN_GRACE`]; new calls go to the new set at
//! once); added ones are started; removed ones are stopped the same way.
//! Downstream sessions are never touched. The `[[client]]` table (with
//! `token_file`s read again) applies to the next request. `[server]` keys (listen address,
//! capacities) size tables that live for the whole process, so changes to
//! them are reported and wait for a restart, as do `[audit]` changes (the
//! writer thread and its open file live as long as the gateway);
//! `[watchdog]` applies at once.
//! TLS: new certificate files (`tls_cert`, `tls_key`, `tls_client_ca`: paths
//! or contents) are installed at once for the connections accepted from
//! then on, while open connections keep the certificate they shook hands
//! with; turning TLS on or off is a `[server]` change that waits for a
//! restart (the listener keeps serving as it does).

use super::Gateway;
use crate::config::{Config, ServerConfig, TlsConfig, Trust};
use crate::limits::{OWNER_STOP_GRACE, RELOAD_DRAIN_GRACE};
use crate::upstream::{Steward, Upstream};
use std::fmt;
use std::sync::Arc;

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
    /// The `[audit]` section changed: applies at the next restart.
    pub audit_changed: bool,
    /// New TLS certificate files: installed for new connections.
    pub tls_reloaded: bool,
    /// TLS turned on or off (`tls_cert` added or removed): part of
    /// `server_changed`, waits for a restart.
    pub tls_pending: bool,
}

impl ReloadReport {
    /// True when nothing changed.
    pub fn is_noop(&self) -> bool {
        !self.upstreams_changed() && !self.restart_pending() && !self.tls_reloaded
    }

    /// True when an upstream was started, restarted or stopped.
    pub fn upstreams_changed(&self) -> bool {
        !(self.started.is_empty() && self.restarted.is_empty() && self.stopped.is_empty())
    }

    /// True when a part of the new config waits for a restart
    /// (`[server]`, `[audit]`).
    pub fn restart_pending(&self) -> bool {
        self.server_changed || self.audit_changed
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
        if self.tls_reloaded {
            write!(f, "; new TLS certificate for new connections")?;
        }
        if self.server_changed {
            write!(f, "; [server] changes apply at the next restart")?;
        }
        if self.tls_pending {
            write!(f, " (TLS on/off among them)")?;
        }
        if self.audit_changed {
            write!(f, "; [audit] changes apply at the next restart")?;
        }
        Ok(())
    }
}

/// The upstream set a reload leads to.
struct Plan {
    report: ReloadReport,
    /// The new set, in config order: kept upstreams and fresh ones.
    set: Vec<Arc<Upstream>>,
    /// The owner sides of the fresh ones, to start once their
    /// predecessors stopped.
    fresh: Vec<Steward>,
}

impl Gateway {
    /// Applies `new` in place (see the module docs) and returns what changed.
    /// The caller checks [`Gateway::admissible`] first (`serve`'s reload
    /// path does).
    /// Stops take up to [`OWNER_STOP_GRACE`] each; new upstreams are started,
    /// not awaited (use [`Gateway::wait_upstreams`] for that).
    pub async fn reload(&mut self, new: Config) -> ReloadReport {
        let app = self.app.clone();
        let old: Vec<Arc<Upstream>> = app.router().upstreams().to_vec();
        let Plan { report, set, fresh } = self.plan(&old, &new);
        if report.tls_reloaded {
            // At once: not after the drain of replaced upstreams below.
            self.install_tls(new.server.tls.clone());
        }
        // Resource subscriptions follow a restarted upstream to its
        // successor (which asks for them once connected); a removed one's go.
        for o in old
            .iter()
            .filter(|o| !set.iter().any(|u| Arc::ptr_eq(u, o)))
        {
            let successor = set.iter().find(|u| u.name() == o.name()).map(|u| u.id);
            self.shared.subscriptions.rekey(o.id, successor);
        }
        // Route to the new set at once: a removed upstream's tools are gone,
        // a changed one answers "connecting" until its new owner is Ready.
        app.router().set_upstreams(set);
        // Pins of removed upstreams go (bounded by the config).
        let names: Vec<&str> = new.upstreams.iter().map(|u| u.name.as_str()).collect();
        self.shared.pins.retain(&names);
        if let Err(e) = self.shared.pins.flush(crate::pins::Flush::Now).await {
            tracing::warn!("reload: tool pins not saved: {e}");
        }
        // The [[client]] table (tokens re-read from their files) applies to
        // requests from now on; rate buckets start full again.
        app.set_access(crate::access::Access::new(
            &new,
            tokio::time::Instant::now(),
        ));
        self.stop_replaced(&old, &report).await;
        for name in &report.stopped {
            // A removed upstream withholds nothing: its gauge must not keep its last value.
            metrics::gauge!(crate::metrics::TOOLS_WITHHELD, "upstream" => name.clone()).set(0.0);
        }
        for owner in fresh {
            self.supervisor.start_one(owner);
        }
        *self.watchdog.lock().expect("watchdog lock") = new.watchdog;
        if report.upstreams_changed() {
            // GET and listen streams tell their clients the lists changed.
            self.shared.catalog_gen.send_modify(|g| g.bump([true; 3]));
        }
        tracing::info!("{report}");
        report
    }

    /// Whether `new` may be applied to the running gateway: the network
    /// rule of config loading (a non-loopback `listen` needs a
    /// `[[client]]` unless `allow_unauthenticated`) held against the
    /// listener and `[server]` *running*, since changes to those wait for a
    /// restart while the client table applies at once; likewise
    /// `trust = "pin"` against the running state directory.
    ///
    /// # Errors
    /// Why not, naming the keys.
    pub fn admissible(&self, new: &Config) -> Result<(), String> {
        if self.shared.pins.path().is_none() {
            // The running gateway keeps its pins in memory: a pin would not
            // survive the next restart.
            if let Some(u) = new.upstreams.iter().find(|u| u.trust == Trust::Pin) {
                return Err(format!(
                    "upstream {:?}: trust = \"pin\" needs server.state_directory, and the \
                     running gateway started without one (server.state_directory applies at \
                     a restart)",
                    u.name
                ));
            }
        }
        let listen = self.app.listen_addr();
        if new.clients.is_empty()
            && !listen.ip().is_loopback()
            && !self.app.server().allow_unauthenticated
        {
            return Err(format!(
                "[[client]]: the running listener {listen} (server.listen) is not loopback \
                 and serves clients by token or certificate; a reload cannot remove every \
                 [[client]] (changes to server.listen and server.allow_unauthenticated \
                 apply at a restart)"
            ));
        }
        Ok(())
    }

    /// Matches `new`'s upstreams with the running ones by name.
    fn plan(&mut self, old: &[Arc<Upstream>], new: &Config) -> Plan {
        let mut plan = Plan {
            report: ReloadReport {
                audit_changed: new.audit != self.audit_config,
                ..server_changes(self.app.server(), self.app.tls().as_ref(), &new.server)
            },
            set: Vec::with_capacity(new.upstreams.len()),
            fresh: Vec::new(),
        };
        for c in &new.upstreams {
            let previous = old.iter().find(|o| o.name() == c.name);
            match previous {
                Some(o) if o.config == *c => {
                    plan.report.unchanged.push(c.name.clone());
                    plan.set.push(o.clone());
                    continue;
                }
                Some(_) => plan.report.restarted.push(c.name.clone()),
                None => plan.report.started.push(c.name.clone()),
            }
            let (up, owner) = self
                .shared
                .upstream(self.next_id, c, previous.map(|p| &**p));
            self.next_id += 1;
            plan.set.push(up);
            plan.fresh.push(owner);
        }
        plan.report.stopped = (old.iter())
            .filter(|o| !new.upstreams.iter().any(|c| c.name == o.name()))
            .map(|o| o.name().to_string())
            .collect();
        plan
    }

    /// Serves `tls` (new certificate files) to the connections accepted
    /// from now on.
    fn install_tls(&self, tls: Option<TlsConfig>) {
        if let Some(t) = &tls {
            tracing::info!(cert = %t.cert.display(), not_after = %t.not_after, client_ca = ?t.client_ca,
                "reload: new TLS certificate for new connections; open connections keep theirs");
        }
        self.app.set_tls(tls);
    }

    /// Lets the calls running on restarted and removed upstreams finish (up
    /// to [`RELOAD_DRAIN_GRACE`] in all), then stops their owners.
    async fn stop_replaced(&mut self, old: &[Arc<Upstream>], report: &ReloadReport) {
        let deadline = tokio::time::Instant::now() + RELOAD_DRAIN_GRACE;
        for name in report.restarted.iter().chain(&report.stopped) {
            if let Some(o) = old.iter().find(|o| o.name() == name) {
                if tokio::time::timeout_at(deadline, o.drained())
                    .await
                    .is_err()
                {
                    tracing::warn!(upstream = %name, calls = o.active_calls(), "reload: calls still running after {RELOAD_DRAIN_GRACE:?}; stopping anyway");
                }
            }
            self.supervisor.stop_one(name, OWNER_STOP_GRACE).await;
        }
    }
}

/// The `[server]` part of a reload's report: `started` is `[server]` as the
/// gateway started, `serving` the TLS configuration new connections get now.
fn server_changes(
    started: &ServerConfig,
    serving: Option<&TlsConfig>,
    new: &ServerConfig,
) -> ReloadReport {
    let without_tls = |s: &ServerConfig| ServerConfig {
        tls: None,
        ..s.clone()
    };
    let tls_pending = started.tls.is_some() != new.tls.is_some();
    let tls_reloaded = matches!((serving, &new.tls), (Some(a), Some(b)) if a != b);
    ReloadReport {
        server_changed: tls_pending || without_tls(started) != without_tls(new),
        tls_reloaded,
        tls_pending,
        ..ReloadReport::default()
    }
}
