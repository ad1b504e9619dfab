//! The supervisor: one owner task per enabled upstream, and the only place
//! that spawns long-lived tasks.
//!
//! Each owner task runs connect, serve and reconnect as one loop, so a
//! reconnect can never start a second monitor. The task is held by an
//! [`OwnerHandle`] whose drop aborts it; every sleep also listens for shutdown.
//! (v0 policy: exponential backoff from [`limits::RECONNECT_INITIAL`] to
//! [`limits::RECONNECT_CAP`]; a later issue brings jitter, auth parking,
//! Retry-After and health probes.)

use crate::limits;
use crate::upstream::{handshake, http::HttpConn, stdio, Catalog, Conn, Status, Upstream};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Owns one upstream's task: dropping it aborts the task.
pub struct OwnerHandle {
    /// The upstream this task serves.
    pub upstream: Arc<Upstream>,
    task: Option<JoinHandle<()>>,
}

impl Drop for OwnerHandle {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Every owner task, keyed by upstream index, plus the shutdown signal.
pub struct Supervisor {
    owners: Vec<OwnerHandle>,
    shutdown: watch::Sender<bool>,
}

impl Supervisor {
    /// Starts one owner task per enabled upstream.
    pub fn start(upstreams: &[Arc<Upstream>]) -> Supervisor {
        let (shutdown, _) = watch::channel(false);
        let owners = upstreams
            .iter()
            .map(|up| OwnerHandle {
                upstream: up.clone(),
                task: up
                    .config
                    .enabled
                    .then(|| tokio::spawn(run_owner(up.clone(), shutdown.subscribe()))),
            })
            .collect();
        Supervisor { owners, shutdown }
    }

    /// Number of owner tasks running (one per enabled upstream, never more).
    pub fn live_tasks(&self) -> usize {
        self.owners
            .iter()
            .filter(|o| o.task.as_ref().is_some_and(|t| !t.is_finished()))
            .count()
    }

    /// Asks every owner to stop (closing stdio children, ending HTTP sessions)
    /// and waits up to `grace` for them.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.shutdown.send(true);
        for o in self.owners.iter_mut() {
            if let Some(t) = o.task.as_mut() {
                if tokio::time::timeout(grace, t).await.is_ok() {
                    o.task = None;
                }
            }
        }
    }
}

type Driver = Pin<Box<dyn Future<Output = String> + Send>>;

fn open(up: &Upstream) -> Result<(Conn, Driver), String> {
    use crate::config::Transport;
    match &up.config.transport {
        Transport::Stdio { .. } => {
            let (c, d) = stdio::open(&up.config, up.list_changed.clone(), up.relay_ctx())?;
            Ok((Conn::Stdio(c), d))
        }
        Transport::Http { .. } => {
            let c = HttpConn::new(&up.config, up.list_changed.clone(), up.relay_ctx())
                .map_err(|e| e.to_string())?;
            Ok((Conn::Http(Box::new(c)), Box::pin(std::future::pending())))
        }
        Transport::Builtin => Ok((Conn::Builtin, Box::pin(std::future::pending()))),
    }
}

async fn close(conn: &Conn) {
    match conn {
        Conn::Stdio(c) => c.close().await,
        Conn::Http(c) => c.close().await,
        Conn::Builtin => {}
    }
}

/// The owner loop of one upstream: connect, serve until lost, back off, repeat.
async fn run_owner(up: Arc<Upstream>, mut shutdown: watch::Receiver<bool>) {
    let name = up.name().to_string();
    let mut attempt: u32 = 0;
    loop {
        up.set_status(Status::Connecting);
        let failure = match open(&up) {
            Err(e) => e,
            Ok((conn, mut driver)) => {
                let conn = Arc::new(conn);
                let hs = tokio::select! {
                    r = handshake::open(&conn, up.config.era) => r.map_err(|e| e.to_string()),
                    reason = &mut driver => Err(reason),
                    _ = shutdown.changed() => { close(&conn).await; break; }
                };
                match hs {
                    Err(e) => e,
                    Ok(neg) => {
                        metrics::counter!(crate::metrics::UPSTREAM_CONNECTS, "upstream" => name.clone(), "outcome" => "ok").increment(1);
                        tracing::info!(upstream = %name, era = ?neg.era, "connected");
                        up.install(conn.clone(), neg.clone());
                        let refresh = async {
                            loop {
                                let c = Catalog::fetch(&up, &neg).await;
                                tracing::info!(upstream = %name, tools = c.tools.len(), prompts = c.prompts.len(), resources = c.resources.len(), "catalog loaded");
                                up.set_catalog(c);
                                up.set_status(Status::Ready { era: neg.era });
                                up.list_changed.notified().await;
                            }
                        };
                        attempt = 0;
                        let reason = tokio::select! {
                            reason = &mut driver => reason,
                            _ = up.lost.notified() => "transport error seen by a call".to_string(),
                            _ = refresh => unreachable!("refresh loop never ends"),
                            _ = shutdown.changed() => {
                                up.uninstall();
                                close(&conn).await;
                                let _ = tokio::time::timeout(Duration::from_secs(3), driver).await;
                                break;
                            }
                        };
                        up.uninstall();
                        close(&conn).await;
                        reason
                    }
                }
            }
        };
        metrics::counter!(crate::metrics::UPSTREAM_CONNECTS, "upstream" => name.clone(), "outcome" => "error").increment(1);
        attempt = attempt.saturating_add(1);
        let delay = backoff(attempt);
        tracing::warn!(upstream = %name, attempt, retry_in = ?delay, "upstream down: {failure}");
        up.set_status(Status::Backoff {
            attempt,
            delay,
            last_error: failure,
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => break,
        }
    }
    up.set_status(Status::Stopping);
}

/// `min(cap, initial × 2^(attempt-1))`.
fn backoff(attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    (limits::RECONNECT_INITIAL * 2u32.pow(exp)).min(limits::RECONNECT_CAP)
}

/// A long-lived task owned by its handle: dropping the handle aborts it.
pub struct OwnedTask(JoinHandle<()>);

impl OwnedTask {
    /// Spawns `fut` (the one sanctioned way to start a long-lived task outside an upstream).
    pub fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> OwnedTask {
        OwnedTask(tokio::spawn(fut))
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
