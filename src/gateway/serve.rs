//! The serve lifecycle (sd_notify(3)): `READY=1` once the listener is bound
//! and every upstream's first attempt settled (or
//! [`crate::limits::START_BUDGET`] passed), the watchdog if systemd asked
//! for one, `RELOADING=1` … `READY=1` around each reload, `STOPPING=1`,
//! then an orderly shutdown. What to do next comes from [`Controls`]:
//! signals in `main.rs`, a channel in tests.

use super::health::HealthView;
use super::{Gateway, GatewayError};
use crate::budget::{mib, Estimate};
use crate::config::Config;
use crate::downstream::LastReload;
use crate::limits::START_BUDGET;
use crate::notify::{self, Health};
use crate::supervisor::OwnedTask;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the process asks of a running gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Re-read the config file and apply it (`SIGHUP`, `systemctl reload`).
    Reload,
    /// Stop in order (`SIGTERM`, `SIGINT`).
    Stop,
}

/// A source of [`Control`]s: `main.rs`'s signal handlers, or a channel.
pub trait Controls: Send {
    /// The next request; pending until there is one.
    fn next(&mut self) -> impl Future<Output = Control> + Send;
}

/// A closed channel means stop.
impl Controls for tokio::sync::mpsc::Receiver<Control> {
    async fn next(&mut self) -> Control {
        self.recv().await.unwrap_or(Control::Stop)
    }
}

/// Starts a gateway on `config` and serves until a [`Control::Stop`]:
/// everything `mcp-edge serve` does after parsing its command line.
/// `source` is the config file a reload re-reads (`None`: the embedded
/// default, nothing to reload).
///
/// The process is made a child subreaper first, with the reaper as a root
/// task ([`crate::reaper::Reaper`]; not if `/proc` or SIGCHLD is unusable,
/// with a warning, since orphans would pile up unreaped); after the shutdown, every descendant left is
/// stopped and reaped. Only here: a gateway started in-process (tests) runs
/// in a process whose other children are not its business.
pub async fn run(
    config: Config,
    source: Option<PathBuf>,
    controls: impl Controls,
) -> Result<(), GatewayError> {
    warn_over_budget(&config);
    crate::metrics::prometheus();
    let reaper = match crate::reaper::Reaper::start() {
        Ok(r) => Some(OwnedTask::spawn(r.watch())),
        Err(e) => {
            tracing::warn!("not a child subreaper: {e}; descendants of stdio upstreams that leave their process group and lose their parent are out of reach");
            None
        }
    };
    let scheme = if config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let gateway = Gateway::start(config).await?;
    eprintln!(
        "mcp-edge listening on {scheme}://{}/mcp",
        gateway.local_addr()
    );
    if let Some(a) = gateway.admin_addr() {
        tracing::info!("admin listener on http://{a} (/metrics /healthz /readyz /status)");
    }
    gateway.serve(source.as_deref(), controls).await;
    let grace = crate::limits::CHILD_STOP_GRACE;
    let left = crate::reaper::stop_tree(None, crate::reaper::Group::NONE, grace).await;
    if left > 0 {
        tracing::info!("stopped {left} process(es) the upstreams left behind");
    }
    drop(reaper);
    crate::reaper::reap().await;
    Ok(())
}

impl Gateway {
    /// Serves until a [`Control::Stop`], then shuts down in order. A stop
    /// while waiting for upstreams or in a reload is honoured at once.
    pub async fn serve(mut self, source: Option<&Path>, controls: impl Controls) {
        let mut controls = Queue {
            inner: controls,
            reload: false,
        };
        let stopped = tokio::select! {
            _ = self.wait_upstreams(START_BUDGET) => false,
            _ = controls.stop_requested() => true,
        };
        let mut watchdog = None;
        if !stopped {
            notify::ready(&self.health().status_line());
            watchdog = notify::watchdog_period().map(|p| self.start_watchdog(p));
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            if crate::fault::block_runtime_if_asked(workers) {
                notify::status("test fault: blocking the runtime");
            }
            loop {
                match controls.next().await {
                    Control::Stop => break,
                    Control::Reload => {
                        if !self.reload_from(source, &mut controls).await {
                            break;
                        }
                    }
                }
            }
        }
        notify::stopping();
        if !stopped {
            self.drain(&mut controls).await;
        }
        drop(watchdog);
        self.shutdown().await;
    }

