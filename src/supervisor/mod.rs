//! The supervisor: one owner task per enabled upstream, and the only place
//! that spawns long-lived tasks.
//!
//! Each owner task ([`owner`]) runs connect, health probing and reconnect as
//! one loop, so a reconnect can never start a second monitor. The task is
//! held by an [`OwnerHandle`] whose drop aborts it; every sleep also listens
//! for shutdown. The retry policy ([`backoff`]) and its persistence across
//! restarts ([`persist`]) live here and nowhere else.

pub mod backoff;
pub(crate) mod owner;
pub mod persist;

use crate::upstream::Upstream;
use std::future::Future;
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
    /// Starts one owner task per enabled upstream; `persist` (from
    /// `server.state_directory`) carries backoff across restarts.
    pub fn start(
        upstreams: &[Arc<Upstream>],
        persist: Option<Arc<persist::Persist>>,
    ) -> Supervisor {
        let (shutdown, _) = watch::channel(false);
        let owners = upstreams
            .iter()
            .map(|up| OwnerHandle {
                upstream: up.clone(),
                task: up.config.enabled.then(|| {
                    tokio::spawn(owner::run(
                        up.clone(),
                        shutdown.subscribe(),
                        persist.clone(),
                    ))
                }),
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