    /// The box leaves its fleet (`server.drain_grace`): `/readyz` answers
    /// 503 and legacy sessions are told to initialize again
    /// ([`crate::downstream::App::begin_draining`]) while new connections
    /// are still served, so a balancer's health check takes the box out
    /// before it stops listening. A second stop ends the wait.
    async fn drain(&self, controls: &mut Queue<impl Controls>) {
        let grace = self.app.server().fleet.drain_grace;
        self.app.begin_draining();
        if grace.is_zero() {
            return;
        }
        notify::status(&format!("draining for {grace:?} (server.drain_grace)"));
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            _ = controls.stop_requested() => {}
        }
    }

    /// What the watchdog and `STATUS=` read.
    fn health(&self) -> HealthView {
        HealthView {
            app: self.app.clone(),
            rules: self.watchdog.clone(),
        }
    }

    /// The runtime heartbeat (a root task) and the pinger thread.
    fn start_watchdog(&self, period: std::time::Duration) -> (notify::Watchdog, OwnedTask) {
        let heartbeat = notify::Heartbeat::new();
        let beat = heartbeat.clone();
        let task = OwnedTask::spawn(async move {
            let mut every = tokio::time::interval(period / 4);
            loop {
                every.tick().await;
                beat.beat();
            }
        });
        let pinger = notify::Watchdog::start(Arc::new(self.health()), heartbeat, period);
        (pinger, task)
    }

    /// `RELOADING=1`, re-read `source` under the running board profile; an
    /// invalid file is rejected whole (the running config stays, the error
    /// goes to the log, `STATUS=` and `/status`); a valid one is applied in
    /// place ([`Gateway::reload`]). Then `READY=1`. Returns false when a
    /// stop was requested meanwhile (the reload is abandoned).
    async fn reload_from(
        &mut self,
        source: Option<&Path>,
        controls: &mut Queue<impl Controls>,
    ) -> bool {
        notify::reloading();
        let note = match source {
            None => LastReload::applied(
                "reload: no config file (embedded default); nothing to do",
                false,
            ),
            Some(p) => match Config::load_for(p, self.board.as_ref())
                .map_err(|e| e.to_string())
                .and_then(|c| self.admissible(&c).map(|()| c))
            {
                Err(e) => {
                    let m = format!("reload rejected, the running config stays: {e}");
                    tracing::error!("{m}");
                    LastReload::rejected(m)
                }
                Ok(c) => match self.apply(c, controls).await {
                    Some(note) => note,
                    None => return false,
                },
            },
        };
        let msg = format!("{}; {}", note.message, self.health().status_line());
        self.app.set_last_reload(note);
        notify::ready(&msg);
        true
    }

    /// Applies a valid config and waits for its new upstreams' first
    /// attempts; `None` if a stop came first.
    async fn apply(
        &mut self,
        c: Config,
        controls: &mut Queue<impl Controls>,
    ) -> Option<LastReload> {
        warn_over_budget(&c);
        let report = {
            let reload = self.reload(c);
            tokio::pin!(reload);
            tokio::select! {
                r = &mut reload => r,
                _ = controls.stop_requested() => return None,
            }
        };
        tokio::select! {
            _ = self.wait_upstreams(START_BUDGET) => {}
            _ = controls.stop_requested() => return None,
        }
        Some(LastReload::applied(
            &report.to_string(),
            report.server_changed,
        ))
    }
}

/// [`Controls`] that remember a reload asked for while busy (starting,
/// or reloading) and hand it out next, as a signal queue would.
struct Queue<C> {
    inner: C,
    reload: bool,
}

impl<C: Controls> Queue<C> {
    async fn next(&mut self) -> Control {
        if std::mem::take(&mut self.reload) {
            return Control::Reload;
        }
        self.inner.next().await
    }

    /// Resolves at the next [`Control::Stop`]; a reload meanwhile is kept.
    async fn stop_requested(&mut self) {
        loop {
            match self.inner.next().await {
                Control::Stop => return,
                Control::Reload => self.reload = true,
            }
        }
    }
}

/// Logs a warning when `c`'s worst-case heap exceeds its board's budget
/// (`check-config` fails on it; `serve` and reload run anyway).
fn warn_over_budget(c: &Config) {
    if let Some(b) = &c.board {
        let worst = Estimate::of(c).total();
        if worst > b.heap_budget_bytes {
            tracing::warn!(
                "worst-case live heap {} exceeds the {} budget of board {} (see mcp-edge check-config)",
                mib(worst),
                mib(b.heap_budget_bytes),
                b.name
            );
        }
    }
}
